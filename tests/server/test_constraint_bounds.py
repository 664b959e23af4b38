"""A schema asking for an enormous grammar is refused at once with a 400 that names the keyword,
while the server keeps answering: found by a probe where 218 bytes of `minLength: 10**8` held the
event loop for 19 s and took 3.3 GB. Real `launcher serve` on the tiny GGUF."""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import psutil
import pytest

from tests.conformance.servers import SERVERS, RunningServer, start_server

LLAMACPP = SERVERS[0]
HELLO = [{"role": "user", "content": "hi"}]
HUGE = {"type": "string", "minLength": 10**8, "maxLength": 10**8}


@pytest.fixture(scope="module")
def server(tiny_gguf: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[RunningServer]:
    reason = LLAMACPP.available()
    if reason:
        pytest.skip(reason)
    running = start_server(LLAMACPP, tiny_gguf, tmp_path_factory.mktemp("bounds"), "--parallel", "1")
    yield running
    running.stop()


def memory_of(server: RunningServer) -> int:
    """Resident memory of the server and any processes it started."""
    process = psutil.Process(server.process.pid)
    return sum(p.memory_info().rss for p in [process, *process.children(recursive=True)])


def bodies(schema: dict[str, Any]) -> list[tuple[str, dict[str, Any]]]:
    response_format = {"type": "json_schema", "json_schema": {"name": "r", "schema": schema}}
    tool = {
        "type": "function",
        "function": {"name": "t", "parameters": {"type": "object", "properties": {"s": schema}}},
    }
    return [
        ("/v1/chat/completions", {"messages": HELLO, "max_tokens": 2, "response_format": response_format}),
        ("/v1/chat/completions", {"messages": HELLO, "max_tokens": 2, "tools": [tool], "tool_choice": "required"}),
        (
            "/v1/messages",
            {
                "model": "m",
                "max_tokens": 2,
                "messages": HELLO,
                "tools": [{"name": "t", "input_schema": {"type": "object", "properties": {"s": schema}}}],
                "tool_choice": {"type": "any"},
            },
        ),
    ]


def test_a_huge_schema_is_a_quick_400_and_the_server_keeps_answering(server: RunningServer) -> None:
    health_waits: list[float] = []
    done = threading.Event()

    def poll_health() -> None:
        with httpx.Client(timeout=30) as client:
            while not done.is_set():
                started = time.monotonic()
                assert client.get(server.url + "/health").status_code == 200
                health_waits.append(time.monotonic() - started)
                time.sleep(0.02)

    memory_before = memory_of(server)
    poller = threading.Thread(target=poll_health, daemon=True)
    poller.start()
    try:
        for path, body in bodies(HUGE):
            started = time.monotonic()
            response = httpx.post(server.url + path, json=body, timeout=60)
            took = time.monotonic() - started
            assert response.status_code == 400, response.text
            message = json.dumps(response.json())
            assert "minLength" in message and "1000" in message, message  # the keyword and the bound
            assert took < 5.0, f"{path} took {took:.1f} s (19 s before the bound; milliseconds now)"
    finally:
        done.set()
        poller.join(timeout=30)
    assert health_waits, "/health was never answered"
    assert max(health_waits) < 5.0
    assert memory_of(server) - memory_before < 200 * 2**20  # 3.3 GB before the bound


def test_a_schema_at_the_bounds_is_served(server: RunningServer) -> None:
    at_bounds = {"type": "string", "minLength": 3, "maxLength": 1000}
    for path, body in bodies(at_bounds):
        response = httpx.post(server.url + path, json=body, timeout=60)
        assert response.status_code == 200, response.text
