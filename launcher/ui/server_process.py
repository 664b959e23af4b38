"""`ServerProcess`: the `launcher serve` child process, wrapped in a QObject.

The app never loads a model itself, so a crashing engine cannot take the window down: it runs
`launcher serve ...` (`child_process.launcher_command()`: `python -m launcher` from source, the app
itself when frozen) with arguments from `ServeConfig.to_argv()`, reads the lines
`launcher/cli/serve.py` prints to stdout (`LAUNCHER_READY {json}` / `LAUNCHER_ERROR {json}`)
and forwards stderr line by line to the log view. When the process ends, `finished` carries a
`ServerOutcome` whose `str()` is the text the user sees: stopped, failed to load (with the
server's reason), or crashed (exit code and the last log lines). The process is stopped on app
quit and killed if this object is destroyed first.
"""

from __future__ import annotations

import json
import shutil
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Literal

from PySide6.QtCore import QCoreApplication, QObject, QProcess, QProcessEnvironment, QTimer, Signal

from launcher.core.child_process import launcher_command, launcher_environment, parent_environment
from launcher.core.config import API_KEY_ENV, ServeConfig
from launcher.core.server_records import ERROR_PREFIX, READY_PREFIX

STOP_GRACE_MS = 5000
LAST_LINES = 30

ServerState = Literal["stopped", "starting", "ready", "stopping"]
OutcomeKind = Literal["stopped", "load_failed", "crashed", "exited", "failed_to_start"]


@dataclass(frozen=True)
class ServerEndpoint:
    """What the LAUNCHER_READY line told us, plus the key the app started it with."""

    url: str
    base_url: str
    model: str
    engine: str
    engine_reason: str
    context_length: int
    parallel: int
    api_key_required: bool
    pid: int
    api_key: str | None = None
    serving: dict[str, Any] = field(default_factory=dict)  # model file, format, context, KV type, GPU layers

    @classmethod
    def from_ready_line(cls, payload: str, api_key: str | None) -> ServerEndpoint:
        """Parse the JSON after `LAUNCHER_READY `."""
        data = json.loads(payload)
        return cls(
            url=data["url"],
            base_url=data["base_url"],
            model=data.get("model", ""),  # none when the server only loads models by name (presets, --library)
            engine=data.get("engine", ""),
            engine_reason=data.get("engine_reason", ""),
            context_length=int(data.get("context_length", 0)),
            parallel=int(data.get("parallel", 1)),
            api_key_required=bool(data.get("api_key_required", False)),
            pid=int(data.get("pid", 0)),
            api_key=api_key,
            serving=dict(data.get("serving") or {}),
        )


@dataclass(frozen=True)
class ServerOutcome:
    """How a server run ended; `str()` is the message shown to the user."""

    kind: OutcomeKind
    exit_code: int | None = None
    error_kind: str | None = None
    message: str = ""
    last_lines: tuple[str, ...] = field(default=())

    @property
    def is_failure(self) -> bool:
        """True unless the user stopped the server."""
        return self.kind != "stopped"

    def __str__(self) -> str:
        if self.kind == "stopped":
            return "Server stopped."
        if self.kind == "load_failed":
            return f"The model could not be loaded: {self.message}"
        if self.kind == "failed_to_start":
            return f"The server could not be started: {self.message}"
        tail = "\n".join(self.last_lines[-8:])
        head = (
            (
                f"The server crashed (exit code {self.exit_code})."
                if self.exit_code is not None
                else "The server crashed (it was killed or hit a fatal error)."
            )
            if self.kind == "crashed"
            else f"The server exited on its own (exit code {self.exit_code})."
        )
        return f"{head}\nLast log lines:\n{tail}" if tail else head


def serve_command(config: ServeConfig, *, log_level: str = "INFO") -> tuple[str, list[str]]:
    """Program and arguments that run `launcher serve` for this config, the way this app was started."""
    program, *prefix = launcher_command()
    return program, [*prefix, "--log-level", log_level, "serve", "--no-settings", *config.to_argv()]


def shown_command(program: str, arguments: list[str]) -> list[str]:
    """The command as the log shows it: `launcher serve ...` rather than the interpreter or bundle path."""
    prefix = launcher_command()
    full = [program, *arguments]
    return ["launcher", *full[len(prefix) :]] if full[: len(prefix)] == prefix else full


def _child_environment(config: ServeConfig) -> QProcessEnvironment:
    env = QProcessEnvironment.systemEnvironment()
    env.remove(API_KEY_ENV)  # a key in the user's shell must not lock the app out of its own server
    for name, value in config.to_environment().items():  # the API key, kept out of the process list
        env.insert(name, value)
    # Linux: the child arms PR_SET_PDEATHSIG for this pid (core.child_process.follow_parent), so a
    # crashed or killed app does not leave the server running.
    for name, value in parent_environment().items():
        env.insert(name, value)
    env.insert("PYTHONUNBUFFERED", "1")
    env.insert("PYTHONIOENCODING", "utf-8")
    for name, value in launcher_environment(env.value("PYTHONPATH", "")).items():
        env.insert(name, value)
    return env


class ServerProcess(QObject):
    """One `launcher serve` child at a time, with signals for every state change."""

    started = Signal()  # the process is running (the model is loading)
    ready = Signal(object)  # ServerEndpoint
    finished = Signal(object)  # ServerOutcome
    log_line = Signal(str)
    state_changed = Signal(str)  # ServerState

    def __init__(
        self,
        parent: QObject | None = None,
        *,
        command: Callable[[ServeConfig], tuple[str, list[str]]] = serve_command,
    ) -> None:
        super().__init__(parent)
        self._command = command
        self._process: QProcess | None = None
        self._state: ServerState = "stopped"
        self._buffers = {"out": b"", "err": b""}
        self._last_lines: deque[str] = deque(maxlen=LAST_LINES)
        self._load_error: tuple[str, str] | None = None
        self._config: ServeConfig | None = None
        self._stop_requested = False
        self.endpoint: ServerEndpoint | None = None
        app = QCoreApplication.instance()
        if app is not None:
            app.aboutToQuit.connect(self.stop_and_wait)

    # -- public API ------------------------------------------------------------------------
    @property
    def state(self) -> ServerState:
        """stopped | starting | ready | stopping."""
        return self._state

    @property
    def pid(self) -> int | None:
        """The server's process id while it runs."""
        if self._process is None or self._process.state() == QProcess.ProcessState.NotRunning:
            return None
        return int(self._process.processId())

    @property
    def config(self) -> ServeConfig | None:
        """The config of the current (or last) run."""
        return self._config

    def start(self, config: ServeConfig) -> None:
        """Start `launcher serve`; ignored while a server is already running."""
        if self._state != "stopped":
            return
        self._config = config
        self._buffers = {"out": b"", "err": b""}
        self._last_lines.clear()
        self._load_error = None
        self._stop_requested = False
        self.endpoint = None
        program, arguments = self._command(config)
        if shutil.which(program) is None:
            self._set_state("starting")
            self._finish(ServerOutcome("failed_to_start", None, None, f"{program} is not an executable program."))
            return
        process = QProcess(self)
        shown = shown_command(program, arguments)
        process.setProgram(program)
        process.setArguments(arguments)
        process.setProcessEnvironment(_child_environment(config))
        process.readyReadStandardOutput.connect(self._read_stdout)
        process.readyReadStandardError.connect(self._read_stderr)
        process.started.connect(self._on_started)
        process.finished.connect(self._on_finished)
        process.errorOccurred.connect(self._on_error)
        self._process = process
        self._set_state("starting")
        self.log_line.emit("$ " + " ".join(shown))
        process.start()

    def stop(self) -> None:
        """Ask the server to shut down (SIGTERM), killing it if it is still there after a grace period."""
        process = self._process
        if process is None or self._state in ("stopped", "stopping"):
            return
        self._stop_requested = True
        self._set_state("stopping")
        process.terminate()
        QTimer.singleShot(STOP_GRACE_MS, process, process.kill)

    def stop_and_wait(self, timeout_ms: int = STOP_GRACE_MS) -> None:
        """Stop and block until the process is gone (app quit: nothing may be left behind)."""
        process = self._process
        if process is None or process.state() == QProcess.ProcessState.NotRunning:
            return
        self._stop_requested = True
        process.terminate()
        if not process.waitForFinished(timeout_ms):
            process.kill()
            process.waitForFinished(timeout_ms)

    def restart(self) -> None:
        """Start again with the last config once the current run has ended."""
        if self._config is None:
            return
        config = self._config
        if self._state == "stopped":
            self.start(config)
            return

        def again(_outcome: object) -> None:
            self.finished.disconnect(again)
            self.start(config)

        self.finished.connect(again)
        self.stop()

    def last_lines(self) -> list[str]:
        """The most recent log lines (for crash reports)."""
        return list(self._last_lines)

    # -- process events --------------------------------------------------------------------
    def _set_state(self, state: ServerState) -> None:
        if state != self._state:
            self._state = state
            self.state_changed.emit(state)

    def _on_started(self) -> None:
        self.started.emit()

    def _read_stdout(self) -> None:
        if self._process is not None:
            self._consume("out", bytes(self._process.readAllStandardOutput().data()))

    def _read_stderr(self) -> None:
        if self._process is not None:
            self._consume("err", bytes(self._process.readAllStandardError().data()))

    def _consume(self, stream: str, data: bytes, *, flush: bool = False) -> None:
        buffer = self._buffers[stream] + data
        *lines, rest = buffer.split(b"\n")
        if flush and rest:
            lines, rest = [*lines, rest], b""
        self._buffers[stream] = rest
        for raw in lines:
            line = raw.decode("utf-8", errors="replace").rstrip("\r")
            if stream == "out" and self._handle_marker(line):
                continue
            if line:
                self._last_lines.append(line)
                self.log_line.emit(line)

    def _handle_marker(self, line: str) -> bool:
        if line.startswith(READY_PREFIX):
            api_key = self._config.api_key if self._config else None
            try:
                endpoint = ServerEndpoint.from_ready_line(line[len(READY_PREFIX) :], api_key)
            except (ValueError, KeyError, TypeError) as err:
                self.log_line.emit(f"(could not read the ready line: {err})")
                return False
            self.endpoint = endpoint
            self._set_state("ready")
            self.ready.emit(endpoint)
            return True
        if line.startswith(ERROR_PREFIX):
            try:
                data = json.loads(line[len(ERROR_PREFIX) :])
                self._load_error = (str(data.get("kind", "Error")), str(data.get("message", "")))
            except ValueError:
                self._load_error = ("Error", line[len(ERROR_PREFIX) :])
            self.log_line.emit(f"error: {self._load_error[1]}")
            return True
        return False

    def _on_finished(self, exit_code: int, exit_status: QProcess.ExitStatus) -> None:
        if self._process is not None:
            self._consume("out", bytes(self._process.readAllStandardOutput().data()), flush=True)
            self._consume("err", bytes(self._process.readAllStandardError().data()), flush=True)
        crashed = exit_status == QProcess.ExitStatus.CrashExit
        if self._stop_requested:
            outcome = ServerOutcome("stopped", exit_code)
        elif self._load_error is not None:
            kind, message = self._load_error
            outcome = ServerOutcome("load_failed", exit_code, kind, message, tuple(self._last_lines))
        else:
            code = None if crashed else exit_code  # a signal or a hard crash has no meaningful exit code
            outcome = ServerOutcome(
                "crashed" if crashed or exit_code != 0 else "exited", code, None, "", tuple(self._last_lines)
            )
        self._finish(outcome)

    def _on_error(self, error: QProcess.ProcessError) -> None:
        if error == QProcess.ProcessError.FailedToStart and self._process is not None:
            self._finish(ServerOutcome("failed_to_start", None, None, self._process.errorString()))

    def _finish(self, outcome: ServerOutcome) -> None:
        if self._state == "stopped":
            return
        process, self._process = self._process, None
        self.endpoint = None
        self._set_state("stopped")
        self.log_line.emit(str(outcome).splitlines()[0])
        self.finished.emit(outcome)
        if process is not None:
            process.deleteLater()

    def __del__(self) -> None:  # pragma: no cover - last-resort cleanup when the owner forgot stop()
        try:
            process = self._process
            if process is not None and process.state() != QProcess.ProcessState.NotRunning:
                process.kill()
                process.waitForFinished(2000)
        except RuntimeError:
            pass
