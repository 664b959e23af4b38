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
    TerminalNotFoundError,
    cmd_command_line,
    launch_invocation,
    open_in_terminal,
    terminal_command,
)

PROMPT = """fix the "login" bug; it's in $HOME & `src` | now %PATH%"""
ARGV = ["/Applications/Launcher App.app/Contents/MacOS/launcher", "launch", "claude-code", "--", PROMPT]


def only(*names: str):  # type: ignore[no-untyped-def]
    """A `which` that finds just these programs, in /usr/bin."""
    return lambda name: f"/usr/bin/{name}" if name in names else None


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
