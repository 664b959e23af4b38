"""Slow clients, idle connections, a stopping server and what /health and /metrics tell strangers.

The real app under the real uvicorn setup (`runner.uvicorn_server`) with the scripted model, plus
one real `launcher serve` process that is sent SIGTERM mid-stream (tests/server/test_honest_endings.py
has one per API).
"""

from __future__ import annotations

import json
import signal
import socket
import threading
import time
from pathlib import Path

import httpx
import pytest

from launcher.core.config import ServeConfig
from launcher.engines._jobs import MAX_RETRY_AFTER_S, RequestPace
from launcher.server.app import create_app
from launcher.server.connections import KEEPALIVE_S, guarded_protocol
from tests.conformance.servers import SERVERS, start_server
from tests.metrics_text import metric_total
from tests.server.conftest import ServeFn
from tests.server.fake_model import FakeModel
from tests.server.harness import running_app

HELLO = [{"role": "user", "content": "hi"}]


def port_of(url: str) -> int:
    return int(url.rsplit(":", 1)[1])


def is_closed(sock: socket.socket, within_s: float) -> bool:
    """True if the server closes `sock` within `within_s` (reads until EOF)."""
    sock.settimeout(within_s)
    try:
        while sock.recv(4096):
            pass
    except TimeoutError:
        return False
    except ConnectionResetError:
        return True
    return True


def test_a_connection_that_never_finishes_its_headers_is_closed(fake_model: FakeModel) -> None:
    app = create_app(fake_model, ServeConfig(port=0))
    with running_app(app, http=guarded_protocol(64, header_timeout_s=0.5)) as url:
        silent = socket.create_connection(("127.0.0.1", port_of(url)))
        trickle = socket.create_connection(("127.0.0.1", port_of(url)))
        trickle.sendall(b"GET /health HTTP/1.1\r\nHost: 127.0.0.1\r\n")  # and never the blank line
        assert is_closed(silent, 5) and is_closed(trickle, 5)
        # a real request on a kept-alive connection is not cut by the header deadline
        with httpx.Client() as kept:
            assert kept.get(f"{url}/health").status_code == 200
            time.sleep(0.8)
            assert kept.get(f"{url}/health").status_code == 200
        silent.close()
        trickle.close()


def test_idle_connections_make_room_for_real_clients_and_busy_ones_get_a_503(fake_model: FakeModel) -> None:
    fake_model.reply = lambda prompt: "x" * 200
    fake_model.delay = 0.02  # each stream takes about 4 s
    app = create_app(fake_model, ServeConfig(port=0, max_queue=64))
    with running_app(app, http=guarded_protocol(8)) as url:
        idle = [socket.create_connection(("127.0.0.1", port_of(url))) for _ in range(8)]
        time.sleep(0.2)
        assert httpx.get(f"{url}/health").status_code == 200  # the oldest idle connection made way
        assert is_closed(idle[0], 2)
        # now fill the cap with requests in progress
        streams = [httpx.Client(timeout=30) for _ in range(8)]
        opened = []
        for client in streams:
            body = {"messages": HELLO, "stream": True}
            response = client.send(client.build_request("POST", f"{url}/v1/chat/completions", json=body), stream=True)
            opened.append(response)
        busy = httpx.get(f"{url}/health")
        assert busy.status_code == 503 and busy.json()["error"]["code"] == "too_many_connections"
        for response in opened:
            response.close()
        for client in streams:
            client.close()
        for sock in idle:
            sock.close()


def test_health_under_an_api_key_says_only_the_status_without_it(serve: ServeFn, fake_model: FakeModel) -> None:
    with serve(fake_model, api_key="sekret") as url:
        assert httpx.get(f"{url}/health").json() == {"status": "ok"}
        detailed = httpx.get(f"{url}/health", headers={"Authorization": "Bearer sekret"}).json()
        assert {key: detailed[key] for key in ("status", "model", "engine")} == {
            "status": "ok",
            "model": "fake-model",
            "engine": "fake",
        }
        assert detailed["serving"]["model_path"] == "/nonexistent/fake.gguf"  # what runs: the key holder's business


def test_junk_paths_do_not_grow_metrics(serve: ServeFn, fake_model: FakeModel) -> None:
    with serve(fake_model, api_key="sekret") as url, httpx.Client() as client:
        auth = {"Authorization": "Bearer sekret"}
        before = len(client.get(f"{url}/metrics", headers=auth).text)
        for index in range(60):
            client.post(f"{url}/v1/x-{index}", json={})  # unauthenticated junk
            client.get(f"{url}/x-{index}", headers=auth)  # authenticated junk
        text = client.get(f"{url}/metrics", headers=auth).text
    assert len(text) - before < 2000, "every junk path added a metric series"
    assert 'launcher_requests_total{endpoint="other",status="401"} 60.0' in text
    assert 'launcher_requests_total{endpoint="other",status="404"} 60.0' in text


def test_a_refused_request_is_not_counted_as_prompt_tokens(serve: ServeFn, fake_model: FakeModel) -> None:
    fake_model.queue_full = True
    with serve(fake_model) as url:
        response = httpx.post(f"{url}/v1/chat/completions", json={"messages": HELLO})
        assert response.status_code == 429
        text = httpx.get(f"{url}/metrics").text
    assert metric_total(text, "launcher_prompt_tokens_total") == 0


def test_retry_after_is_when_a_queue_place_frees_and_shorter_than_the_keep_alive() -> None:
    pace = RequestPace()
    pace.average_s = 1.95  # p95 latency in the probe that saw Retry-After: 9
    assert pace.queue_full(4).retry_after_s == 1.0
    pace.average_s = 600.0
    assert pace.queue_full(4).retry_after_s == MAX_RETRY_AFTER_S
    assert KEEPALIVE_S > MAX_RETRY_AFTER_S  # a client retrying as told finds its connection still open


def test_stopping_the_server_ends_running_streams_with_an_error(fake_model: FakeModel) -> None:
    fake_model.reply = lambda prompt: "x" * 2000
    fake_model.delay = 0.01  # 20 s if nothing ends it
    app = create_app(fake_model, ServeConfig(port=0))
    lines: list[str] = []
    started = threading.Event()

    def read(url: str) -> None:
        body = {"messages": HELLO, "stream": True}
        with httpx.stream("POST", f"{url}/v1/chat/completions", json=body, timeout=30) as response:
            for line in response.iter_lines():
                if line:
                    lines.append(line)
                    started.set()

    with running_app(app) as url:
        reader = threading.Thread(target=read, args=(url,))
        reader.start()
        assert started.wait(10)
        stopping = time.monotonic()
    took = time.monotonic() - stopping
    reader.join(10)
    assert lines[-1] == "data: [DONE]" and took < 2.0
    error = json.loads(lines[-2].removeprefix("data: "))["error"]
    assert "shutting down" in error["message"]  # the half reply is not passed off as whole
    chunks = [json.loads(line.removeprefix("data: ")) for line in lines[:-2]]
    assert all(chunk["choices"][0]["finish_reason"] is None for chunk in chunks)


def test_sigterm_mid_stream_sends_an_error_and_exits(tiny_gguf: Path, tmp_path: Path) -> None:
    spec = SERVERS[0]
    if spec.available():
        pytest.skip(str(spec.available()))
    server = start_server(spec, tiny_gguf, tmp_path, "--parallel", "1")
    lines: list[str] = []
    sent: float | None = None
    try:
        body = {"model": "m", "max_tokens": 1900, "stream": True, "messages": HELLO, "temperature": 1.0}
        with httpx.stream("POST", f"{server.url}/v1/messages", json=body, timeout=30) as response:
            for line in response.iter_lines():
                if line.startswith("event: content_block_delta") and sent is None:
                    server.process.send_signal(signal.SIGTERM)
                    sent = time.monotonic()
                lines.append(line)
        assert sent is not None
        ended_after = time.monotonic() - sent
        # uvicorn re-raises the signal once it has shut down cleanly: -SIGTERM is the normal exit here
        assert server.process.wait(timeout=10) in (0, -signal.SIGTERM)
    finally:
        server.stop()
    events = [line.removeprefix("event: ") for line in lines if line.startswith("event: ")]
    assert events[-1] == "error" and "message_stop" not in events and ended_after < 3.0
    error = json.loads(next(line for line in reversed(lines) if line.startswith("data: ")).removeprefix("data: "))
    assert error["error"]["type"] == "overloaded_error"  # Claude Code retries it; it never reads end_turn
