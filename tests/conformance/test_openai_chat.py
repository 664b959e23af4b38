"""OpenAI Chat Completions: shapes, streaming, usage, limits, tools, response formats."""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import httpx
import openai
import pytest

WEATHER: Any = [
    {
        "type": "function",
        "function": {
            "name": "get_weather",
            "description": "Current weather",
            "parameters": {
                "type": "object",
                "properties": {"unit": {"type": "string", "enum": ["celsius", "fahrenheit"]}},
                "required": ["unit"],
            },
        },
    }
]
TIME: Any = [
    {
        "type": "function",
        "function": {
            "name": "get_time",
            "parameters": {"type": "object", "properties": {"utc": {"type": "boolean"}}, "required": ["utc"]},
        },
    }
]
HELLO: Any = [{"role": "user", "content": "Hello there, how are you today?"}]


@pytest.fixture
def api(base_url: str) -> Iterator[openai.OpenAI]:
    with openai.OpenAI(base_url=base_url, api_key="unused", max_retries=0) as client:
        yield client


def sse_payloads(response: httpx.Response) -> list[str]:
    return [line[len("data: ") :] for line in response.iter_lines() if line.startswith("data: ")]


def test_models_lists_the_served_model(api: openai.OpenAI, root_url: str, model_id: str) -> None:
    models = api.models.list().data
    assert models[0].id == model_id
    cards = httpx.get(f"{root_url}/v1/models").json()["data"]
    card = cards[0]
    assert card["loaded"] and card["context_length"] > 0 and card["engine"] and "quant" in card
    assert not any(other["loaded"] for other in cards[1:])  # the library's other models load on request
    assert httpx.get(f"{root_url}/health").status_code == 200


def test_non_streaming_reply_and_usage(api: openai.OpenAI, model_id: str) -> None:
    reply = api.chat.completions.create(model=model_id, messages=HELLO, max_tokens=8, temperature=0)
    choice = reply.choices[0]
    assert reply.object == "chat.completion" and reply.id.startswith("chatcmpl-")
    assert choice.message.role == "assistant" and isinstance(choice.message.content, str)
    assert choice.finish_reason in ("stop", "length")
    assert reply.usage is not None and reply.usage.prompt_tokens > 0
    assert 0 < reply.usage.completion_tokens <= 8
    assert reply.usage.total_tokens == reply.usage.prompt_tokens + reply.usage.completion_tokens


def test_max_completion_tokens_caps_the_reply(api: openai.OpenAI, model_id: str) -> None:
    reply = api.chat.completions.create(model=model_id, messages=HELLO, max_completion_tokens=3, temperature=0)
    assert reply.usage is not None and reply.usage.completion_tokens <= 3


def test_stream_shape_role_first_one_id_finish_usage_done(base_url: str, model_id: str) -> None:
    body = {
        "model": model_id,
        "messages": HELLO,
        "max_tokens": 6,
        "stream": True,
        "stream_options": {"include_usage": True},
    }
    with httpx.stream("POST", f"{base_url}/chat/completions", json=body, timeout=60) as response:
        assert response.status_code == 200
        assert response.headers["content-type"].startswith("text/event-stream")
        payloads = sse_payloads(response)
    assert payloads[-1] == "[DONE]"
    chunks = [json.loads(p) for p in payloads[:-1]]
    assert len({c["id"] for c in chunks}) == 1
    assert all(c["object"] == "chat.completion.chunk" for c in chunks)
    assert chunks[0]["choices"][0]["delta"]["role"] == "assistant"
    finishes = [c for c in chunks if c["choices"] and c["choices"][0]["finish_reason"]]
    assert len(finishes) == 1 and finishes[0]["choices"][0]["finish_reason"] in ("stop", "length")
    usage = chunks[-1]
    assert usage["choices"] == [] and usage["usage"]["completion_tokens"] <= 6
    assert usage["usage"]["prompt_tokens"] > 0
    assert chunks.index(finishes[0]) == len(chunks) - 2


def test_stream_text_matches_non_streaming_text(api: openai.OpenAI, model_id: str) -> None:
    # speculation off: drafts are checked in batches sized from step timings, which can flip the random
    # model's near-ties between two runs; this test is about the two wire formats, not the engine
    exact = {"max_tokens": 12, "temperature": 0, "extra_body": {"speculative": "off"}}
    whole = api.chat.completions.create(model=model_id, messages=HELLO, **exact)
    stream = api.chat.completions.create(model=model_id, messages=HELLO, stream=True, **exact)
    assert "".join(c.choices[0].delta.content or "" for c in stream if c.choices) == whole.choices[0].message.content


def test_sampling_parameters_are_accepted(api: openai.OpenAI, model_id: str) -> None:
    reply = api.chat.completions.create(
        model=model_id,
        messages=HELLO,
        max_tokens=4,
        temperature=0.7,
        top_p=0.9,
        seed=7,
        presence_penalty=0.5,
        frequency_penalty=0.5,
        extra_body={"top_k": 20, "min_p": 0.05},
    )
    assert reply.usage is not None and reply.usage.completion_tokens <= 4


def test_logprobs(api: openai.OpenAI, model_id: str) -> None:
    reply = api.chat.completions.create(model=model_id, messages=HELLO, max_tokens=3, logprobs=True, top_logprobs=2)
    content = reply.choices[0].logprobs.content  # type: ignore[union-attr]
    assert content and all(item.logprob <= 0 and len(item.top_logprobs) == 2 for item in content)


def test_streamed_logprobs_match_the_whole_reply(api: openai.OpenAI, model_id: str) -> None:
    exact: Any = {"max_tokens": 6, "temperature": 0, "logprobs": True, "top_logprobs": 3}
    exact["extra_body"] = {"speculative": "off", "ignore_eos": True}  # same tokens both times, all six
    whole = api.chat.completions.create(model=model_id, messages=HELLO, **exact)
    stream = api.chat.completions.create(model=model_id, messages=HELLO, stream=True, **exact)
    streamed: list[Any] = []
    for chunk in stream:
        logprobs = chunk.choices[0].logprobs if chunk.choices else None
        streamed += logprobs.content or [] if logprobs is not None else []
    content = whole.choices[0].logprobs.content  # type: ignore[union-attr]
    assert content is not None and len(content) == 6 and len(streamed) == 6
    for mine, theirs in zip(streamed, content, strict=True):
        assert (mine.token, mine.bytes) == (theirs.token, theirs.bytes)
        assert mine.logprob == pytest.approx(theirs.logprob, abs=1e-4)
        assert [t.token for t in mine.top_logprobs] == [t.token for t in theirs.top_logprobs]
        assert len(mine.top_logprobs) == 3 and mine.top_logprobs[0].logprob >= mine.top_logprobs[-1].logprob
    assert "".join(item.token for item in streamed) == whole.choices[0].message.content


def test_tool_choice_required_returns_a_parsable_call(api: openai.OpenAI, model_id: str) -> None:
    reply = api.chat.completions.create(
        model=model_id, messages=HELLO, tools=WEATHER + TIME, tool_choice="required", max_tokens=60, temperature=0
    )
    calls = reply.choices[0].message.tool_calls
    assert reply.choices[0].finish_reason == "tool_calls" and calls
    call = calls[0]
    assert call.type == "function" and call.id
    arguments = json.loads(call.function.arguments)  # type: ignore[union-attr]
    if call.function.name == "get_weather":  # type: ignore[union-attr]
        assert arguments["unit"] in ("celsius", "fahrenheit")
    else:
        assert call.function.name == "get_time" and isinstance(arguments["utc"], bool)  # type: ignore[union-attr]


def test_named_tool_choice_streams_tool_call_deltas(api: openai.OpenAI, model_id: str) -> None:
    stream = api.chat.completions.create(
        model=model_id,
        messages=HELLO,
        tools=WEATHER + TIME,
        max_tokens=60,
        temperature=0,
        stream=True,
        tool_choice={"type": "function", "function": {"name": "get_time"}},
    )
    chunks = list(stream)
    deltas = [d for c in chunks if c.choices for d in c.choices[0].delta.tool_calls or []]
    assert deltas and deltas[0].index == 0 and deltas[0].id and deltas[0].function is not None
    assert deltas[0].function.name == "get_time"
    arguments = json.loads("".join(d.function.arguments or "" for d in deltas if d.function))
    assert isinstance(arguments["utc"], bool)
    assert [c.choices[0].finish_reason for c in chunks if c.choices][-1] == "tool_calls"


def test_tool_history_round_trip(api: openai.OpenAI, model_id: str) -> None:
    history: Any = [
        *HELLO,
        {
            "role": "assistant",
            "content": None,
            "tool_calls": [
                {
                    "id": "call_1",
                    "type": "function",
                    "function": {"name": "get_weather", "arguments": '{"unit": "celsius"}'},
                }
            ],
        },
        {"role": "tool", "tool_call_id": "call_1", "content": "21 degrees and sunny"},
    ]
    reply = api.chat.completions.create(model=model_id, messages=history, tools=WEATHER, max_tokens=4)
    assert reply.choices[0].finish_reason in ("stop", "length", "tool_calls")


def test_json_schema_response_is_valid(api: openai.OpenAI, model_id: str) -> None:
    schema = {
        "type": "object",
        "properties": {"answer": {"type": "integer"}, "sure": {"type": "boolean"}},
        "required": ["answer", "sure"],
        "additionalProperties": False,
    }
    reply = api.chat.completions.create(
        model=model_id,
        messages=HELLO,
        max_tokens=80,
        temperature=0,
        response_format={"type": "json_schema", "json_schema": {"name": "result", "schema": schema, "strict": True}},
    )
    value = json.loads(reply.choices[0].message.content or "")
    assert set(value) == {"answer", "sure"} and isinstance(value["answer"], int) and isinstance(value["sure"], bool)


def test_json_object_response_is_an_object(api: openai.OpenAI, model_id: str) -> None:
    reply = api.chat.completions.create(
        model=model_id, messages=HELLO, max_tokens=40, temperature=0, response_format={"type": "json_object"}
    )
    if reply.choices[0].finish_reason == "stop":
        assert isinstance(json.loads(reply.choices[0].message.content or ""), dict)
    else:  # cut by max_tokens: still the start of an object
        assert (reply.choices[0].message.content or "").lstrip().startswith("{")


def test_text_completions(api: openai.OpenAI, model_id: str) -> None:
    reply = api.completions.create(model=model_id, prompt="The quick brown fox", max_tokens=5, temperature=0)
    assert reply.object == "text_completion" and isinstance(reply.choices[0].text, str)
    assert reply.usage is not None and reply.usage.completion_tokens <= 5
    pieces = [
        c.choices[0].text
        for c in api.completions.create(
            model=model_id, prompt="The quick brown fox", max_tokens=5, temperature=0, stream=True
        )
        if c.choices
    ]
    assert "".join(pieces) == reply.choices[0].text


def test_embeddings_on_a_chat_model_is_a_clear_400(api: openai.OpenAI, root_url: str, model_id: str) -> None:
    card = httpx.get(f"{root_url}/v1/models").json()["data"][0]
    if card.get("can_embed"):
        vectors = api.embeddings.create(model=model_id, input=["a", "b"]).data
        assert len(vectors) == 2 and len(vectors[0].embedding) > 0
        return
    with pytest.raises(openai.BadRequestError) as caught:
        api.embeddings.create(model=model_id, input="hello")
    assert "embedding" in caught.value.message
