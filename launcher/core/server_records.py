"""Run files: every `launcher serve` says where it listens, so other commands find it on any port.

A server writes `<state dir>/servers/<pid>.json` once it is ready (the content of its
`LAUNCHER_READY` line: URL, pid, models, whether a key is required) and removes it on the way
out. The run file also says how to start the same server again (`executable`, `argv`, `cwd`), so
an app update can stop the servers of the old version and start them again from the new one with
the same settings. `launcher launch`, `connect` and `ps` read these instead of assuming the default port. A
server killed without its chance to clean up leaves a stale file behind: a record whose process
is gone is ignored and deleted by whoever reads it next.
"""

from __future__ import annotations

import contextlib
import json
import os
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import psutil

from launcher.core import paths
from launcher.core.child_process import launcher_command

READY_PREFIX = "LAUNCHER_READY "
"""How the one stdout line of a ready `launcher serve` starts; the JSON after it is also its run file."""
ERROR_PREFIX = "LAUNCHER_ERROR "
"""How its stdout line starts when it fails to start (JSON: kind, message)."""


def servers_dir() -> Path:
    """Where the run files live."""
    return paths.state_dir() / "servers"


@dataclass(frozen=True)
class ServerRecord:
    """One running server, as its run file tells it."""

    url: str  # the root URL, without /v1
    pid: int
    models: tuple[str, ...]  # every name it answers (loaded or loadable on request)
    model: str | None  # the model it loaded at start (its default), when it has one
    context_length: int | None
    api_key_required: bool
    started_at: float  # the process's start time, so a reused pid is not taken for the server
    path: Path
    # How to start the same server again: `[executable, *argv]` run in `cwd` (see `restart_command`).
    # None / () in a run file written before these were recorded.
    executable: str | None = None
    argv: tuple[str, ...] = ()
    cwd: str | None = None

    @property
    def base_url(self) -> str:
        """The OpenAI-style base URL."""
        return f"{self.url}/v1"

    def serves(self, name: str) -> bool:
        """True when a request for `name` reaches a model of this server."""
        return name in self.models or name == self.model


def restart_command(arguments: list[str] | None = None) -> list[str]:
    """The command that starts this process again with the same arguments: `launcher_command()`
    (`[python, "-m", "launcher"]` from source or pip, the app's own executable when frozen) and
    `arguments` (default: this process's own, `sys.argv[1:]`).

    In an AppImage the executable is the AppImage file (`$APPIMAGE`), not the program inside it:
    that one lives in a mount that goes away with the process that mounted it, and an update
    replaces the AppImage file."""
    command = [*launcher_command(), *(sys.argv[1:] if arguments is None else arguments)]
    appimage = os.environ.get("APPIMAGE", "").strip()
    if paths.is_frozen() and appimage:
        command[0] = appimage
    return command


def record_server(ready: dict[str, Any], *, arguments: list[str] | None = None) -> Path:
    """Write this process's run file from its ready line's content; returns its path.

    Beside the ready line's fields it records the pid and start time, and how to start the same
    server again: `executable`, `argv` (what follows it: `["-m", "launcher", "serve", ...]` from
    source, `["serve", ...]` from a frozen app; `arguments` are the command line's words after the
    program, default this process's `sys.argv[1:]`) and the working folder `cwd` (a relative model
    path or `--config` file is relative to it). The arguments may hold `--api-key`; the file is
    created readable by its owner only (mkstemp), as the state folder's other files."""
    folder = servers_dir()
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / f"{os.getpid()}.json"
    command = restart_command(arguments)
    data = {
        **ready,
        "pid": os.getpid(),
        "started_at": psutil.Process().create_time(),
        "executable": command[0],
        "argv": command[1:],
        "cwd": _working_folder(),
    }
    # Written whole and renamed into place: a reader never sees half a record (nor the temp file,
    # which readers' `*.json` does not match).
    fd, temporary = tempfile.mkstemp(dir=folder, prefix=".", suffix=".tmp")
    with os.fdopen(fd, "w", encoding="utf-8") as file:
        json.dump(data, file)
    os.replace(temporary, path)
    return path


def _working_folder() -> str | None:
    try:
        return os.getcwd()
    except OSError:  # the folder was deleted under us
        return None


def remove_record(path: Path) -> None:
    """Remove a run file (on the server's way out); a missing one is fine."""
    with contextlib.suppress(OSError):  # gone already, or (Windows) still open in a reader
        path.unlink()


def preferred_server(servers: list[ServerRecord], port: int) -> ServerRecord | None:
    """The server to point a lasting setup at: the one on `port` (the default one the app and a plain
    `launcher serve` use), else the newest. A server `launcher launch` started for one run is newer
    but goes away with that run."""
    on_port = [s for s in servers if s.url.rsplit(":", 1)[-1] == str(port)]
    if on_port:
        return on_port[0]
    return servers[0] if servers else None


def running_servers() -> list[ServerRecord]:
    """The servers whose process still runs, newest first; stale run files are deleted."""
    folder = servers_dir()
    if not folder.is_dir():
        return []
    records = []
    for path in folder.glob("*.json"):
        record = _read(path)
        if record is None or not _alive(record):
            remove_record(path)
            continue
        records.append(record)
    return sorted(records, key=lambda r: r.started_at, reverse=True)


def _read(path: Path) -> ServerRecord | None:
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
        context = data.get("context_length")
        return ServerRecord(
            url=str(data["url"]).rstrip("/"),
            pid=int(data["pid"]),
            models=tuple(str(name) for name in data.get("models", [])),
            model=str(data["model"]) if data.get("model") else None,
            context_length=int(context) if context else None,
            api_key_required=bool(data.get("api_key_required")),
            started_at=float(data.get("started_at", 0.0)),
            path=path,
            executable=str(data["executable"]) if data.get("executable") else None,
            argv=tuple(str(word) for word in data.get("argv", [])),
            cwd=str(data["cwd"]) if data.get("cwd") else None,
        )
    except (OSError, ValueError, KeyError, TypeError):
        return None  # unreadable: treated as stale


def _alive(record: ServerRecord) -> bool:
    try:
        process = psutil.Process(record.pid)
        # A pid the system gave to another process since: its start time differs from the record's.
        return abs(process.create_time() - record.started_at) < 1.0 and process.status() != psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return False
    except psutil.AccessDenied:
        return True  # another user's live process: not ours to call stale
