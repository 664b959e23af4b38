"""The measured figures in /metrics mean one thing each, checked against a scripted engine whose
token timings are known: 21 tokens, the first after 0.25 + 0.05 s, then one every 0.05 s."""

from __future__ import annotations

import concurrent.futures
import time

import httpx
import pytest

from tests.metrics_text import metric_total
from tests.server.conftest import ServeFn
from tests.server.fake_model import FakeModel

TOKENS, FIRST_DELAY, DELAY = 21, 0.25, 0.05


def _value(text: str, name: str) -> float:
    return metric_total(text, name)


def _chat(url: str) -> dict[str, object]:
    body = {"model": "m", "messages": [{"role": "user", "content": "How fast are you?"}], "max_tokens": 100}
    response = httpx.post(f"{url}/v1/chat/completions", json=body, timeout=30)
    response.raise_for_status()
    return dict(response.json())


@pytest.fixture
def timed_model(fake_model: FakeModel) -> FakeModel:
    fake_model.reply = lambda prompt: "a" * TOKENS
    fake_model.first_delay, fake_model.delay = FIRST_DELAY, DELAY
    return fake_model


def test_decode_is_per_stream_and_prefill_is_uncached_tokens_over_ttft(serve: ServeFn, timed_model: FakeModel) -> None:
    with serve(timed_model) as url:
        reply = _chat(url)
        text = httpx.get(f"{url}/metrics").text
    decode = _value(text, "launcher_stream_decode_tokens_total") / _value(text, "launcher_stream_decode_seconds_total")
    assert _value(text, "launcher_stream_decode_tokens_total") == TOKENS - 1  # the first token is prefill's
    assert decode == pytest.approx(1 / DELAY, rel=0.15)  # 20 tok/s, whatever the time to the first token
    prompt_tokens = reply["usage"]["prompt_tokens"]  # type: ignore[index]
    assert _value(text, "launcher_prefill_uncached_tokens_total") == prompt_tokens
    prefill = prompt_tokens / _value(text, "launcher_prefill_seconds_total")
    assert prefill == pytest.approx(prompt_tokens / (FIRST_DELAY + DELAY), rel=0.15)


def test_aggregate_speed_counts_only_busy_time(serve: ServeFn, timed_model: FakeModel) -> None:
    with serve(timed_model) as url:
        with concurrent.futures.ThreadPoolExecutor(2) as pool:
            list(pool.map(lambda _: _chat(url), range(2)))
        idle = httpx.get(f"{url}/metrics").text
        busy_before = _value(idle, "launcher_busy_seconds_total")
        time.sleep(0.3)  # idle time is not busy time
        text = httpx.get(f"{url}/metrics").text
    busy = _value(text, "launcher_busy_seconds_total")
    assert busy == busy_before
    # Two streams decode side by side: busy from the first token to the last, ~20 x 0.05 s.
    assert busy == pytest.approx((TOKENS - 1) * DELAY, rel=0.25)
    aggregate = _value(text, "launcher_generation_tokens_total") / busy
    assert aggregate == pytest.approx(2 * TOKENS / ((TOKENS - 1) * DELAY), rel=0.25)
    per_stream = _value(text, "launcher_stream_decode_tokens_total") / _value(
        text, "launcher_stream_decode_seconds_total"
    )
    assert per_stream == pytest.approx(1 / DELAY, rel=0.15)
