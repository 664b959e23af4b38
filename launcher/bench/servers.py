"""Starting servers to benchmark as child processes, and always stopping them.

`launcher serve` announces itself with the LAUNCHER_READY line (launcher/cli/serve.py), which gives the
base URL and the pid; any other OpenAI-compatible server is polled on /v1/models until it
answers. Used by scripts/bench-compare and by the bench tests.
"""

from __future__ import annotations

import contextlib
import json
import os
import subprocess
import threading
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any

import httpx

from launcher.core.child_process import launcher_command
from launcher.core.errors import ServerError
from launcher.core.server_records import ERROR_PREFIX, READY_PREFIX


@dataclass
class ServerProcess:
    """A running server child process and how to reach it."""

    process: subprocess.Popen[str]
    base_url: str
    pid: int
    ready: dict[str, Any] = field(default_factory=dict)  # the LAUNCHER_READY payload, if any
    log_path: Path | None = None


def parse_ready_line(line: str) -> dict[str, Any] | None:
    """The JSON payload of a LAUNCHER_READY line, None for any other line."""
    if not line.startswith(READY_PREFIX):
        return None
    payload = json.loads(line[len(READY_PREFIX) :])
    return payload if isinstance(payload, dict) else None


def _read_lines(stream: IO[str], sink: list[str], event: threading.Event) -> None:
    for line in stream:
        sink.append(line.rstrip("\n"))
        event.set()
    event.set()


def stop_process(process: subprocess.Popen[str], grace: float = 10.0) -> None:
    """Terminate, then kill if it does not exit within `grace` seconds."""
    if process.poll() is not None:
        return
    process.terminate()
    try:
        process.wait(timeout=grace)
    except subprocess.TimeoutExpired:
        process.kill()
        process.wait(timeout=grace)


@contextlib.contextmanager
def launcher_serve(
    serve_args: Sequence[str],
    *,
    log_path: Path | None = None,
    timeout: float = 300.0,
) -> Iterator[ServerProcess]:
    """Run `python -m launcher serve ARGS`, wait for LAUNCHER_READY, stop it on exit.

    Raises ServerError with the server's LAUNCHER_ERROR message (or its exit) when it fails to start.
    """
    command = [*launcher_command(), "serve", *serve_args]
    log = open(log_path, "w", encoding="utf-8") if log_path else subprocess.DEVNULL  # noqa: SIM115
    process = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=log, text=True, env=_child_env())
    lines: list[str] = []
    event = threading.Event()
    assert process.stdout is not None
    reader = threading.Thread(target=_read_lines, args=(process.stdout, lines, event), daemon=True)
    reader.start()
    try:
        ready = _wait_for_ready(process, lines, event, timeout)
        yield ServerProcess(process, str(ready["base_url"]), int(ready.get("pid") or process.pid), ready, log_path)
    finally:
        stop_process(process)
        reader.join(timeout=5)
        process.stdout.close()
        if log_path:
            log.close()  # type: ignore[union-attr]


def _wait_for_ready(
    process: subprocess.Popen[str], lines: list[str], event: threading.Event, timeout: float
) -> dict[str, Any]:
    deadline = time.monotonic() + timeout
    seen = 0
    while time.monotonic() < deadline:
        event.wait(timeout=0.5)
        event.clear()
        for line in lines[seen:]:
            seen += 1
            ready = parse_ready_line(line)
            if ready is not None:
                return ready
            if line.startswith(ERROR_PREFIX):
                raise ServerError(f"launcher serve failed: {line[len(ERROR_PREFIX) :]}")
        if process.poll() is not None and seen == len(lines):
            raise ServerError(f"launcher serve exited with code {process.returncode} before it was ready")
    raise ServerError(f"launcher serve was not ready within {timeout:.0f} s")


@contextlib.contextmanager
def command_server(
    command: Sequence[str], base_url: str, *, log_path: Path | None = None, timeout: float = 300.0
) -> Iterator[ServerProcess]:
    """Run any OpenAI-compatible server command, wait until /v1/models answers, stop it on exit."""
    log = open(log_path, "w", encoding="utf-8") if log_path else subprocess.DEVNULL  # noqa: SIM115
    process = subprocess.Popen(list(command), stdout=log, stderr=subprocess.STDOUT, text=True, env=_child_env())
    try:
        deadline = time.monotonic() + timeout
        while True:
            if process.poll() is not None:
                raise ServerError(f"{command[0]} exited with code {process.returncode} before it was ready")
            with contextlib.suppress(httpx.HTTPError):
                if httpx.get(base_url.rstrip("/") + "/models", timeout=2).status_code == 200:
                    break
            if time.monotonic() > deadline:
                raise ServerError(f"{' '.join(command[:3])} was not ready within {timeout:.0f} s")
            time.sleep(0.3)
        yield ServerProcess(process, base_url, process.pid, {}, log_path)
    finally:
        stop_process(process)
        if log_path:
            log.close()  # type: ignore[union-attr]


def _child_env() -> dict[str, str]:
    # Children must import this checkout's `launcher` even when it is not pip-installed.
    env = dict(os.environ)
    root = str(Path(__file__).resolve().parents[2])
    env["PYTHONPATH"] = os.pathsep.join(p for p in (root, env.get("PYTHONPATH", "")) if p)
    env.setdefault("PYTHONUNBUFFERED", "1")
    return env
