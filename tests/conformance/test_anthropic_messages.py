"""Anthropic Messages (Claude Code): replies, streaming event order, tools, count_tokens, errors."""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import anthropic
import httpx
import pytest

TOOLS: Any = [
    {
        "name": "get_weather",
        "description": "Current weather",
        "input_schema": {
            "type": "object",
            "properties": {"unit": {"type": "string", "enum": ["celsius", "fahrenheit"]}},
            "required": ["unit"],
        },
    }
]
HELLO: Any = [{"role": "user", "content": "Hello there, how are you today?"}]


@pytest.fixture
def claude(server: Any) -> Iterator[anthropic.Anthropic]:
    with anthropic.Anthropic(base_url=server.url, api_key="unused", max_retries=0) as client:
        yield client


def test_message_with_system_and_multi_part_content(claude: anthropic.Anthropic, model_id: str) -> None:
    message = claude.messages.create(
        model=model_id,
        max_tokens=8,
        system=[{"type": "text", "text": "You are brief."}],
        messages=[{"role": "user", "content": [{"type": "text", "text": "Hello"}, {"type": "text", "text": " there"}]}],
    )
    assert message.type == "message" and message.role == "assistant"
    assert message.stop_reason in ("end_turn", "max_tokens")
    assert message.usage.input_tokens > 0 and 0 < message.usage.output_tokens <= 8
    assert all(block.type == "text" for block in message.content)


def test_stream_event_order(claude: anthropic.Anthropic, model_id: str) -> None:
    events = list(claude.messages.create(model=model_id, max_tokens=10, messages=HELLO, stream=True))
    kinds = [e.type for e in events if str(e.type) != "ping"]
    assert kinds[0] == "message_start" and kinds[-2:] == ["message_delta", "message_stop"]
    body = kinds[1:-2]
    if body:
        assert body[0] == "content_block_start" and body[-1] == "content_block_stop"
        assert set(body[1:-1]) <= {"content_block_delta"}
    delta = events[-2]
    assert delta.type == "message_delta" and delta.delta.stop_reason in ("end_turn", "max_tokens")
    assert 0 < delta.usage.output_tokens <= 10


def test_stream_helper_accumulates_the_same_message(claude: anthropic.Anthropic, model_id: str) -> None:
    with claude.messages.stream(model=model_id, max_tokens=10, messages=HELLO, extra_body={"temperature": 0}) as stream:
        final = stream.get_final_message()
    whole = claude.messages.create(model=model_id, max_tokens=10, messages=HELLO, extra_body={"temperature": 0})
    assert [b.model_dump() for b in final.content] == [b.model_dump() for b in whole.content]


def test_tool_choice_any_gives_tool_use_and_the_result_round_trips(claude: anthropic.Anthropic, model_id: str) -> None:
    message = claude.messages.create(
        model=model_id,
        max_tokens=60,
        messages=HELLO,
        tools=TOOLS,
        tool_choice={"type": "any"},
        extra_body={"temperature": 0},
    )
    uses = [b for b in message.content if b.type == "tool_use"]
    assert message.stop_reason == "tool_use" and uses
    assert uses[0].name == "get_weather" and uses[0].input["unit"] in ("celsius", "fahrenheit")  # type: ignore[index]
    history: Any = [
        *HELLO,
        {"role": "assistant", "content": [b.model_dump() for b in message.content]},
        {"role": "user", "content": [{"type": "tool_result", "tool_use_id": uses[0].id, "content": "21 degrees"}]},
    ]
    follow_up = claude.messages.create(
        model=model_id,
        max_tokens=4,
        tools=TOOLS,
        messages=history,
    )
    assert follow_up.stop_reason in ("end_turn", "max_tokens", "tool_use")


def test_streamed_tool_use_has_input_json_deltas(claude: anthropic.Anthropic, model_id: str) -> None:
    events = list(
        claude.messages.create(
            model=model_id,
            max_tokens=60,
            messages=HELLO,
            tools=TOOLS,
            stream=True,
            tool_choice={"type": "tool", "name": "get_weather"},
            extra_body={"temperature": 0},
        )
    )
    starts = [e for e in events if e.type == "content_block_start" and e.content_block.type == "tool_use"]
    assert starts and starts[0].content_block.name == "get_weather"  # type: ignore[union-attr]
    partial = "".join(
        e.delta.partial_json
        for e in events  # type: ignore[union-attr]
        if e.type == "content_block_delta" and e.delta.type == "input_json_delta"
    )
    assert json.loads(partial)["unit"] in ("celsius", "fahrenheit")


def test_stop_sequences_are_honoured(claude: anthropic.Anthropic, model_id: str) -> None:
    whole = claude.messages.create(model=model_id, max_tokens=12, messages=HELLO, extra_body={"temperature": 0})
    text = "".join(b.text for b in whole.content if b.type == "text")
    if len(text.strip()) < 4:
        pytest.skip("reply too short to pick a stop sequence from")
    stop = text.strip()[2:4]
    cut = claude.messages.create(
        model=model_id, max_tokens=12, messages=HELLO, stop_sequences=[stop], extra_body={"temperature": 0}
    )
    assert cut.stop_reason == "stop_sequence" and cut.stop_sequence == stop
    assert stop not in "".join(b.text for b in cut.content if b.type == "text")


def test_count_tokens(claude: anthropic.Anthropic, model_id: str) -> None:
    short = claude.messages.count_tokens(model=model_id, messages=HELLO)
    longer = claude.messages.count_tokens(model=model_id, messages=HELLO, system="A much longer system prompt here.")
    assert 0 < short.input_tokens < longer.input_tokens


def test_errors_have_anthropic_shape(server: Any, claude: anthropic.Anthropic, model_id: str) -> None:
    response = httpx.post(f"{server.url}/v1/messages", json={"model": model_id, "messages": HELLO})
    assert response.status_code == 400
    body = response.json()
    assert body["type"] == "error" and body["error"]["type"] == "invalid_request_error" and body["error"]["message"]
    with pytest.raises(anthropic.BadRequestError):
        claude.messages.create(
            model=model_id,
            max_tokens=5,
            messages=[{"role": "user", "content": [{"type": "tool_result", "tool_use_id": "nope", "content": "x"}]}],
        )


def test_a_repeated_prefix_is_reported_as_cache_reads(claude: anthropic.Anthropic, model_id: str) -> None:
    """Claude Code sizes its context as input + cache reads: cached tokens must not count twice."""
    system = "You are a careful assistant. " * 40  # a long shared prefix, like an agent's system prompt
    sizes = []
    for question in ("Hello there, how are you today?", "What is the weather like in Paris?"):
        with claude.messages.stream(
            model=model_id, max_tokens=4, system=system, messages=[{"role": "user", "content": question}]
        ) as stream:
            usage = stream.get_final_message().usage
        counted = claude.messages.count_tokens(
            model=model_id, system=system, messages=[{"role": "user", "content": question}]
        )
        sizes.append((usage.input_tokens, usage.cache_read_input_tokens or 0, counted.input_tokens))
    (first_input, first_cached, first_total), (second_input, second_cached, second_total) = sizes
    assert first_input + first_cached == first_total and second_input + second_cached == second_total
    assert second_cached >= first_total // 2 and second_input < second_total // 2
