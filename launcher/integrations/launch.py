"""`launcher launch AGENT`: a server found or started, then the agent run against it for this run only.

The steps, each its own function so the CLI (and the app's Launch button, through the CLI) stays thin:

1. `find_server`: a running `launcher serve` from the run files (core/server_records.py), on
   whatever port it listens, that answers MODEL (or any, when no model is named).
2. `start_server`: otherwise `launcher serve [MODEL] --port 0` in the background, its output in a
   log file, until its `LAUNCHER_READY` line. It runs in a session of its own, so the Ctrl-C the
   user types for the agent does not stop it, and on Linux it dies with us even if we are killed.
3. `run_agent`: the agent in the foreground with the agent's `RunConfig` (environment, leading
   arguments, run-only files in a temporary folder removed afterwards), the user's arguments after
   them; its exit code is ours. Nothing is written to the agent's own config files.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any

from launcher.core import paths
from launcher.core.child_process import (
    launcher_command,
    launcher_environment,
    outside_environment,
    own_process_group,
    parent_environment,
)
from launcher.core.errors import ConfigError, ServerError
from launcher.core.server_records import ERROR_PREFIX, READY_PREFIX, ServerRecord, running_servers
from launcher.integrations.agents.base import Agent
from launcher.integrations.endpoint import Endpoint
from launcher.integrations.installed import find_program, search_path

STOP_GRACE_S = 20.0  # a server unloads its models and frees the engine on SIGTERM
AGENT_STOP_GRACE_S = 5.0
KEPT_LOGS = 10
_DETACHED: list[subprocess.Popen[bytes]] = []  # kept referenced: a Popen dropped while its process runs warns
_LOG_PREFIX = re.compile(r"^\d{4}-\d\d-\d\d [\d:,]+ [A-Z]+ [\w.]+: ")  # a log record's time, level and logger


def find_server(model: str) -> ServerRecord | None:
    """The newest running server whose run file names `model`."""
    return next((record for record in running_servers() if record.serves(model)), None)


@dataclass
class StartedServer:
    """A `launcher serve` this launch started: its process, its ready line and its log."""

    process: subprocess.Popen[bytes]
    ready: dict[str, Any]
    log_path: Path

    @property
    def base_url(self) -> str:
        """The OpenAI-style base URL it listens on."""
        return str(self.ready["base_url"])

    def detach(self) -> None:
        """Leave it running after we exit (`--keep-server`)."""
        _DETACHED.append(self.process)

    def stop(self) -> None:
        """SIGTERM, a grace period for the engine to free its memory, then SIGKILL."""
        if self.process.poll() is not None:
            return
        self.process.terminate()
        try:
            self.process.wait(STOP_GRACE_S)
        except (subprocess.TimeoutExpired, KeyboardInterrupt):  # too slow, or the user would not wait
            self.process.kill()
            self.process.wait()

    def exit_note(self) -> str | None:
        """Why the user should know the server is gone, when it exited on its own (say, while the agent ran)."""
        code = self.process.poll()
        if code is None:
            return None
        return f"the server exited with code {code} while the agent ran (log: {self.log_path})"


def server_log_path() -> Path:
    """A new log file for a server launch starts (the oldest beyond KEPT_LOGS are removed)."""
    folder = paths.state_dir() / "logs"
    folder.mkdir(parents=True, exist_ok=True)
    logs = sorted(folder.glob("launch-server-*.log"), key=lambda p: p.stat().st_mtime)
    for old in logs[: max(0, len(logs) - KEPT_LOGS + 1)]:
        with contextlib.suppress(OSError):
            old.unlink()
    return folder / f"launch-server-{time.strftime('%Y%m%d-%H%M%S')}-{os.getpid()}.log"


def start_server(
    model: str | None,
    *,
    keep: bool,
    progress: Callable[[str, float], None],
    serve_args: Sequence[str] = (),
) -> StartedServer:
    """`launcher serve [MODEL] --port 0` in the background, returned once ready.

    `progress(stage, seconds)` is called about every half second while it starts: the last line
    the server wrote and how long it has taken. A server that exits first raises ServerError with
    its own message and the log's path. `keep`: it outlives us (not tied to our process).
    """
    log_path = server_log_path()
    command = [*launcher_command(), "serve", *([model] if model else []), "--port", "0", *serve_args]
    env = {**os.environ, **launcher_environment(os.environ.get("PYTHONPATH"))}
    if not keep:
        env |= parent_environment()  # Linux: it dies with us, even if we are killed
    with open(log_path, "wb") as log:
        process = subprocess.Popen(
            command,
            stdin=subprocess.DEVNULL,
            stdout=log,
            stderr=subprocess.STDOUT,
            env=env,
            **own_process_group(),  # the terminal's Ctrl-C belongs to the agent, not to the server
        )
    started = StartedServer(process, {}, log_path)
    try:
        started.ready = _wait_ready(process, log_path, progress)
    except BaseException:
        started.stop()
        raise
    return started


def _wait_ready(
    process: subprocess.Popen[bytes], log_path: Path, progress: Callable[[str, float], None]
) -> dict[str, Any]:
    began = time.monotonic()
    stage = "starting"
    pending = ""
    with open(log_path, encoding="utf-8", errors="replace") as log:
        while True:
            code = process.poll()  # before reading: all it wrote before exiting is then in the file
            pending += log.read()
            *lines, pending = pending.split("\n")
            if code is not None:
                lines.append(pending)
            for line in lines:
                if line.startswith(READY_PREFIX):
                    ready: dict[str, Any] = json.loads(line[len(READY_PREFIX) :])
                    return ready
                if line.startswith(ERROR_PREFIX):
                    message = json.loads(line[len(ERROR_PREFIX) :]).get("message", line)
                    raise ServerError(f"the server did not start: {message} (log: {log_path})")
                if line.strip():
                    stage = _LOG_PREFIX.sub("", line.strip())
            if code is not None:
                raise ServerError(f"the server exited with code {code} before it was ready (log: {log_path}): {stage}")
            progress(stage, time.monotonic() - began)
            time.sleep(0.5)


def preload(record: ServerRecord, model: str, api_key: str | None) -> None:
    """Ask a running server to load `model` now, so the agent's first request does not wait for it."""
    import httpx

    headers = {"Authorization": f"Bearer {api_key}"} if api_key else {}
    try:
        reply = httpx.post(f"{record.url}/launcher/models/load", json={"model": model}, headers=headers, timeout=None)
    except httpx.HTTPError as err:
        raise ServerError(f"the server at {record.url} did not answer ({err})") from err
    if reply.status_code >= 400:
        raise ServerError(
            f"the server at {record.url} could not load {model}: HTTP {reply.status_code} {reply.text[:300]}"
        )


@dataclass(frozen=True)
class AgentCommand:
    """The agent's program, and the PATH it runs with (the one it was found on)."""

    program: str
    path_env: str


def find_command(agent: Agent) -> AgentCommand:
    """The agent's program on this machine, or a ConfigError saying how to install it.

    Searched as the Agents page searches (`installed.search_path`: PATH and the npm, nvm, Volta and
    pipx folders a desktop-started terminal may lack), and run with that PATH: an npm program is a
    `#!/usr/bin/env node` script whose `node` sits in the same folders.
    """
    if agent.binary is None or agent.run_config is None:
        raise ConfigError(f"{agent.name} has no command-line program to launch; use `launcher connect {agent.id}`")
    path_env = search_path()
    found = find_program(agent.binary, path_env)
    if found is None:
        how = f": {agent.install.command}" if agent.install else ""
        raise ConfigError(f"{agent.name} is not installed (no `{agent.binary}` on PATH){how}")
    return AgentCommand(str(found), path_env)


def run_agent(agent: Agent, command: AgentCommand, endpoint: Endpoint, user_args: Sequence[str]) -> int:
    """Run the agent in the foreground for this run only; returns its exit code (128+N for signal N)."""
    # A lingering child of the agent may still hold a file of the run folder (Windows refuses to delete
    # it): that must not turn the agent's exit code into a traceback.
    with tempfile.TemporaryDirectory(prefix=f"launcher-{agent.id}-", ignore_cleanup_errors=True) as folder:
        run_dir = Path(folder)
        config = agent.run_config_for(endpoint, run_dir)
        for path, text in config.files.items():
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(text, encoding="utf-8")
        env = {name: value for name, value in outside_environment().items() if name not in config.unset}
        env |= {"PATH": command.path_env, **config.env}
        # Ctrl-C reaches the agent (it is in the terminal's foreground group) and means what the agent
        # makes of it (many cancel the current turn): we must not die of it meanwhile. A handler, not
        # SIG_IGN: an ignored signal would stay ignored in the agent, a handler is reset by exec.
        previous = signal.signal(signal.SIGINT, _ignore)
        try:
            process = subprocess.Popen([command.program, *config.args, *user_args], env=env)
            try:
                code = process.wait()
            except BaseException:  # launch itself is ending (SIGTERM, SIGHUP): the agent goes with it
                _end(process)
                raise
        finally:
            signal.signal(signal.SIGINT, previous)
    return 128 - code if code < 0 else code


def _end(process: subprocess.Popen[bytes]) -> None:
    process.terminate()
    try:
        process.wait(AGENT_STOP_GRACE_S)
    except subprocess.TimeoutExpired:
        process.kill()
        process.wait()


def _ignore(signum: int, frame: object) -> None:
    """SIGINT while the agent runs: the agent's to handle."""


def say(message: str, stream: IO[str] | None = None) -> None:
    """A status line on stderr (stdout is the agent's: `launch ... -- -p` output stays clean to pipe)."""
    print(message, file=stream or sys.stderr, flush=True)
