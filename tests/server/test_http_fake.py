"""The server's HTTP behaviour with a scripted model: exact text in, exact shapes out.

The scripted model stands in for the engine only where a real model cannot be told what to
write (tool-call text in a given family's syntax, a stop string split across tokens).
"""

from __future__ import annotations

import json
import threading
import time
from typing import Any

import httpx
import openai
import pytest

from tests.server.conftest import ServeFn
from tests.server.fake_model import FakeModel

TOOLS: Any = [
    {
        "type": "function",
        "function": {
            "name": "get_weather",
            "description": "Weather for a city",
            "parameters": {"type": "object", "properties": {"city": {"type": "string"}}},
        },
    }
]
HERMES_CALL = 'One moment.<tool_call>\n{"name": "get_weather", "arguments": {"city": "Paris"}}\n</tool_call>'


def client(url: str, **kwargs: object) -> openai.OpenAI:
    return openai.OpenAI(base_url=f"{url}/v1", api_key=str(kwargs.pop("api_key", "none")), max_retries=0, **kwargs)  # type: ignore[arg-type]


def test_stop_string_split_across_tokens_is_cut_and_never_sent(serve: ServeFn, fake_model: FakeModel) -> None:
    fake_model.reply = lambda prompt: "alpha beta STOP gamma"
    with serve(fake_model) as url:
        api = client(url)
        reply = api.chat.completions.create(model="x", messages=[{"role": "user", "content": "hi"}], stop=["STOP"])
        assert reply.choices[0].message.content == "alpha beta "
        assert reply.choices[0].finish_reason == "stop"
        pieces = [
            c.choices[0].delta.content or ""
            for c in api.chat.completions.create(
                model="x", messages=[{"role": "user", "content": "hi"}], stop=["ST", "gamma"], stream=True
            )
            if c.choices
        ]
        assert "".join(pieces) == "alpha beta "
    assert fake_model.closed_early == 2  # the engine sequence was closed at the stop string


def test_auto_tool_call_streams_as_tool_call_deltas(serve: ServeFn, fake_model: FakeModel) -> None:
    fake_model.reply = lambda prompt: HERMES_CALL
    with serve(fake_model) as url:
        api = client(url)
        chunks = list(
            api.chat.completions.create(
                model="x", messages=[{"role": "user", "content": "Paris?"}], tools=TOOLS, stream=True
            )
        )  # type: ignore[arg-type]
        text = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
        deltas = [d for c in chunks if c.choices for d in (c.choices[0].delta.tool_calls or [])]
        assert text == "One moment."
        assert deltas[0].id and deltas[0].function and deltas[0].function.name == "get_weather"
        arguments = "".join(d.function.arguments or "" for d in deltas if d.function)
        assert json.loads(arguments) == {"city": "Paris"}
        assert chunks[-1].choices[0].finish_reason == "tool_calls"
        whole = api.chat.completions.create(model="x", messages=[{"role": "user", "content": "Paris?"}], tools=TOOLS)  # type: ignore[arg-type]
        call = whole.choices[0].message.tool_calls[0]  # type: ignore[index]
        assert call.function.name == "get_weather" and json.loads(call.function.arguments) == {"city": "Paris"}  # type: ignore[union-attr]
        assert whole.choices[0].finish_reason == "tool_calls"


def test_tool_choice_none_leaves_text_alone(serve: ServeFn, fake_model: FakeModel) -> None:
    fake_model.reply = lambda prompt: HERMES_CALL
    with serve(fake_model) as url:
        reply = client(url).chat.completions.create(
            model="x", messages=[{"role": "user", "content": "x"}], tools=TOOLS, tool_choice="none"
        )  # type: ignore[arg-type]
        assert reply.choices[0].message.content == HERMES_CALL and not reply.choices[0].message.tool_calls


def test_tool_history_renders_into_the_prompt(serve: ServeFn, fake_model: FakeModel) -> None:
    seen: list[str] = []
    fake_model.reply = lambda prompt: seen.append(prompt) or "It is sunny."  # type: ignore[func-returns-value]
    history: Any = [
        {"role": "user", "content": "Weather in Paris?"},
        {
            "role": "assistant",
            "content": None,
            "tool_calls": [
                {
                    "id": "call_1",
                    "type": "function",
                    "function": {"name": "get_weather", "arguments": '{"city": "Paris"}'},
                }
            ],
        },
        {"role": "tool", "tool_call_id": "call_1", "content": "sunny, 21C"},
    ]
    with serve(fake_model) as url:
        reply = client(url).chat.completions.create(model="x", messages=history, tools=TOOLS)  # type: ignore[arg-type]
    assert reply.choices[0].message.content == "It is sunny."
    assert '{"name": "get_weather", "arguments": {"city": "Paris"}}' in seen[0]
    assert "sunny, 21C" in seen[0]


@pytest.mark.parametrize(
    ("body", "param"),
    [
        ({"messages": "hello"}, "messages"),
        ({"messages": [{"role": "user", "content": "x"}], "temperature": "hot"}, "temperature"),
        ({"messages": [{"role": "tool", "content": "x", "tool_call_id": "a"}]}, "messages.0"),
        (
            {
                "messages": [
                    {
                        "role": "assistant",
                        "content": "",
                        "tool_calls": [
                            {"id": "a", "type": "function", "function": {"name": "f", "arguments": "{not json"}}
                        ],
                    }
                ]
            },
            "messages.0.tool_calls.0",
        ),
        ({"messages": [{"role": "user", "content": "x" * 5000}]}, "messages"),
        (
            {"messages": [{"role": "user", "content": [{"type": "image_url", "image_url": {"url": "data:"}}]}]},
            "messages.0",
        ),
        ({"messages": [{"role": "user", "content": "x"}], "tool_choice": "required"}, "tool_choice"),
    ],
)
def test_bad_requests_are_400_in_openai_shape(
    serve: ServeFn, fake_model: FakeModel, body: dict[str, object], param: str
) -> None:
    with serve(fake_model) as url:
        for stream in (False, True):
            response = httpx.post(f"{url}/v1/chat/completions", json={"model": "x", **body, "stream": stream})
            assert response.status_code == 400, response.text
            error = response.json()["error"]
            assert error["type"] == "invalid_request_error" and error["message"]
            assert error["param"] == param
    assert fake_model.requests == []


def test_unknown_extra_fields_are_tolerated(serve: ServeFn, fake_model: FakeModel) -> None:
    with serve(fake_model) as url:
        response = httpx.post(
            f"{url}/v1/chat/completions",
            json={
                "model": "x",
                "messages": [{"role": "user", "content": "x", "cache_control": {"a": 1}}],
                "store": True,
                "reasoning_effort": "low",
                "some_future_field": [1, 2],
            },
        )
        assert response.status_code == 200


def test_bad_json_is_400_not_500(serve: ServeFn, fake_model: FakeModel) -> None:
    with serve(fake_model) as url:
        response = httpx.post(
            f"{url}/v1/chat/completions", content=b"{nope", headers={"content-type": "application/json"}
        )
        assert response.status_code == 400 and "not valid JSON" in response.json()["error"]["message"]
        response = httpx.post(f"{url}/v1/messages", content=b"[1]")
        assert response.status_code == 400 and response.json()["type"] == "error"


def test_full_queue_is_429_with_retry_after(serve: ServeFn, fake_model: FakeModel) -> None:
    fake_model.queue_full = True
    with serve(fake_model) as url:
        response = httpx.post(
            f"{url}/v1/chat/completions",
            json={"model": "x", "stream": True, "messages": [{"role": "user", "content": "x"}]},
        )
        assert response.status_code == 429
        assert response.headers["retry-after"] == "2"
        assert response.json()["error"]["type"] == "rate_limit_error"


def test_disconnect_mid_stream_closes_the_generation(serve: ServeFn, fake_model: FakeModel) -> None:
    fake_model.reply = lambda prompt: "x" * 400
    fake_model.delay = 0.02
    with serve(fake_model) as url:
        with httpx.stream(
            "POST",
            f"{url}/v1/chat/completions",
            json={"model": "x", "stream": True, "messages": [{"role": "user", "content": "x"}]},
        ) as response:
            lines = response.iter_lines()
            for _ in range(6):
                next(lines)
        deadline = time.monotonic() + 10
        while fake_model.closed_early == 0 and time.monotonic() < deadline:
            time.sleep(0.02)
        assert fake_model.closed_early == 1 and fake_model.running == 0


def test_concurrent_streams_do_not_cancel_each_other(serve: ServeFn, fake_model: FakeModel) -> None:
    fake_model.reply = lambda prompt: "abcdefghij" * 3
    fake_model.delay = 0.005
    results: list[str] = []
    with serve(fake_model) as url:
        api = client(url)

        def one() -> None:
            stream = api.chat.completions.create(model="x", messages=[{"role": "user", "content": "x"}], stream=True)
            results.append("".join(c.choices[0].delta.content or "" for c in stream if c.choices))

        threads = [threading.Thread(target=one) for _ in range(4)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
    assert results == ["abcdefghij" * 3] * 4


def test_api_key_is_required_when_configured(serve: ServeFn, fake_model: FakeModel) -> None:
    with serve(fake_model, api_key="sekret") as url:
        assert httpx.get(f"{url}/health").status_code == 200
        response = httpx.get(f"{url}/v1/models")
        assert response.status_code == 401 and response.json()["error"]["type"] == "authentication_error"
        assert httpx.get(f"{url}/v1/models", headers={"Authorization": "Bearer sekret"}).status_code == 200
        assert httpx.get(f"{url}/v1/models", headers={"x-api-key": "sekret"}).status_code == 200
        assert httpx.get(f"{url}/v1/models", headers={"x-api-key": "wrong"}).status_code == 401
        response = httpx.post(f"{url}/v1/messages", json={})
        assert response.status_code == 401 and response.json()["error"]["type"] == "authentication_error"


def test_foreign_host_header_is_refused(serve: ServeFn, fake_model: FakeModel) -> None:
    with serve(fake_model) as url:
        assert httpx.get(f"{url}/v1/models", headers={"Host": "evil.example:8420"}).status_code == 403
        assert httpx.get(f"{url}/v1/models", headers={"Host": "localhost:8420"}).status_code == 200


def test_cors_is_off_unless_origins_are_configured(serve: ServeFn, fake_model: FakeModel) -> None:
    preflight = {"Origin": "http://app.example", "Access-Control-Request-Method": "POST"}
    with serve(fake_model) as url:
        response = httpx.options(f"{url}/v1/chat/completions", headers=preflight)
        assert "access-control-allow-origin" not in response.headers
    with serve(fake_model, cors_origins=["http://app.example"]) as url:
        response = httpx.options(f"{url}/v1/chat/completions", headers=preflight)
        assert response.headers["access-control-allow-origin"] == "http://app.example"


def test_health_is_503_while_loading_then_200(serve: ServeFn, fake_model: FakeModel) -> None:
    release = threading.Event()

    def slow_loader() -> FakeModel:
        release.wait(10)
        return fake_model

    with serve(slow_loader) as url:  # type: ignore[arg-type]
        assert httpx.get(f"{url}/health").status_code == 503
        listed = httpx.get(f"{url}/v1/models").json()["data"]  # named already, loaded not yet
        assert [(card["id"], card["loaded"]) for card in listed] == [("model", False)]
        release.set()
        deadline = time.monotonic() + 10
        while httpx.get(f"{url}/health").status_code != 200 and time.monotonic() < deadline:
            time.sleep(0.02)
        assert httpx.get(f"{url}/health").json()["status"] == "ok"
    assert fake_model.closed


def test_metrics_count_tokens_and_requests(serve: ServeFn, fake_model: FakeModel) -> None:
    with serve(fake_model) as url:
        client(url).chat.completions.create(model="x", messages=[{"role": "user", "content": "hi"}])
        text = httpx.get(f"{url}/metrics").text
    assert 'launcher_requests_total{endpoint="/v1/chat/completions",status="200"} 1.0' in text
    assert 'launcher_generation_tokens_total{model="fake-model"} 26.0' in text
    assert 'launcher_kv_cache_total_tokens{model="fake-model"} 1024.0' in text
    for name in (
        "launcher_prompt_tokens_total",
        "launcher_time_to_first_token_seconds_bucket",
        "launcher_inter_token_latency_seconds_count",
        "launcher_decode_tokens_per_second",
        "launcher_prefix_cache_hits_total",
        "process_cpu_seconds_total",
    ):
        assert name in text


def test_disconnect_during_a_non_streaming_request_closes_the_generation(serve: ServeFn, fake_model: FakeModel) -> None:
    fake_model.reply = lambda prompt: "x" * 400
    fake_model.delay = 0.02
    with serve(fake_model) as url:
        with pytest.raises(httpx.ReadTimeout):
            httpx.post(
                f"{url}/v1/chat/completions",
                timeout=0.3,
                json={"model": "x", "messages": [{"role": "user", "content": "x"}]},
            )
        deadline = time.monotonic() + 10
        while fake_model.closed_early == 0 and time.monotonic() < deadline:
            time.sleep(0.02)
        assert fake_model.closed_early == 1 and fake_model.running == 0
