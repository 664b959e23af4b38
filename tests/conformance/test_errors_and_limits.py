"""Errors in each API's shape, concurrency without cancellation, disconnect cleanup, auth, queue limits, metrics."""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Callable
from typing import Any

import anthropic
import httpx
import openai
import pytest

from tests.conformance.conftest import API_KEY
from tests.conformance.servers import RunningServer
from tests.metrics_text import metric_total

HELLO: Any = [{"role": "user", "content": "Hello there, how are you today?"}]


def metric(root_url: str, name: str, headers: dict[str, str] | None = None) -> float:
    text = httpx.get(f"{root_url}/metrics", headers=headers).text
    return metric_total(text, name)


def wait_for(predicate: Any, timeout: float = 30.0) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return True
        time.sleep(0.05)
    return False


@pytest.mark.parametrize(
    ("body", "param"),
    [
        ({"messages": [{"role": "user", "content": "x"}], "max_tokens": "many"}, "max_tokens"),
        ({"messages": [{"role": "wizard", "content": "x"}]}, "messages.0.role"),
        ({"messages": []}, "messages"),
        ({"messages": [{"role": "tool", "content": "x", "tool_call_id": "c"}]}, "messages.0"),
        ({"messages": [{"role": "user", "content": "hello " * 3000}]}, "messages"),
    ],
)
def test_openai_errors_are_400_before_any_stream(base_url: str, body: dict[str, Any], param: str) -> None:
    for stream in (False, True):
        response = httpx.post(f"{base_url}/chat/completions", json={**body, "stream": stream}, timeout=60)
        assert response.status_code == 400
        assert response.headers["content-type"].startswith("application/json")
        error = response.json()["error"]
        assert set(error) == {"message", "type", "param", "code"} and error["param"] == param


def test_bad_json_and_unknown_routes(base_url: str, server: RunningServer) -> None:
    response = httpx.post(f"{base_url}/chat/completions", content=b"{", headers={"content-type": "application/json"})
    assert response.status_code == 400 and response.json()["error"]["type"] == "invalid_request_error"
    assert httpx.get(f"{base_url}/nothing-here").status_code == 404
    response = httpx.post(f"{server.url}/v1/messages", content=b"{", headers={"content-type": "application/json"})
    assert response.status_code == 400 and response.json()["type"] == "error"


def test_concurrent_streams_all_complete(
    base_url: str, model_id: str, openai_client: Callable[..., openai.OpenAI]
) -> None:
    api = openai_client(base_url=base_url, api_key="unused")
    solo = api.chat.completions.create(model=model_id, messages=HELLO, max_tokens=16, temperature=0)
    results: list[tuple[str, str | None]] = []
    errors: list[BaseException] = []

    def one() -> None:
        try:
            stream = api.chat.completions.create(
                model=model_id, messages=HELLO, max_tokens=16, temperature=0, stream=True
            )
            chunks = [c for c in stream if c.choices]
            text = "".join(c.choices[0].delta.content or "" for c in chunks)
            results.append((text, chunks[-1].choices[0].finish_reason))
        except BaseException as err:  # reported below with the others
            errors.append(err)

    threads = [threading.Thread(target=one) for _ in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(120)
    assert not errors
    assert results == [(solo.choices[0].message.content, solo.choices[0].finish_reason)] * 4


def test_disconnect_frees_the_generation(base_url: str, root_url: str, model_id: str) -> None:
    body = {"model": model_id, "messages": HELLO, "max_tokens": 1500, "stream": True, "ignore_eos": True}
    with httpx.stream("POST", f"{base_url}/chat/completions", json=body, timeout=60) as response:
        lines = response.iter_lines()
        for _ in range(4):
            next(lines)
        assert metric(root_url, "launcher_requests_running") >= 1
        # /v1/models and /health answer while a generation runs
        assert httpx.get(f"{base_url}/models", timeout=5).json()["data"][0]["id"] == model_id
        assert httpx.get(f"{root_url}/health", timeout=5).status_code == 200
    assert wait_for(lambda: metric(root_url, "launcher_requests_running") == 0)


def test_metrics_exposition(
    root_url: str, base_url: str, model_id: str, openai_client: Callable[..., openai.OpenAI]
) -> None:
    api = openai_client(base_url=base_url, api_key="unused")
    before = metric(root_url, "launcher_generation_tokens_total")
    reply = api.chat.completions.create(model=model_id, messages=HELLO, max_tokens=5)
    assert reply.usage is not None
    assert metric(root_url, "launcher_generation_tokens_total") - before >= reply.usage.completion_tokens
    text = httpx.get(f"{root_url}/metrics").text
    for name in (
        "launcher_prompt_tokens_total",
        "launcher_time_to_first_token_seconds_count",
        "launcher_inter_token_latency_seconds_count",
        "launcher_request_duration_seconds_count",
        "launcher_requests_waiting",
        "launcher_kv_cache_usage_ratio",
        "launcher_kv_cache_total_tokens",
        "launcher_prefill_tokens_per_second",
        "launcher_decode_tokens_per_second",
        "launcher_requests_total",
        "launcher_prefix_cache_hit_tokens_total",
        "process_resident_memory_bytes",
    ):
        assert name in text


def test_api_key_auth(
    strict_server: RunningServer,
    openai_client: Callable[..., openai.OpenAI],
    anthropic_client: Callable[..., anthropic.Anthropic],
) -> None:
    model_id = str(strict_server.ready["model"])
    assert strict_server.ready["api_key_required"] is True
    with pytest.raises(openai.AuthenticationError):
        openai_client(base_url=strict_server.base_url, api_key="wrong").models.list()
    assert openai_client(base_url=strict_server.base_url, api_key=API_KEY).models.list().data
    with pytest.raises(anthropic.AuthenticationError):
        anthropic_client(base_url=strict_server.url, api_key="wrong").messages.count_tokens(
            model=model_id, messages=HELLO
        )
    counted = anthropic_client(base_url=strict_server.url, api_key=API_KEY).messages.count_tokens(
        model=model_id, messages=HELLO
    )
    assert counted.input_tokens > 0
    bearer = anthropic_client(base_url=strict_server.url, auth_token=API_KEY, api_key=None)
    assert bearer.messages.count_tokens(model=model_id, messages=HELLO).input_tokens == counted.input_tokens


def test_full_queue_is_429_with_retry_after(strict_server: RunningServer) -> None:
    headers = {"Authorization": f"Bearer {API_KEY}"}
    # A long generation (ignore_eos: it cannot end early) holds the only sequence.
    body = {"model": "x", "messages": HELLO, "max_tokens": 16000, "stream": True, "ignore_eos": True}
    with httpx.stream(
        "POST", f"{strict_server.base_url}/chat/completions", json=body, headers=headers, timeout=60
    ) as busy:
        lines = busy.iter_lines()
        next(lines)  # the only sequence is now generating
        response = httpx.post(
            f"{strict_server.base_url}/chat/completions", json={**body, "stream": False}, headers=headers, timeout=60
        )
        assert response.status_code == 429
        assert int(response.headers["retry-after"]) >= 1
        assert response.json()["error"]["type"] == "rate_limit_error"
        message = httpx.post(
            f"{strict_server.url}/v1/messages",
            headers=headers,
            timeout=60,
            json={"model": "x", "max_tokens": 5, "messages": HELLO},
        )
        assert message.status_code == 429 and message.json()["error"]["type"] == "rate_limit_error", (
            message.text,
            [next(lines, None) for _ in range(3)],
        )
    assert json.loads(json.dumps(strict_server.ready))["parallel"] == 1
