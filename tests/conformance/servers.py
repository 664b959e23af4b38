"""Engine servers the conformance suite runs against.

Each entry starts `launcher serve` as a real subprocess on port 0 with one engine and a small
model fixture, waits for the LAUNCHER_READY line and stops the process at teardown. Another
engine joins the suite by adding an entry here, e.g.
`ServerSpec("mlx", "tiny_mlx_model", available=mlx_available)`.
"""

from __future__ import annotations

import importlib.util
import json
import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

REPO_ROOT = Path(__file__).resolve().parents[2]
READY_TIMEOUT_S = 180


def _llamacpp_available() -> str | None:
    return None if importlib.util.find_spec("llama_cpp") else "llama-cpp-python is not installed"


def _mlx_available() -> str | None:
    return None if importlib.util.find_spec("mlx_lm") else "mlx-lm is not installed (the `mlx` extra)"


@dataclass(frozen=True)
class ServerSpec:
    """One engine + model the suite is run against."""

    engine: str
    model_fixture: str  # name of a pytest fixture returning the model path
    extra_args: tuple[str, ...] = ()
    available: Callable[[], str | None] = lambda: None  # None when usable, else why the suite skips it

    @property
    def id(self) -> str:
        """The pytest id."""
        return f"{self.engine}-{self.model_fixture}"


SERVERS: list[ServerSpec] = [
    ServerSpec("llamacpp", "tiny_gguf", ("--context", "2048", "--parallel", "4"), _llamacpp_available),
    ServerSpec("mlx", "tiny_mlx_model", ("--context", "2048", "--parallel", "4"), _mlx_available),
]


@dataclass
class RunningServer:
    """A `launcher serve` process and what its ready line said."""

    process: subprocess.Popen[str]
    ready: dict[str, Any]
    stderr_path: Path

    @property
    def url(self) -> str:
        """Base URL without /v1."""
        return str(self.ready["url"])

    @property
    def base_url(self) -> str:
        """Base URL with /v1 (what SDKs take)."""
        return str(self.ready["base_url"])

    def wait_for_log(self, *texts: str, timeout: float = 30.0) -> str:
        """The server's log once it holds every one of `texts`: a request's log line is written after
        its answer is sent, so a client can finish before the line is there."""
        deadline = time.monotonic() + timeout
        while True:
            log = self.stderr_path.read_text(errors="replace")
            if all(text in log for text in texts) or time.monotonic() > deadline:
                return log
            time.sleep(0.05)

    def stop(self) -> int:
        """SIGTERM, then SIGKILL if it does not exit; returns the exit code."""
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)
            try:
                self.process.wait(timeout=20)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait(timeout=20)
        if self.process.stdout is not None:
            self.process.stdout.close()
        return int(self.process.returncode)


def start_server(spec: ServerSpec, model_path: Path, home: Path, *extra: str) -> RunningServer:
    """Start `launcher serve` and wait for its ready line (raises with the server's stderr on failure)."""
    argv = [str(model_path), "--engine", spec.engine, "--port", "0", *spec.extra_args, *extra]
    return launch_serve(argv, home, f"serve-{spec.engine}")


def launch_serve(
    serve_args: list[str],
    home: Path,
    log_prefix: str = "serve",
    *,
    entry: tuple[str, ...] = ("-m", "launcher"),
    python_path: tuple[Path, ...] = (),
) -> RunningServer:
    """`launcher serve SERVE_ARGS` with its own LAUNCHER_HOME, once its ready line is out. `entry` is how
    Python starts the CLI (`-c CODE` for a CLI with some limits patched first); `python_path`: folders
    put before the repository on its PYTHONPATH (a plug-in's, which its own children see too)."""
    env = {**os.environ, "LAUNCHER_HOME": str(home), "PYTHONPATH": os.pathsep.join(map(str, (*python_path, REPO_ROOT)))}
    stderr_path = home / f"{log_prefix}-{os.getpid()}-{len(list(home.glob(f'{log_prefix}-*')))}.log"
    home.mkdir(parents=True, exist_ok=True)
    argv = [sys.executable, *entry, "serve", *serve_args]
    with stderr_path.open("w") as stderr:
        process = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=stderr, text=True, env=env, cwd=REPO_ROOT)
    found: dict[str, Any] = {}

    def read_ready() -> None:
        assert process.stdout is not None
        for line in process.stdout:
            if line.startswith(("LAUNCHER_READY ", "LAUNCHER_ERROR ")):
                kind, _, payload = line.partition(" ")
                found[kind] = json.loads(payload)
                return

    reader = threading.Thread(target=read_ready, daemon=True)
    reader.start()
    reader.join(READY_TIMEOUT_S)
    server = RunningServer(process, found.get("LAUNCHER_READY", {}), stderr_path)
    if not server.ready:
        server.stop()
        raise RuntimeError(f"launcher serve did not become ready ({found}): {stderr_path.read_text()[-3000:]}")
    return server


def start_port_printer(module: str, *args: str) -> tuple[subprocess.Popen[str], str]:
    """A test server module run in a process of its own (so a test can kill it mid-reply), once it has
    printed `PORT <n>`; returns the process and its base URL."""
    env = {**os.environ, "PYTHONPATH": str(REPO_ROOT)}
    process = subprocess.Popen(
        [sys.executable, "-m", module, *args], stdout=subprocess.PIPE, text=True, env=env, cwd=REPO_ROOT
    )
    assert process.stdout is not None
    line = process.stdout.readline()
    assert line.startswith("PORT "), line
    return process, f"http://127.0.0.1:{line.split()[1]}"
