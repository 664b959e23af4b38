"""Opening a new terminal window: the command for each platform, its quoting, and a real start on Linux."""

from __future__ import annotations

import json
import os
import re
import shlex
import subprocess
import sys
import time
from pathlib import Path

import pytest

from launcher.integrations import terminal
from launcher.integrations.terminal import (
    ProjectFolderError,
    TerminalNotFoundError,
    cmd_cd,
    cmd_command_line,
    launch_invocation,
    open_in_terminal,
    open_launch,
    terminal_command,
)

PROMPT = """fix the "login" bug; it's in $HOME & `src` | now %PATH%"""
ARGV = ["/Applications/Launcher App.app/Contents/MacOS/launcher", "launch", "claude-code", "--", PROMPT]


def only(*names: str):  # type: ignore[no-untyped-def]
    """A `which` that finds just these programs, in /usr/bin."""
    return lambda name: f"/usr/bin/{name}" if name in names else None


@pytest.fixture
def project(tmp_path: Path) -> Path:
    """A project folder whose name needs quoting everywhere: spaces, quotes, `&`, `%`, `;`, `$`."""
    folder = tmp_path / """it's "my" app & 50%PATH%; $HOME"""
    folder.mkdir()
    return folder


@pytest.fixture
def windows_project(tmp_path: Path) -> Path:
    """The same for Windows, where a file name cannot hold a quote."""
    folder = tmp_path / "it's my app & 50%PATH%; x"
    folder.mkdir()
    return folder


def pwd_recorder(tmp_path: Path) -> tuple[Path, Path]:
    """A program that writes the folder it runs in, and its arguments, to a file; both paths."""
    record = tmp_path / "pwd.json"
    recorder = tmp_path / "recorder"
    recorder.write_text(
        f"#!{sys.executable}\nimport json, os, sys\n"
        f"json.dump({{'cwd': os.getcwd(), 'argv': sys.argv[1:]}}, open({str(record)!r}, 'w'))\n"
    )
    recorder.chmod(0o755)
    return recorder, record


def applescript_literal(script: str) -> str:
    """The text of the `do script "..."` literal, unescaped as AppleScript reads it."""
    match = re.fullmatch(r'tell application "Terminal" to do script "((?:[^"\\]|\\.)*)"', script)
    assert match, script
    return re.sub(r"\\(.)", r"\1", match.group(1))


def test_macos_runs_the_command_in_a_new_terminal_app_window() -> None:
    command = terminal_command(ARGV, platform="darwin", which=only())
    assert command.terminal == "Terminal"
    assert isinstance(command.args, list)
    osascript, flag, script, flag2, activate = command.args
    assert (osascript, flag, flag2) == ("osascript", "-e", "-e")
    assert activate == 'tell application "Terminal" to activate'
    # The shell in the new window splits the typed line back into exactly these arguments.
    assert shlex.split(applescript_literal(script)) == ARGV


def test_macos_passes_the_environment_through_env() -> None:
    command = terminal_command(["launcher", "launch", "codex"], env={"PYTHONPATH": "/src dir"}, platform="darwin")
    assert isinstance(command.args, list)
    assert shlex.split(applescript_literal(command.args[2])) == [
        "env",
        "PYTHONPATH=/src dir",
        "launcher",
        "launch",
        "codex",
    ]


def test_windows_prefers_windows_terminal() -> None:
    command = terminal_command(
        ["C:\\Launcher\\launcher-cli.exe", "launch", "codex"], platform="win32", which=only("wt.exe")
    )
    assert command.terminal == "Windows Terminal"
    assert command.args == '/usr/bin/wt.exe new-tab cmd.exe /s /k "C:\\Launcher\\launcher-cli.exe launch codex"'


def test_windows_without_windows_terminal_opens_cmd_in_a_new_console() -> None:
    argv = ["C:\\Program Files\\Launcher\\launcher-cli.exe", "launch", "codex"]
    command = terminal_command(argv, env={"PYTHONPATH": "C:\\src"}, platform="win32", which=only())
    assert command.terminal == "Command Prompt"
    assert command.args == (
        'cmd.exe /s /k "set "PYTHONPATH=C:\\src" && "C:\\Program Files\\Launcher\\launcher-cli.exe" launch codex"'
    )
    assert command.creationflags == 0x10  # CREATE_NEW_CONSOLE: its own window, which `/k` keeps open


def test_cmd_line_escapes_cmd_specials_outside_quotes_only() -> None:
    assert cmd_command_line(["a", "b c"]) == 'a "b c"'
    assert cmd_command_line(["x&y", "50%"]) == "x^&y 50^%"
    # cmd toggles its quote state on the escaped quotes too: `& bye` is outside them, so escaped.
    assert cmd_command_line(["say", 'hi "you & me"']) == 'say "hi \\"you ^& me\\""'


def test_windows_terminal_semicolons_are_escaped() -> None:
    command = terminal_command(["launcher", "a;b c"], platform="win32", which=only("wt"))
    assert isinstance(command.args, str) and command.args.endswith(' /s /k "launcher "a\\;b c""')


@pytest.mark.parametrize(
    ("present", "expected"),
    [
        (("x-terminal-emulator", "gnome-terminal", "xterm"), ["/usr/bin/x-terminal-emulator", "-e"]),
        (("gnome-terminal", "konsole", "xterm"), ["/usr/bin/gnome-terminal", "--"]),
        (("konsole", "xterm"), ["/usr/bin/konsole", "-e"]),
        (("xterm",), ["/usr/bin/xterm", "-e"]),
    ],
)
def test_linux_picks_the_first_terminal_there_is(present: tuple[str, ...], expected: list[str]) -> None:
    command = terminal_command(["launcher", "launch", "codex"], platform="linux", which=only(*present))
    assert isinstance(command.args, list)
    assert command.args[:2] == expected
    assert command.args[2:4] == ["sh", "-c"] and command.args[-3:] == ["launcher", "launch", "codex"]


def test_linux_without_a_terminal_says_what_to_run() -> None:
    with pytest.raises(TerminalNotFoundError) as raised:
        terminal_command(["launcher", "launch", "codex"], platform="linux", which=only())
    assert "xterm" in str(raised.value) and "launcher launch codex" in str(raised.value)


@pytest.mark.skipif(os.name == "nt", reason="a fake POSIX terminal")
def test_the_linux_command_runs_the_arguments_as_given_then_a_shell(tmp_path: Path) -> None:
    """Run what the terminal would run (its `-e` arguments) and see the exact argv and the shell after it."""
    record = tmp_path / "argv.json"
    recorder = tmp_path / "recorder"
    recorder.write_text(f"#!{sys.executable}\nimport json, sys\njson.dump(sys.argv[1:], open({str(record)!r}, 'w'))\n")
    recorder.chmod(0o755)
    after = tmp_path / "after"
    after.write_text(f"#!/bin/sh\necho shell-started > {tmp_path / 'shell'}\n")
    after.chmod(0o755)
    command = terminal_command(
        [str(recorder), "launch", "aider", PROMPT], env={"ZZ": "1 2"}, platform="linux", which=only("xterm")
    )
    assert isinstance(command.args, list)
    inside = command.args[2:]  # what xterm -e runs
    result = subprocess.run(inside, env={**os.environ, "SHELL": str(after)}, capture_output=True, text=True, timeout=30)
    assert result.returncode == 0, result.stderr
    assert json.loads(record.read_text()) == ["launch", "aider", PROMPT]
    assert "[exited with status 0]" in result.stdout
    assert (tmp_path / "shell").read_text().strip() == "shell-started"


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="the fake terminal stands in for a Linux one")
def test_open_in_terminal_starts_the_terminal_detached(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    record = tmp_path / "terminal.json"
    fake_xterm = bin_dir / "xterm"
    fake_xterm.write_text(
        f"#!{sys.executable}\nimport json, os, sys\n"
        f"json.dump({{'argv': sys.argv[1:], 'sid': os.getsid(0) == os.getpid()}}, open({str(record)!r}, 'w'))\n"
    )
    fake_xterm.chmod(0o755)
    monkeypatch.setenv("PATH", str(bin_dir))
    command = open_in_terminal(["launcher", "launch", "codex"])
    assert command.terminal == "xterm"
    deadline = time.monotonic() + 20
    while not record.exists() and time.monotonic() < deadline:
        time.sleep(0.05)
    seen = json.loads(record.read_text())
    assert seen["argv"][0] == "-e" and seen["argv"][-3:] == ["launcher", "launch", "codex"]
    assert seen["sid"]  # its own session: quitting the app does not hang it up


def test_a_terminal_that_cannot_start_is_a_launcher_error(monkeypatch: pytest.MonkeyPatch) -> None:
    def refuse(_command: terminal.TerminalCommand) -> None:
        raise PermissionError("not allowed")

    monkeypatch.setattr(terminal, "start_detached", refuse)
    with pytest.raises(TerminalNotFoundError, match="xterm could not be started: not allowed"):
        open_in_terminal(["launcher"], platform="linux", which=only("xterm"))


def test_launch_invocation_is_the_launcher_this_process_runs(tmp_path: Path) -> None:
    argv, env = launch_invocation("--help")
    assert argv == [sys.executable, "-m", "launcher", "--help"]  # a source checkout, not a frozen app
    assert Path(env["PYTHONPATH"].split(os.pathsep)[0]) == Path(terminal.__file__).resolve().parents[2]
    # It runs from anywhere (a terminal opens in the user's home, not in this checkout).
    result = subprocess.run(argv, cwd=tmp_path, env={**os.environ, **env}, capture_output=True, text=True, timeout=60)
    assert result.returncode == 0, result.stderr
    assert "launch" in result.stdout or "serve" in result.stdout


@pytest.mark.skipif(os.name == "nt", reason="runs the typed line in a POSIX shell")
def test_macos_types_a_cd_into_the_project_before_the_command(tmp_path: Path, project: Path) -> None:
    recorder, record = pwd_recorder(tmp_path)
    command = terminal_command([str(recorder), "launch", "codex", PROMPT], cwd=project, platform="darwin")
    assert isinstance(command.args, list)
    line = applescript_literal(command.args[2])
    assert line.startswith("cd ") and "--" not in line.split("&&")[0]  # plain cd: fish takes it too
    # Type the line into a shell the way Terminal's window does, from somewhere else.
    result = subprocess.run(["sh", "-c", line], cwd=tmp_path, capture_output=True, text=True, timeout=30)
    assert result.returncode == 0, result.stderr
    assert json.loads(record.read_text()) == {"cwd": str(project), "argv": ["launch", "codex", PROMPT]}


def test_windows_terminal_starts_the_tab_and_the_command_in_the_project(windows_project: Path) -> None:
    folder = str(windows_project)
    command = terminal_command(["launcher", "launch", "codex"], cwd=windows_project, platform="win32", which=only("wt"))
    assert isinstance(command.args, str)
    # `-d` quoted as one argument for wt, its `;` escaped so wt does not start a second tab there.
    tab_folder = folder.replace(";", "\\;")
    assert command.args.startswith(f'/usr/bin/wt new-tab -d "{tab_folder}" cmd.exe /s /k "cd /d ')
    assert command.args.endswith(' && launcher launch codex"')


def test_cmd_changes_to_the_project_folder_first(windows_project: Path) -> None:
    argv = ["C:\\Program Files\\Launcher\\launcher-cli.exe", "launch", "codex"]
    command = terminal_command(argv, env={"PYTHONPATH": "C:\\src"}, cwd=windows_project, platform="win32", which=only())
    assert command.terminal == "Command Prompt"
    head, tail = str(windows_project).split("%PATH%")
    # `&` and `;` are inside quotes; each `%` is outside them, escaped, so cmd never expands %PATH%.
    assert command.args == (
        f'cmd.exe /s /k "cd /d "{head}"^%"PATH"^%"{tail}" && set "PYTHONPATH=C:\\src" && '
        '"C:\\Program Files\\Launcher\\launcher-cli.exe" launch codex"'
    )


def test_cmd_cd_quoting() -> None:
    assert cmd_cd("C:\\My Projects\\a&b") == 'cd /d "C:\\My Projects\\a&b"'
    assert cmd_cd("D:\\100%") == 'cd /d "D:\\100"^%""'
    with pytest.raises(ProjectFolderError, match="cannot hold a quote"):
        cmd_cd('C:\\say "hi"')


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="the fake terminal stands in for a Linux one")
def test_the_linux_terminal_runs_the_command_in_the_project(
    tmp_path: Path, project: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A fake xterm that really runs what it is given after `-e`: the command starts in the project."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    fake_xterm = bin_dir / "xterm"
    fake_xterm.write_text(
        f"#!{sys.executable}\nimport os, sys\nassert sys.argv[1] == '-e'\nos.execvp(sys.argv[2], sys.argv[2:])\n"
    )
    fake_xterm.chmod(0o755)
    out = tmp_path / "pwd.txt"
    monkeypatch.setenv("PATH", f"{bin_dir}{os.pathsep}{os.environ['PATH']}")
    monkeypatch.setenv("SHELL", "true")  # the shell that keeps the window open ends at once here
    monkeypatch.chdir(tmp_path)  # somewhere else than the project
    command = open_in_terminal(["sh", "-c", f"pwd > {shlex.quote(str(out))}"], cwd=project)
    assert command.terminal == "xterm"
    deadline = time.monotonic() + 20
    while not (out.exists() and out.read_text().endswith("\n")) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert out.read_text() == f"{project}\n"


def test_a_folder_that_is_not_there_is_refused_before_any_terminal_starts(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    started: list[terminal.TerminalCommand] = []
    monkeypatch.setattr(terminal, "start_detached", started.append)
    with pytest.raises(ProjectFolderError, match=r"it does not exist\. Choose another folder\."):
        open_launch("codex", tmp_path / "gone")
    (tmp_path / "notes.txt").write_text("")
    with pytest.raises(ProjectFolderError, match="is not a folder"):
        terminal_command(["launcher"], cwd=tmp_path / "notes.txt", platform="linux", which=only("xterm"))
    assert started == []


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="a fake Linux terminal")
def test_open_launch_runs_launch_in_the_folder(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    (bin_dir / "xterm").write_text("#!/bin/sh\n")
    (bin_dir / "xterm").chmod(0o755)
    monkeypatch.setenv("PATH", str(bin_dir))
    started: list[terminal.TerminalCommand] = []
    monkeypatch.setattr(terminal, "start_detached", started.append)
    command = open_launch("aider", tmp_path)
    assert started == [command] and isinstance(command.args, list)
    assert command.args[:6] == [str(bin_dir / "xterm"), "-e", "sh", "-c", terminal._KEEP_OPEN_IN, "sh"]
    assert command.args[6] == str(tmp_path) and command.args[-2:] == ["launch", "aider"]


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="a fake Linux terminal")
def test_the_apps_server_key_goes_to_launch_in_a_private_file_not_the_command_line(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    (bin_dir / "xterm").write_text("#!/bin/sh\n")
    (bin_dir / "xterm").chmod(0o755)
    monkeypatch.setenv("PATH", str(bin_dir))
    started: list[terminal.TerminalCommand] = []
    monkeypatch.setattr(terminal, "start_detached", started.append)
    command = open_launch("aider", tmp_path, url="http://127.0.0.1:9/v1", api_key="sk-secret")
    assert isinstance(command.args, list)
    assert "sk-secret" not in " ".join(command.args)
    arguments = command.args[command.args.index("launch") :]
    key_file = Path(arguments[arguments.index("--api-key-file") + 1])
    assert arguments[:4] == ["launch", "aider", "--url", "http://127.0.0.1:9/v1"]
    assert key_file.read_text() == "sk-secret\n"
    assert key_file.stat().st_mode & 0o777 == 0o600
