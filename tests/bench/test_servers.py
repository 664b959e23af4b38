"""Starting and stopping benchmarked servers as child processes (used by scripts/bench-compare)."""

from __future__ import annotations

import sys
from pathlib import Path

import httpx
import pytest

from launcher.bench.servers import command_server, parse_ready_line
from launcher.core.errors import ServerError
from launcher.core.net import free_port

ROOT = Path(__file__).resolve().parents[2]


def test_ready_line_payload_is_parsed_and_other_lines_ignored() -> None:
    line = 'LAUNCHER_READY {"base_url": "http://127.0.0.1:5/v1", "pid": 42, "engine": "llamacpp"}'
    assert parse_ready_line(line) == {"base_url": "http://127.0.0.1:5/v1", "pid": 42, "engine": "llamacpp"}
    assert parse_ready_line("INFO: loading model") is None


def test_command_server_waits_until_ready_and_stops_the_process(tmp_path: Path) -> None:
    port = free_port()
    base_url = f"http://127.0.0.1:{port}/v1"
    command = [sys.executable, "-m", "tests.bench.fake_openai_server", str(port)]
    with command_server(command, base_url, log_path=tmp_path / "server.log", timeout=60) as server:
        assert httpx.get(base_url + "/models").status_code == 200
        process = server.process
    assert process.poll() is not None  # stopped on leaving the block
    with pytest.raises(httpx.ConnectError):
        httpx.get(base_url + "/models")


def test_command_server_reports_a_server_that_dies_at_start() -> None:
    command = [sys.executable, "-c", "raise SystemExit(3)"]
    with (
        pytest.raises(ServerError, match="exited with code 3"),
        command_server(command, "http://127.0.0.1:9/v1"),
    ):
        pass
