"""A real `launcher serve` on the tiny GGUF, started as a subprocess on port 0 for the live tests."""

from __future__ import annotations

import json
import os
import selectors
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

SERVER_KEY = "sk-integrations-test"
# Between the agents' needs: OpenCode, Aider and Continue fit; Claude Code, Codex and Cline (32k) do not,
# so one server shows both outcomes of the context check.
SERVER_CONTEXT = 16384
READY_DEADLINE_S = 180  # a safety net against a hung start, not a speed expectation


@dataclass(frozen=True)
class LiveServer:
    """A running server: the parsed LAUNCHER_READY line and the key it requires."""

    info: dict[str, Any]
    api_key: str
    stderr_path: Path

    @property
    def base_url(self) -> str:
        return str(self.info["base_url"])

    @property
    def model(self) -> str:
        return str(self.info["model"])


def _wait_for_ready(proc: subprocess.Popen[str], stderr_path: Path) -> dict[str, Any]:
    assert proc.stdout is not None
    selector = selectors.DefaultSelector()
    selector.register(proc.stdout, selectors.EVENT_READ)
    deadline = time.monotonic() + READY_DEADLINE_S
    try:
        while time.monotonic() < deadline:
            if not selector.select(timeout=1.0):
                if proc.poll() is not None:
                    break
                continue
            line = proc.stdout.readline()
            if not line:
                break
            if line.startswith("LAUNCHER_READY "):
                info: dict[str, Any] = json.loads(line.split(" ", 1)[1])
                return info
            if line.startswith("LAUNCHER_ERROR "):
                break
    finally:
        selector.close()
    raise RuntimeError(f"launcher serve did not become ready; stderr:\n{stderr_path.read_text()[-3000:]}")


@pytest.fixture(scope="session")
def live_server(tiny_gguf: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[LiveServer]:
    """`launcher serve TINY --port 0 --api-key ...` in a subprocess, shared by the session, then stopped."""
    home = tmp_path_factory.mktemp("serve-home")
    stderr_path = home / "serve.stderr"
    env = {**os.environ, "LAUNCHER_HOME": str(home / "launcher"), "HF_HOME": str(home / "hf")}
    command = [
        sys.executable, "-m", "launcher", "serve", str(tiny_gguf),
        "--port", "0", "--context", str(SERVER_CONTEXT), "--parallel", "1", "--api-key", SERVER_KEY,
    ]  # fmt: skip
    with stderr_path.open("w") as stderr:
        proc = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=stderr, text=True, env=env)
        try:
            info = _wait_for_ready(proc, stderr_path)
            yield LiveServer(info=info, api_key=SERVER_KEY, stderr_path=stderr_path)
        finally:
            proc.terminate()
            try:
                proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
            if proc.stdout is not None:
                proc.stdout.close()
