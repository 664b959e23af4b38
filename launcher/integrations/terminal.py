"""Open a new terminal window that runs a command and stays open after it ends (the Agents page's Launch).

A coding agent is an interactive terminal program, so the app cannot run it in a window of its
own: it asks the system's terminal for a new window running `launcher launch AGENT`.

- macOS: Terminal.app through AppleScript, `tell application "Terminal" to do script "..."`
  (https://developer.apple.com/library/archive/documentation/AppleScript/Conceptual/AppleScriptLangGuide/,
  Terminal's scripting dictionary). `do script` types the command into a new window's login
  shell, so the window stays open with that shell when the command ends.
- Windows: Windows Terminal's `wt.exe new-tab` when it is there
  (https://learn.microsoft.com/windows/terminal/command-line-arguments), else `cmd.exe` in a
  new console window. Both run `cmd.exe /k`, which keeps the window open afterwards.
- Linux: `x-terminal-emulator -e` (Debian's alternative, whose `-e` takes the command and its
  arguments), else `gnome-terminal --`, `konsole -e` or `xterm -e`, the first that exists. The
  command runs in `sh -c`, which starts the user's shell when it ends, as those terminals close
  their window when their command exits.

The command is the launcher itself, started the way this process was (`launcher_command()`:
this Python with `-m launcher` from source, the app when frozen), so the terminal runs the very
launcher the app is.

The command starts in the folder the user chose (`cwd`), as a coding agent works on the folder it
starts in and a new terminal opens in its own default one (usually HOME): on Linux the `sh -c`
wrapper does `cd -- DIR` first, on macOS the typed line does `cd DIR &&`, and on Windows the cmd
line does `cd /d "DIR" &&` (Windows Terminal is also given `-d DIR` for the tab itself).
"""

from __future__ import annotations

import os
import shlex
import shutil
import subprocess
import sys
import threading
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from launcher.core import paths
from launcher.core.child_process import (
    WINDOWS_NEW_PROCESS_GROUP,
    launcher_command,
    launcher_environment,
    outside_environment,
)
from launcher.core.errors import LauncherError

Which = Callable[[str], str | None]

LINUX_TERMINALS: tuple[tuple[str, tuple[str, ...]], ...] = (
    ("x-terminal-emulator", ("-e",)),
    ("gnome-terminal", ("--",)),
    ("konsole", ("-e",)),
    ("xterm", ("-e",)),
)
# After the command: say how it ended, then the user's shell, so the window stays open.
_KEEP_OPEN = '"$@"; status=$?; echo; echo "[exited with status $status]"; exec "${SHELL:-/bin/sh}"'
# The folder comes as the first argument, never inside the script text, so no quoting can go wrong;
# when `cd` fails the command is not run, and the window stays open with cd's message.
_KEEP_OPEN_IN = 'cd -- "$1" && shift && ' + _KEEP_OPEN
_CMD_SPECIAL = set('^&|<>()%!"')
_CREATE_NEW_CONSOLE = 0x00000010  # subprocess's Windows-only constant, named here for every platform


class TerminalNotFoundError(LauncherError):
    """No terminal program was found to open the command in."""


class ProjectFolderError(LauncherError):
    """The folder to start the command in is not there (or cannot be named on this platform)."""


@dataclass(frozen=True)
class TerminalCommand:
    """How to start the terminal: `args` is a list, or on Windows the command line as written."""

    terminal: str
    args: list[str] | str
    creationflags: int = 0


def launch_invocation(*arguments: str) -> tuple[list[str], dict[str, str]]:
    """`launcher ARGUMENTS...` as this process would start it, and the environment it needs.

    From a source checkout that is not pip-installed, `-m launcher` needs the checkout on
    PYTHONPATH, as the app's own `launcher serve` child gets it (launcher/ui/server_process.py).
    """
    return [*launcher_command(), *arguments], launcher_environment(os.environ.get("PYTHONPATH"))


def _with_env(argv: Sequence[str], env: Mapping[str, str]) -> list[str]:
    # `env` is a program, so the variables reach the command whatever the user's shell is (fish too).
    return ["env", *(f"{name}={value}" for name, value in env.items()), *argv] if env else list(argv)


def applescript_string(text: str) -> str:
    """`text` as an AppleScript string literal."""
    return '"' + text.replace("\\", "\\\\").replace('"', '\\"') + '"'


def project_folder(folder: str | os.PathLike[str]) -> Path:
    """`folder` as an absolute path; ProjectFolderError when it is not an existing folder."""
    path = Path(folder).expanduser().absolute()
    if not path.is_dir():
        what = "is not a folder" if path.exists() else "does not exist"
        raise ProjectFolderError(f"Cannot open the terminal in {path}: it {what}. Choose another folder.")
    return path


def cmd_cd(folder: str) -> str:
    """`cd /d "FOLDER"` for cmd.exe, whatever the folder name holds.

    Inside quotes `&`, `|` and spaces are plain text, but cmd still expands `%NAME%` there, so each
    `%` is written outside the quotes as `^%`: on a command line (not in a batch file) cmd sees
    `%"..."^%` as a variable with an impossible name and leaves it, then drops the caret. `cd`
    itself removes every quote from its argument. A Windows file name cannot hold `"`.
    """
    if '"' in folder:
        raise ProjectFolderError(f"Cannot open the terminal in {folder}: a Windows folder name cannot hold a quote.")
    return "cd /d " + "^%".join(f'"{part}"' for part in folder.split("%"))


def cmd_command_line(argv: Sequence[str]) -> str:
    """`argv` as a line cmd.exe runs as those arguments.

    Each argument is quoted the way programs split their command line (`list2cmdline`, the C
    runtime's rules); cmd.exe's own special characters are then escaped with ^ wherever cmd sees
    them outside quotes (it toggles on every `"`, escaped or not), so `&` or `|` in a prompt is
    passed on, never run as a second command.
    """
    line = subprocess.list2cmdline(list(argv))
    out: list[str] = []
    quoted = False
    for char in line:
        if char == '"':
            quoted = not quoted
        elif not quoted and char in _CMD_SPECIAL:
            out.append("^")
        out.append(char)
    return "".join(out)


def terminal_command(
    argv: Sequence[str],
    *,
    env: Mapping[str, str] | None = None,
    cwd: str | os.PathLike[str] | None = None,
    platform: str = sys.platform,
    which: Which = shutil.which,
) -> TerminalCommand:
    """The command that opens a new terminal window running `argv` (with `env` added) and keeps it open.

    `cwd`: the folder the command starts in (ProjectFolderError when it is not one); None leaves
    the terminal's own default.
    """
    env = env or {}
    folder = None if cwd is None else str(project_folder(cwd))
    if platform == "darwin":
        # An absolute path never starts with `-`, so plain `cd` is safe in any login shell (fish too).
        line = shlex.join(_with_env(argv, env))
        if folder is not None:
            line = f"cd {shlex.quote(folder)} && {line}"
        script = f'tell application "Terminal" to do script {applescript_string(line)}'
        return TerminalCommand(
            "Terminal",
            ["osascript", "-e", script, "-e", 'tell application "Terminal" to activate'],
        )
    if platform == "win32":
        cd = "" if folder is None else cmd_cd(folder) + " && "
        sets = "".join(f'set "{name}={value}" && ' for name, value in env.items())
        inner = cd + sets + cmd_command_line(argv)
        wt = which("wt.exe") or which("wt")
        if wt:
            # wt reads `;` as the start of its next subcommand: an escaped one is passed on.
            escaped = inner.replace(";", "\\;")
            # `-d` starts the tab itself there too; the command line's own `cd` is what the
            # command relies on, the same line cmd runs without wt.
            directory = [] if folder is None else ["-d", folder.replace(";", "\\;")]
            program = subprocess.list2cmdline([wt, "new-tab", *directory, "cmd.exe", "/s", "/k"])
            return TerminalCommand("Windows Terminal", f'{program} "{escaped}"', WINDOWS_NEW_PROCESS_GROUP)
        # cmd in a new console window rather than `cmd /c start cmd /k ...`, which would parse
        # the command twice (once for `start`, once for the new cmd) and need two levels of escaping.
        return TerminalCommand("Command Prompt", f'cmd.exe /s /k "{inner}"', _CREATE_NEW_CONSOLE)
    for name, flag in LINUX_TERMINALS:
        found = which(name)
        if found:
            script, first = (_KEEP_OPEN, []) if folder is None else (_KEEP_OPEN_IN, [folder])
            return TerminalCommand(name, [found, *flag, "sh", "-c", script, "sh", *first, *_with_env(argv, env)])
    names = ", ".join(name for name, _ in LINUX_TERMINALS)
    raise TerminalNotFoundError(
        f"No terminal program was found to open it in (looked for {names}); "
        f"run it in a terminal yourself: {shlex.join(argv)}"
    )


def start_detached(command: TerminalCommand) -> None:
    """Start the terminal, not tied to this process: it may outlive the app."""
    if isinstance(command.args, str):
        process = subprocess.Popen(
            command.args, creationflags=command.creationflags, close_fds=True, env=outside_environment()
        )
    else:
        process = subprocess.Popen(
            command.args,
            env=outside_environment(),  # a terminal program, not ours: the system's libraries
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            start_new_session=True,  # no hang-up signal when the app quits
            close_fds=True,
        )
    # osascript and gnome-terminal return at once, xterm when its window closes: reap it then.
    threading.Thread(target=process.wait, name=f"{command.terminal} reaper", daemon=True).start()


def open_in_terminal(
    argv: Sequence[str],
    *,
    env: Mapping[str, str] | None = None,
    cwd: str | os.PathLike[str] | None = None,
    platform: str = sys.platform,
    which: Which = shutil.which,
) -> TerminalCommand:
    """Open a new terminal window running `argv` in `cwd`; the command used.

    TerminalNotFoundError when there is no terminal, ProjectFolderError when `cwd` is no folder.
    """
    command = terminal_command(argv, env=env, cwd=cwd, platform=platform, which=which)
    try:
        start_detached(command)
    except OSError as err:
        raise TerminalNotFoundError(f"{command.terminal} could not be started: {err}") from err
    return command


def open_launch(
    agent_id: str, folder: str | os.PathLike[str], *, url: str | None = None, api_key: str | None = None
) -> TerminalCommand:
    """Open a new terminal window running `launcher launch AGENT_ID` in the project `folder`.

    `url` and `api_key`: the server the app shows. The key cannot travel in the command line (any
    user's `ps` shows it, and Terminal.app types it into the window and the shell's history) nor in
    the environment (Terminal.app does not pass ours on): it goes in a file only this user can read.
    """
    arguments = ["launch", agent_id]
    if url:
        arguments += ["--url", url]
    if api_key:
        arguments += ["--api-key-file", str(write_private(paths.state_dir() / LAUNCH_KEY_FILE, api_key + "\n"))]
    argv, env = launch_invocation(*arguments)
    return open_in_terminal(argv, env=env, cwd=folder)


LAUNCH_KEY_FILE = "launch-api-key"


def write_private(path: Path, text: str) -> Path:
    """Write `text` to `path`, readable by this user only from the first instant (a temp file made 0600,
    then renamed over the old one); returns `path`."""
    path.parent.mkdir(parents=True, exist_ok=True)
    temporary = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    descriptor = os.open(temporary, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(descriptor, "w", encoding="utf-8") as file:
        file.write(text)
    os.replace(temporary, path)
    return path


__all__ = [
    "ProjectFolderError",
    "TerminalCommand",
    "TerminalNotFoundError",
    "cmd_cd",
    "cmd_command_line",
    "launch_invocation",
    "open_in_terminal",
    "open_launch",
    "project_folder",
    "terminal_command",
]
