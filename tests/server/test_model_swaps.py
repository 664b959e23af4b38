"""Two models and room for one (`--max-models 1`): a model kept busy by a stream of requests gives way
to a request for the other one, and a swap that cannot happen in time is a clear 503.

The engine seam is scripted (each model a FakeModel that takes a while per request); the pool,
routes and HTTP above it are the real server's.
"""

from __future__ import annotations

import logging
import threading
import time
from typing import Any

import httpx
import pytest

from launcher.core.config import ServeConfig
from launcher.engines.base import LoadedModel
from launcher.server.app import serving_app
from launcher.server.metrics import ServerMetrics
from launcher.server.pool.model_names import ModelNames
from launcher.server.pool.model_pool import ModelPool, PreparedLoad
from launcher.server.pool.model_slot import ModelEntry
from launcher.server.state import ServerState
from tests.server.fake_model import FakeModel, fake_info
from tests.server.harness import running_app

HELLO = [{"role": "user", "content": "hi"}]


def two_model_app(reply_chars: int, swap_wait: int = 120) -> Any:
    """An app serving `a` and `b`, one loaded at a time; each request takes `reply_chars` x 20 ms."""
    config = ServeConfig(port=0, library=True, max_models=1, swap_wait=swap_wait)

    def entry(name: str) -> ModelEntry:
        return ModelEntry(name, config.model_copy(update={"model": name}), None, "library")

    def prepare(entry: ModelEntry) -> PreparedLoad:
        def load() -> LoadedModel:
            model = FakeModel(reply=lambda _: entry.name * reply_chars, delay=0.02, info=fake_info(id=entry.name))
            return model  # type: ignore[return-value]

        return PreparedLoad("fake", "scripted", entry.config, 0, load)

    names = ModelNames({name: entry(name) for name in ("a", "b")})
    metrics = ServerMetrics()
    pool = ModelPool(names, prepare, metrics, max_models=1)
    return serving_app(ServerState(config=config, pool=pool, metrics=metrics))


def chat(url: str, model: str, timeout: float = 60) -> httpx.Response:
    body = {"model": model, "messages": HELLO, "max_tokens": 100}
    return httpx.post(url + "/v1/chat/completions", json=body, timeout=timeout)


def test_a_model_kept_busy_gives_way_to_a_request_for_another() -> None:
    with running_app(two_model_app(reply_chars=100)) as url:  # a request takes 2 s
        assert chat(url, "a").status_code == 200
        stop = threading.Event()
        statuses: list[int] = []

        def keep_a_busy(start_after: float) -> None:  # back to back, overlapping the other clients
            time.sleep(start_after)
            while not stop.is_set():
                statuses.append(chat(url, "a").status_code)

        clients = [threading.Thread(target=keep_a_busy, args=(i / 8,)) for i in range(16)]
        for client in clients:
            client.start()
        try:
            time.sleep(3.0)
            started = time.monotonic()
            reply = chat(url, "b", timeout=30)  # before: starved for 120 s, then a 503
            waited = time.monotonic() - started
        finally:
            stop.set()
            for client in clients:
                client.join(timeout=60)
        assert reply.status_code == 200, reply.text
        assert reply.json()["choices"][0]["message"]["content"].startswith("b")
        assert waited < 30, waited
        assert statuses and set(statuses) == {200}  # `a`'s clients waited for the swap, none was refused


def test_a_swap_that_cannot_happen_in_time_is_a_503_with_retry_after(caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.INFO, logger="launcher.requests")
    with running_app(two_model_app(reply_chars=400, swap_wait=1)) as url:  # `a`'s request takes 8 s
        results: dict[str, httpx.Response] = {}
        long_a = threading.Thread(target=lambda: results.setdefault("long", chat(url, "a")))
        long_a.start()
        deadline = time.monotonic() + 30
        while "a" not in {m["id"] for m in httpx.get(url + "/launcher/models").json()["models"]}:
            assert time.monotonic() < deadline, "a did not load"
            time.sleep(0.05)
        time.sleep(0.3)  # its generation is running
        started = time.monotonic()
        refused = chat(url, "b")
        assert time.monotonic() - started < 8  # not after `a`'s request
        long_a.join(timeout=60)
    assert refused.status_code == 503
    assert int(refused.headers["retry-after"]) > 0
    error = refused.json()["error"]
    assert error["code"] == "model_swap_timeout" and "--swap-wait" in error["message"]
    assert results["long"].status_code == 200  # the busy model's request was never cut
    logged = [r.getMessage() for r in caplog.records if r.name == "launcher.requests" and " 503 " in r.getMessage()]
    assert logged and "asked=b" in logged[0]  # the request log says which model it waited for
