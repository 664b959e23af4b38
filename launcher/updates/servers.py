"""The servers an app update stops first and starts again afterwards, with the same settings.

A running `launcher serve` holds the files of the version it runs from; an update of that
installation stops it cleanly (SIGTERM, then SIGKILL after 20 s) and, once the new version is in
place, starts it again from the new executable with the same command line, in the same folder and
with the same environment (read from the running process before it is stopped, so a key given in
`LAUNCHER_API_KEY`, the GPU it was pointed at or its `LAUNCHER_HOME` stay as they were). Each run
file says how its server was started (`executable`, `argv`, `cwd`: `launcher.core.server_records`).

A server that required an API key is not started again when its key cannot be carried over: its
environment (where `LAUNCHER_API_KEY` may have been) could not be read and its command line names no
`--api-key` / `--api-key-file` (`key_would_be_lost`); it is reported instead. And a restarted server
that comes back without the API key its predecessor required is stopped at once and reported: an
update must never leave an open server where a locked one was, not even for a moment.

Other processes of the same installation that are not servers (the app's window, `launcher
launch`) cannot be stopped and restarted from here: `other_processes` finds them, and the update
asks the user to quit them first.
"""

from __future__ import annotations

import contextlib
import json
import os
import subprocess
import threading
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import psutil

from launcher.core import paths
from launcher.core.child_process import own_process_group
from launcher.core.server_records import ERROR_PREFIX, ServerRecord, remove_record, running_servers
from launcher.updates.current import Installation
from launcher.updates.install import new_version_environment

STOP_TIMEOUT_S = 20.0
"""How long a server may take to stop after SIGTERM before it is killed."""
READY_TIMEOUT_S = 120.0
"""How long a restarted server may take to load its model and write its run file."""


@dataclass(frozen=True)
class StoppedServer:
    """A server stopped for an update, and what it needs to start again."""

    record: ServerRecord
    environment: dict[str, str] | None  # the one it ran with; None: unreadable (ours is used instead)


@dataclass(frozen=True)
class Restarted:
    """What became of one stopped server: `server` is its new run file's record, None when it did not start."""

    stopped: StoppedServer
    server: ServerRecord | None
    message: str
    log: Path | None = None


def servers_of(installation: Installation) -> list[ServerRecord]:
    """The running servers whose program lies in the installation's target (its folder, bundle or AppImage)."""
    target = installation.target
    if target is None:
        return []
    return [record for record in running_servers() if record.executable and inside(record.executable, target)]


def inside(path: str | Path, target: Path) -> bool:
    """True when `path` is `target` or lies in it, as written or with links resolved (a venv's
    python is a link out of the venv; an installation may be reached through a linked folder)."""
    candidates = {Path(os.path.abspath(path)), Path(os.path.realpath(path))}
    roots = {Path(os.path.abspath(target)), Path(os.path.realpath(target))}
    return any(candidate == root or root in candidate.parents for candidate in candidates for root in roots)


def stop(records: Sequence[ServerRecord], *, timeout: float = STOP_TIMEOUT_S) -> list[StoppedServer]:
    """Stop the servers (SIGTERM, SIGKILL after `timeout` s, then their children too) and return
    them with the environment each ran with. A server already gone counts as stopped."""
    stopped: list[StoppedServer] = []
    processes: list[psutil.Process] = []
    children: list[psutil.Process] = []
    for record in records:
        process = _process_of(record)
        environment = None
        if process is not None:
            with contextlib.suppress(psutil.Error):
                environment = process.environ()
            with contextlib.suppress(psutil.Error):
                children.extend(process.children(recursive=True))
            with contextlib.suppress(psutil.NoSuchProcess):
                process.terminate()
                processes.append(process)
        stopped.append(StoppedServer(record, environment))
    _, alive = psutil.wait_procs(processes, timeout=timeout)
    for process in alive:
        with contextlib.suppress(psutil.NoSuchProcess):
            process.kill()
    psutil.wait_procs(alive, timeout=5.0)
    # An engine child a killed server could not stop (a SIGTERM'd server stops its own).
    leftover = [child for child in children if _running(child)]
    for child in leftover:
        with contextlib.suppress(psutil.NoSuchProcess):
            child.kill()
    psutil.wait_procs(leftover, timeout=5.0)
    for server in stopped:
        remove_record(server.record.path)  # a killed server leaves its run file behind
    return stopped


def restart(
    stopped: Sequence[StoppedServer], new_executable: str | None = None, *, timeout: float = READY_TIMEOUT_S
) -> list[Restarted]:
    """Start each stopped server again, detached, with its own command line but `new_executable`
    (default: the one it ran) and wait until each has written its run file (or failed, or `timeout`
    passed). Their output goes to `<state dir>/logs/`."""
    started: list[tuple[StoppedServer, subprocess.Popen[bytes] | None, Path | None, str]] = []
    for server in stopped:
        started.append(_start(server, new_executable))
    deadline = time.monotonic() + timeout
    results = []
    for server, process, log, problem in started:
        if process is None or log is None:
            results.append(Restarted(server, None, problem))
            continue
        results.append(_wait_ready(server, process, log, deadline))
    return results


def other_processes(installation: Installation, servers: Sequence[ServerRecord]) -> list[psutil.Process]:
    """Processes running this installation's program that are not its servers (nor their children),
    nor this process and the ones that started it: the app's window, `launcher launch`, ... An update
    does not stop those; the user quits them."""
    target = installation.target
    if target is None:
        return []
    excluded = {os.getpid()}
    with contextlib.suppress(psutil.Error):
        excluded.update(parent.pid for parent in psutil.Process().parents())
    for record in servers:
        excluded.add(record.pid)
        with contextlib.suppress(psutil.Error):
            excluded.update(child.pid for child in psutil.Process(record.pid).children(recursive=True))
    found = []
    for process in psutil.process_iter(["pid", "exe"]):
        if process.info["pid"] in excluded:
            continue
        exe = process.info.get("exe")
        if not exe:
            continue
        if installation.kind == "appimage":
            # The app runs from the AppImage's mount; the AppImage file itself is the runtime that mounts it.
            if os.path.basename(exe).startswith("launcher") and _appimage_of(process) == str(target):
                found.append(process)
        elif inside(exe, target):
            found.append(process)
    return found


def describe(process: psutil.Process) -> str:
    """`pid 123: launcher gui` for a message."""
    try:
        words = process.cmdline()
    except psutil.Error:
        words = []
    shown = " ".join(["launcher", *words[1:]]) if words else "launcher"
    return f"pid {process.pid}: {shown[:80]}"


# -- helpers ----------------------------------------------------------------------------------------------


def _process_of(record: ServerRecord) -> psutil.Process | None:
    try:
        process = psutil.Process(record.pid)
        if abs(process.create_time() - record.started_at) < 1.0:
            return process
    except psutil.Error:
        pass
    return None  # gone already (or the pid is another process's now)


def _running(process: psutil.Process) -> bool:
    try:
        return process.is_running() and process.status() != psutil.STATUS_ZOMBIE
    except psutil.Error:
        return False


def _appimage_of(process: psutil.Process) -> str | None:
    try:
        return process.environ().get("APPIMAGE")
    except psutil.Error:
        return None


def _start(
    server: StoppedServer, new_executable: str | None
) -> tuple[StoppedServer, subprocess.Popen[bytes] | None, Path | None, str]:
    record = server.record
    executable = new_executable or record.executable
    if not executable or not record.argv:
        return (
            server,
            None,
            None,
            f"{record.url}: its run file does not say how it was started; start it again yourself.",
        )
    if key_would_be_lost(server):
        return (
            server,
            None,
            None,
            f"{record.url}: it required an API key, and where its key came from could not be read (its "
            "environment), so it was not started again; start it again with its key.",
        )
    frozen = record.argv[:2] != ("-m", "launcher")
    environment = new_version_environment(server.environment, frozen=frozen)
    cwd = record.cwd if record.cwd and os.path.isdir(record.cwd) else None
    logs = paths.state_dir() / "logs"
    log = logs / f"server-restart-{time.strftime('%Y%m%d-%H%M%S')}-{record.pid}.log"
    try:
        logs.mkdir(parents=True, exist_ok=True)
        with log.open("wb") as output:
            process = subprocess.Popen(
                [executable, *record.argv],
                stdin=subprocess.DEVNULL,
                stdout=output,
                stderr=subprocess.STDOUT,
                cwd=cwd,
                env=environment,
                close_fds=True,
                **own_process_group(),  # outlives this process; our Ctrl-C does not reach it
            )
    except OSError as err:
        return server, None, None, f"{record.url}: could not be started again ({err})."
    # Reaped while this process runs, so it never lingers as a zombie child.
    threading.Thread(target=process.wait, name="restarted server reaper", daemon=True).start()
    return server, process, log, ""


KEY_OPTIONS = ("--api-key", "--api-key-file")
"""The `launcher serve` options that give the key on the command line (carried over with it)."""


def key_would_be_lost(server: StoppedServer) -> bool:
    """True when `server` required an API key and starting it again might not give it one: its
    environment could not be read (the key may have been its LAUNCHER_API_KEY) and its command line
    has no key option. Started anyway, it would serve without a key until `_wait_ready` saw it."""
    if not server.record.api_key_required or server.environment is not None:
        return False
    return not any(
        word in KEY_OPTIONS or word.startswith(tuple(f"{o}=" for o in KEY_OPTIONS)) for word in server.record.argv
    )


def _wait_ready(server: StoppedServer, process: subprocess.Popen[bytes], log: Path, deadline: float) -> Restarted:
    old = server.record
    while True:
        record = _record_of(process.pid)
        if record is not None:
            if old.api_key_required and not record.api_key_required:
                stop([record])
                return Restarted(
                    server,
                    None,
                    f"{old.url}: started again without the API key it required, so it was stopped; "
                    f"start it again with its key (log: {log}).",
                    log,
                )
            return Restarted(server, record, f"{old.url}: serving again at {record.url}.", log)
        if process.poll() is not None:
            return Restarted(
                server, None, f"{old.url}: did not start again ({_failure(log, process.returncode)}; log: {log}).", log
            )
        if time.monotonic() > deadline:
            with contextlib.suppress(OSError):
                process.terminate()
            return Restarted(server, None, f"{old.url}: was not ready in time (log: {log}).", log)
        time.sleep(0.1)


def _record_of(pid: int) -> ServerRecord | None:
    """The run file of the server `pid` started: its own, or that of a process it started (an AppImage
    runs the app as its child)."""
    try:
        family = {pid, *(child.pid for child in psutil.Process(pid).children(recursive=True))}
    except psutil.Error:
        family = {pid}
    return next((record for record in running_servers() if record.pid in family), None)


def _failure(log: Path, code: int | None) -> str:
    """Why a restarted server exited: its LAUNCHER_ERROR line's message, else its last line."""
    try:
        lines = log.read_text(encoding="utf-8", errors="replace").splitlines()
    except OSError:
        lines = []
    for line in reversed(lines):
        if line.startswith(ERROR_PREFIX):
            with contextlib.suppress(ValueError, AttributeError):
                return str(json.loads(line[len(ERROR_PREFIX) :]).get("message"))
    last = next((line.strip() for line in reversed(lines) if line.strip()), None)
    return last[:200] if last else f"exit code {code}"
