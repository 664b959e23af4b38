"""OpenAI Responses API (Codex CLI): text, function tools, streaming event sequence."""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import openai
import pytest

TOOLS: Any = [
    {
        "type": "function",
        "name": "get_weather",
        "description": "Current weather",
        "parameters": {
            "type": "object",
            "properties": {"unit": {"type": "string", "enum": ["celsius", "fahrenheit"]}},
            "required": ["unit"],
        },
    }
]


@pytest.fixture
def api(base_url: str) -> Iterator[openai.OpenAI]:
    with openai.OpenAI(base_url=base_url, api_key="unused", max_retries=0) as client:
        yield client


def test_text_response(api: openai.OpenAI, model_id: str) -> None:
    response = api.responses.create(model=model_id, input="Hello there", instructions="Be brief.", max_output_tokens=8)
    assert response.object == "response" and response.status in ("completed", "incomplete")
    assert response.output[0].type == "message"
    assert isinstance(response.output_text, str)
    assert response.usage is not None and 0 < response.usage.output_tokens <= 8


def test_stream_event_sequence(api: openai.OpenAI, model_id: str) -> None:
    events = list(api.responses.create(model=model_id, input="Hello there", max_output_tokens=8, stream=True))
    kinds = [e.type for e in events]
    assert kinds[:2] == ["response.created", "response.in_progress"]
    assert kinds[-1] in ("response.completed", "response.incomplete")
    assert [e.sequence_number for e in events] == list(range(len(events)))
    if "response.output_text.delta" in kinds:
        first = kinds.index("response.output_text.delta")
        assert kinds[first - 2 : first] == ["response.output_item.added", "response.content_part.added"]
        tail = [k for k in kinds[first:] if k != "response.output_text.delta"]
        assert tail[:3] == ["response.output_text.done", "response.content_part.done", "response.output_item.done"]
        text = "".join(e.delta for e in events if e.type == "response.output_text.delta")
        assert events[-1].response.output_text == text  # type: ignore[union-attr]


def test_required_function_call_then_its_output(api: openai.OpenAI, model_id: str) -> None:
    response = api.responses.create(
        model=model_id,
        input="What's the weather?",
        tools=TOOLS,
        tool_choice="required",
        max_output_tokens=60,
        temperature=0,
    )
    calls = [item for item in response.output if item.type == "function_call"]
    assert calls and calls[0].name == "get_weather"
    assert json.loads(calls[0].arguments)["unit"] in ("celsius", "fahrenheit")
    follow_up = api.responses.create(
        model=model_id,
        tools=TOOLS,
        max_output_tokens=4,
        input=[
            {"role": "user", "content": "What's the weather?"},
            {
                "type": "function_call",
                "call_id": calls[0].call_id,
                "name": "get_weather",
                "arguments": calls[0].arguments,
            },
            {"type": "function_call_output", "call_id": calls[0].call_id, "output": "21 degrees"},
        ],
    )
    assert follow_up.status in ("completed", "incomplete")


def test_streamed_function_call_events(api: openai.OpenAI, model_id: str) -> None:
    events = list(
        api.responses.create(
            model=model_id,
            input="Weather?",
            tools=TOOLS,
            stream=True,
            temperature=0,
            tool_choice={"type": "function", "name": "get_weather"},
            max_output_tokens=60,
        )
    )
    kinds = [e.type for e in events]
    assert "response.function_call_arguments.delta" in kinds
    done = next(e for e in events if e.type == "response.function_call_arguments.done")
    assert json.loads(done.arguments)["unit"] in ("celsius", "fahrenheit")
    final = events[-1].response  # type: ignore[union-attr]
    assert [item.type for item in final.output] == ["function_call"]


def test_bad_request_is_400(api: openai.OpenAI, model_id: str) -> None:
    with pytest.raises(openai.BadRequestError):
        api.responses.create(model=model_id, input=[{"type": "function_call_output", "call_id": "x", "output": "y"}])
