"""Starting the launcher as its own child process, and a child that ends with its parent.

The app runs the server (`launcher serve`) as a child, and the llama.cpp engine runs a short CPU
probe as one. From a source checkout or a pip install the program is this Python with
`-m launcher`; in a frozen app (PyInstaller) `sys.executable` is the app itself, which takes the
launcher's arguments directly and has no `-m` or `-c` to offer. `launcher_command()` is the one
answer for both, so a child starts the same way however the launcher was installed, and anything
a child must do (a probe) is a launcher subcommand rather than a Python snippet.

On Linux a child started by the app also asks the kernel to end it when the app dies, even by
SIGKILL or a crash, so no server outlives its window. The child does that itself, first thing
(`follow_parent`, called by `launcher/__main__.py`, the entry of both `-m launcher` and the
frozen app), when the app names itself in `PARENT_PID_ENV`: a wrapper program in between would
cost a second interpreter start-up, and a frozen app has no interpreter to run one with.
"""

from __future__ import annotations

import ctypes
import os
import signal
import sys
from collections.abc import MutableMapping
from pathlib import Path
from typing import Any

from launcher.core.paths import is_frozen

PARENT_PID_ENV = "LAUNCHER_PARENT_PID"
"""Set by the app for its children: the pid the child should die with (Linux)."""

WINDOWS_CONSOLE_EXE = "launcher-cli.exe"
"""The frozen Windows build's console companion, next to the windowed `launcher.exe`.

A windowed exe has no standard streams to speak of, while the app reads the server's
`LAUNCHER_READY` line from its stdout; the console build of the same program has them (and
Qt starts a console child from a windowed parent without opening a console window)."""

_PR_SET_PDEATHSIG = 1  # <linux/prctl.h>


def launcher_command() -> list[str]:
    """The argv prefix that runs `launcher ...` the way this process was started.

    From source or a pip install: `[python, "-m", "launcher"]`. Frozen: `[the app]`, or on
    Windows its console companion when it ships one.
    """
    if not is_frozen():
        return [sys.executable, "-m", "launcher"]
    if sys.platform == "win32":
        console = Path(sys.executable).with_name(WINDOWS_CONSOLE_EXE)
        if console.is_file():
            return [str(console)]
    return [sys.executable]


WINDOWS_NEW_PROCESS_GROUP = 0x00000200
"""subprocess.CREATE_NEW_PROCESS_GROUP, which only Windows' subprocess module defines."""


def own_process_group() -> dict[str, Any]:
    """Popen arguments for a child in a process group of its own: the Ctrl-C typed in our terminal does
    not reach it (POSIX sends it to the foreground group, Windows to every process of the console but
    those in a group of their own), and the whole group can be ended at once (POSIX: os.killpg)."""
    if sys.platform == "win32":
        return {"creationflags": WINDOWS_NEW_PROCESS_GROUP}
    return {"start_new_session": True}


def outside_environment() -> dict[str, str]:
    """Our environment as a program outside the launcher should get it. A frozen Linux app runs with
    LD_LIBRARY_PATH pointing into its bundle (PyInstaller keeps the user's own in LD_LIBRARY_PATH_ORIG):
    node and the agents must load the system's libraries, not ours."""
    env = dict(os.environ)
    if is_frozen() and "LD_LIBRARY_PATH" in env:
        original = env.pop("LD_LIBRARY_PATH_ORIG", None)
        if original:
            env["LD_LIBRARY_PATH"] = original
        else:
            del env["LD_LIBRARY_PATH"]
    return env


def launcher_environment(existing_pythonpath: str | None) -> dict[str, str]:
    """What a child started with `launcher_command()` needs in its environment: from a source
    checkout that is not pip-installed, the checkout on PYTHONPATH before `existing_pythonpath`, so
    `-m launcher` finds it from any folder; nothing for a frozen app, which carries its modules."""
    if is_frozen():
        return {}
    source_root = str(Path(__file__).resolve().parents[2])
    return {"PYTHONPATH": source_root + (os.pathsep + existing_pythonpath if existing_pythonpath else "")}


def parent_environment(pid: int | None = None) -> dict[str, str]:
    """What to add to a child's environment so that `follow_parent` ties it to this process."""
    return {PARENT_PID_ENV: str(os.getpid() if pid is None else pid)}


def arm_parent_death_signal() -> bool:
    """Ask Linux to send this process SIGTERM when its parent dies, even by SIGKILL; True when armed.
    (Also run in a non-launcher child, between fork and exec, as its `preexec_fn`.)"""
    try:
        return bool(ctypes.CDLL(None, use_errno=True).prctl(_PR_SET_PDEATHSIG, signal.SIGTERM, 0, 0, 0) == 0)
    except (OSError, AttributeError):
        return False


def follow_parent(environ: MutableMapping[str, str] | None = None) -> bool:
    """If a parent named itself in PARENT_PID_ENV, end this process when that parent dies (Linux).

    Returns True when the death signal is armed. The variable is removed first, so this
    process's own children (the CPU probe) are not tied to the app instead of to us. If the
    parent is already gone (it died between starting us and this call, and we were handed to
    another process) we exit at once, as the signal would have told us to.
    """
    env = os.environ if environ is None else environ
    value = env.pop(PARENT_PID_ENV, None)
    if value is None or not sys.platform.startswith("linux"):
        return False
    try:
        parent = int(value)
    except ValueError:
        return False
    if not arm_parent_death_signal():
        return False  # the app still stops us when it quits normally
    if os.getppid() != parent:
        raise SystemExit(0)
    return True
