"""A cold model's waiting clients: keep-alives while it loads, one load for all, one error for all.

The engine seam is scripted (a load that takes a while, or fails); the pool, routes, SSE and
HTTP above it are the real server's.
"""

from __future__ import annotations

import concurrent.futures
import json
import re
import threading
import time

import httpx

from launcher.core.config import ServeConfig
from launcher.core.errors import EngineError
from launcher.engines.base import LoadedModel
from launcher.server.app import serving_app
from launcher.server.metrics import ServerMetrics
from launcher.server.pool.model_names import ModelNames
from launcher.server.pool.model_pool import ModelPool, PreparedLoad
from launcher.server.pool.model_slot import ModelEntry
from launcher.server.state import ServerState
from tests.server.fake_model import FakeModel
from tests.server.harness import running_app

HELLO = [{"role": "user", "content": "hello"}]


class Loads:
    """Counts loads; each takes `seconds`, then returns a FakeModel or raises."""

    def __init__(self, seconds: float, fail: bool = False) -> None:
        self.seconds, self.fail, self.count = seconds, fail, 0
        self.lock = threading.Lock()

    def __call__(self) -> LoadedModel:
        with self.lock:
            self.count += 1
        time.sleep(self.seconds)
        if self.fail:
            raise EngineError("the weights file is truncated")
        return FakeModel(reply=lambda _: "ready")  # type: ignore[return-value]


def app_with(loads: Loads, keepalive_s: float = 0.2) -> object:
    config = ServeConfig(port=0, library=True)
    names = ModelNames({"cold": ModelEntry("cold", config, None, "library")})
    metrics = ServerMetrics()
    pool = ModelPool(names, lambda entry: PreparedLoad("fake", "scripted", config, 0, loads), metrics)
    state = ServerState(config=config, pool=pool, metrics=metrics)
    state.keepalive_s = keepalive_s
    return serving_app(state)


def test_streams_waiting_for_a_load_get_keep_alives_and_one_load_serves_them_all() -> None:
    loads = Loads(seconds=1.0)
    with running_app(app_with(loads)) as url:  # type: ignore[arg-type]

        def stream(api: str) -> str:
            if api == "anthropic":
                path, body = "/v1/messages", {"model": "cold", "max_tokens": 8, "messages": HELLO, "stream": True}
            else:
                path, body = "/v1/chat/completions", {"model": "cold", "messages": HELLO, "stream": True}
            with httpx.stream("POST", url + path, json=body, timeout=30) as response:
                assert response.status_code == 200
                return response.read().decode()

        with concurrent.futures.ThreadPoolExecutor(4) as pool:
            bodies = list(pool.map(stream, ["openai", "openai", "anthropic", "anthropic"]))
    assert loads.count == 1
    openai_body, anthropic_body = bodies[0], bodies[2]
    text = "".join(re.findall(r'"content":"([^"]*)"', openai_body))
    assert ": keep-alive" in openai_body and text == "ready"
    assert openai_body.rstrip().endswith("data: [DONE]")
    assert "event: ping" in anthropic_body and "event: message_stop" in anthropic_body


def test_a_failed_load_gives_every_waiter_the_same_clear_error() -> None:
    loads = Loads(seconds=0.5, fail=True)
    with running_app(app_with(loads)) as url:  # type: ignore[arg-type]

        def plain(_: int) -> httpx.Response:
            return httpx.post(url + "/v1/chat/completions", json={"model": "cold", "messages": HELLO}, timeout=30)

        with concurrent.futures.ThreadPoolExecutor(3) as pool:
            replies = list(pool.map(plain, range(3)))
        body = {"model": "cold", "messages": HELLO, "stream": True}
        with httpx.stream("POST", url + "/v1/chat/completions", json=body, timeout=30) as response:
            streamed = response.read().decode()
    assert loads.count == 2  # one for the burst of three, one for the stream that came after it
    messages = {reply.json()["error"]["message"] for reply in replies}
    assert [reply.status_code for reply in replies] == [503] * 3
    assert messages == {"The model 'cold' failed to load: the weights file is truncated"}
    assert "failed to load: the weights file is truncated" in streamed and streamed.rstrip().endswith("[DONE]")


def test_a_stream_waiting_for_its_model_hears_at_once_that_the_server_is_stopping() -> None:
    """Stopping the server (SIGTERM: uvicorn's shutdown drains the state) while a stream waits for its
    model: the stream gets the shutdown's 503 as its error event at once, not a closed connection
    when uvicorn's grace period runs out."""
    loads = Loads(seconds=8.0)
    lines: list[str] = []
    waiting = threading.Event()

    def stream(url: str) -> None:
        body = {"model": "cold", "messages": HELLO, "stream": True}
        with httpx.stream("POST", url + "/v1/chat/completions", json=body, timeout=60) as response:
            for line in response.iter_lines():
                if line:
                    lines.append(line)
                    waiting.set()

    with running_app(app_with(loads)) as url:  # type: ignore[arg-type]
        reader = threading.Thread(target=stream, args=(url,))
        reader.start()
        assert waiting.wait(30)  # the stream is open, its model loading
        stopping = time.monotonic()
    reader.join(30)
    ended_after = time.monotonic() - stopping
    errors = [json.loads(line.removeprefix("data: ")) for line in lines if line.startswith('data: {"error"')]
    assert errors and errors[0]["error"]["code"] == "server_shutting_down", lines  # the 503 itself, not a 500
    assert lines[-1] == "data: [DONE]" and ended_after < 7.0  # before the load would have ended
