"""A running child engine: started in its own process group, its output passed on, stopped with its group.

Every child is started from one long-lived thread (`_Starter`): on Linux each child asks the kernel to
end it when the thread that started it ends (the parent-death signal follows the thread, not the
process), so a child started from a short-lived worker thread would be killed when that thread retires.
The starter thread lives as long as the process, so a child ends with the server, even one killed.
"""

from __future__ import annotations

import collections
import contextlib
import logging
import os
import queue
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from concurrent.futures import Future
from typing import IO

import httpx

from launcher.core.child_process import arm_parent_death_signal
from launcher.core.errors import EngineError
from launcher.engines.child.command import ChildCommand

log = logging.getLogger(__name__)

READY_TIMEOUT_S = 1800.0
"""How long a child may take to answer /health by default (a spec may say otherwise)."""
STOP_TIMEOUT_S = 20.0
"""How long a stopping child may take to exit before it is killed (vLLM frees the GPU on SIGTERM)."""
TAIL_LINES = 40
"""The child's last output lines kept for the error when it fails."""

_running: set[ChildServer] = set()  # started and not stopped yet
_running_lock = threading.Lock()


class _Starter:
    """The thread every child is started from (see the module's docstring)."""

    def __init__(self) -> None:
        self._work: queue.SimpleQueue[tuple[Callable[[], object], Future[object]]] = queue.SimpleQueue()
        self._thread: threading.Thread | None = None
        self._lock = threading.Lock()

    def run(self, work: Callable[[], object]) -> object:
        """Run `work` on the starter thread (the main thread runs it itself: it outlives every other)."""
        if threading.current_thread() is threading.main_thread():
            return work()
        with self._lock:
            if self._thread is None:
                self._thread = threading.Thread(target=self._serve, name="child-engine-starter", daemon=True)
                self._thread.start()
        done: Future[object] = Future()
        self._work.put((work, done))
        return done.result()

    def _serve(self) -> None:
        while True:
            work, done = self._work.get()
            try:
                done.set_result(work())
            except BaseException as err:  # handed to the thread that asked
                done.set_exception(err)


_starter = _Starter()


class ChildServer:
    """A child engine's server: its process, its output's last lines, its /health, its stop."""

    def __init__(
        self,
        engine: str,
        command: ChildCommand,
        port: int,
        api_key: str,
        host: str = "127.0.0.1",
        health_path: str = "/health",
    ) -> None:
        self.engine = engine
        self.command = command
        self.port = port
        self.api_key = api_key
        self.host = host
        self.health_path = health_path
        self.tail: collections.deque[str] = collections.deque(maxlen=TAIL_LINES)
        self.process: subprocess.Popen[str] | None = None
        self._stopping = False

    @property
    def base_url(self) -> str:
        """The child's OpenAI base URL."""
        return f"http://{self.host}:{self.port}/v1"

    @property
    def served_name(self) -> str:
        """The model's id at the child."""
        return self.command.served_name

    @property
    def stopping(self) -> bool:
        """True once it was asked to stop (its exit is then no failure)."""
        return self._stopping

    def start(self, echo: IO[str] | None = None) -> None:
        """Start the child (on the starter thread: see the module's docstring). A program that cannot be
        executed (a shim whose interpreter is gone) is an EngineError, as a child that exits at once is."""
        with _running_lock:
            _running.add(self)  # before it exists: a stop_children() meanwhile reaches it (see `stop`)
        try:
            _starter.run(self._spawn)
        except OSError as err:
            with _running_lock:
                _running.discard(self)
            raise EngineError(f"{self.engine} could not be started ({self.command.argv[0]}): {err}") from err
        threading.Thread(target=self._pump, args=(echo or sys.stderr,), daemon=True).start()
        if self._stopping:  # asked to stop while it was being started: stop what was started
            self._stopping = False
            self.stop()

    def _spawn(self) -> None:
        linux = sys.platform.startswith("linux")
        self.process = subprocess.Popen(
            self.command.argv,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
            errors="replace",
            env={**os.environ, **self.command.env},
            start_new_session=sys.platform != "win32",  # its own group: its workers stop with it
            preexec_fn=arm_parent_death_signal if linux else None,  # only prctl runs in it, before exec
        )

    def _pump(self, echo: IO[str]) -> None:
        """Pass the child's output on (its progress is the user's to see) and keep its tail."""
        assert self.process is not None and self.process.stdout is not None
        for line in self.process.stdout:
            self.tail.append(line.rstrip())
            with contextlib.suppress(OSError, ValueError):
                echo.write(f"[{self.engine}] {line}")
                echo.flush()

    def exited(self) -> int | None:
        """The child's exit code once it has exited (None while it runs)."""
        return self.process.poll() if self.process is not None else None

    def failure(self, what: str) -> EngineError:
        """An error about the child with its last output lines."""
        tail = "\n".join(list(self.tail)[-12:])
        return EngineError(f"{what}. Its last output:\n{tail}" if tail else what)

    def wait_ready(self, timeout_s: float = READY_TIMEOUT_S, cancelled: Callable[[], bool] = lambda: False) -> None:
        """Block until the child's /health answers 200; an EngineError when it exits, is stopped or times
        out first."""
        deadline = time.monotonic() + timeout_s
        url = f"http://{self.host}:{self.port}{self.health_path}"
        while True:
            code = self.exited()
            if code is not None:
                raise self.failure(f"{self.engine} exited with code {code} before it was ready")
            if cancelled() or self._stopping:
                raise EngineError(f"{self.engine} was stopped before it was ready")
            with contextlib.suppress(httpx.HTTPError):
                if httpx.get(url, timeout=2.0).status_code == 200:
                    return
            if time.monotonic() > deadline:
                raise self.failure(f"{self.engine} did not answer {url} within {timeout_s:.0f} s")
            time.sleep(0.5)

    def stop(self, timeout_s: float = STOP_TIMEOUT_S) -> None:
        """SIGTERM to the child's group, then SIGKILL if it has not exited within `timeout_s`."""
        if self._stopping:
            return
        self._stopping = True
        with _running_lock:
            _running.discard(self)
        process = self.process
        if process is None:
            return  # not started yet: `start` stops it once it exists
        if process.poll() is None:
            self._signal(signal.SIGTERM)
            try:
                process.wait(timeout=timeout_s)
            except subprocess.TimeoutExpired:
                self._signal(signal.SIGKILL if sys.platform != "win32" else signal.SIGTERM)
                process.wait(timeout=timeout_s)
        if sys.platform != "win32":  # workers it left behind in its group
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(process.pid, signal.SIGKILL)

    def close(self) -> None:
        """Stop it (the model pool closes what it loaded)."""
        self.stop()

    def _signal(self, signum: int) -> None:
        assert self.process is not None
        if sys.platform == "win32":
            self.process.terminate()
            return
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(self.process.pid, signum)


def running_children() -> list[ChildServer]:
    """The children this process started and has not stopped."""
    with _running_lock:
        return list(_running)


def stop_children() -> None:
    """Stop every child this process started (the server's last word on its way out, whatever the way)."""
    for child in running_children():
        try:
            child.stop()
        except Exception:  # one that will not stop must not keep the others running
            log.exception("stopping %s failed", child.engine)
