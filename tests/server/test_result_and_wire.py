"""The one finished-reply path (result.py) and the response models' JSON (null where a client
reads null, absent where a key does not apply)."""

from __future__ import annotations

import json

import pytest

from launcher.engines.base import TokenLogprob
from launcher.server.anthropic_api.schemas_anthropic import AnthropicUsage, MessagesRequest
from launcher.server.core.chat import ReasoningDelta, TextDelta, ToolCallDelta
from launcher.server.core.generation import Chunk, Finish, Usage
from launcher.server.core.result import gather
from launcher.server.core.toolcalls import ParsedToolCall
from launcher.server.openai_api.schemas_openai import (
    AssistantMessage,
    ChatCompletionChunk,
    ChatCompletionRequest,
    ChatDelta,
    ChunkChoice,
    Completion,
    CompletionChoice,
    UsageInfo,
)
from launcher.server.responses_api.schemas_responses import ResponsesRequest
from launcher.server.sse import data_event

USAGE = Usage(prompt_tokens=10, completion_tokens=4, cached_tokens=6)
CALL = ParsedToolCall(id="call_1", name="get_weather", arguments='{"city": "Paris"}')


def test_the_result_keeps_text_reasoning_calls_logprobs_and_the_finish() -> None:
    logprob = TokenLogprob(token_id=1, text="Hi", logprob=-0.5)
    result = gather(
        [
            ReasoningDelta("plan "),
            ReasoningDelta("it"),
            TextDelta("\n\n"),  # between blocks: part of the text, but no block of its own
            TextDelta("Hi", (logprob,)),
            TextDelta(" there"),
            ToolCallDelta(0, CALL),
            TextDelta(" "),
            Finish("tool_calls", USAGE, stop_sequence=None),
        ]
    )
    assert result.text == "\n\nHi there " and result.reasoning == "plan it"
    assert result.tool_calls == [CALL] and result.logprobs == [logprob]
    assert result.finish.reason == "tool_calls" and result.finish.usage.cached_tokens == 6
    assert result.parts == [ReasoningDelta("plan it"), TextDelta("Hi there"), ToolCallDelta(0, CALL)]


def test_raw_completion_chunks_are_answer_text() -> None:
    result = gather([Chunk("a"), Chunk("b"), Finish("length", USAGE)])
    assert result.text == "ab" and result.finish.reason == "length"


def test_a_reply_without_its_finish_is_not_a_result() -> None:
    with pytest.raises(RuntimeError):
        gather([TextDelta("a")])


def test_openai_keys_that_clients_read_as_null_are_sent_as_null() -> None:
    message = AssistantMessage(content=None, tool_calls=[])
    assert message.wire() == {"role": "assistant", "content": None, "tool_calls": []}
    assert AssistantMessage(content="x").wire() == {"role": "assistant", "content": "x"}
    chunk = ChatCompletionChunk(id="c", created=0, model="m", choices=[ChunkChoice(delta=ChatDelta(content=""))])
    assert chunk.wire_chunk(include_usage=True) == {
        "id": "c",
        "object": "chat.completion.chunk",
        "created": 0,
        "model": "m",
        "system_fingerprint": None,
        "choices": [{"index": 0, "delta": {"content": ""}, "logprobs": None, "finish_reason": None}],
        "usage": None,
    }
    assert "usage" not in chunk.wire_chunk(include_usage=False)


def test_usage_shapes_count_cached_tokens_per_api() -> None:
    assert UsageInfo.of(USAGE).wire()["prompt_tokens_details"] == {"cached_tokens": 6}
    assert AnthropicUsage.of(USAGE).wire() == {
        "input_tokens": 4,
        "cache_read_input_tokens": 6,
        "cache_creation_input_tokens": 0,
        "output_tokens": 4,
    }
    assert AnthropicUsage(input_tokens=10, output_tokens=0).wire() == {"input_tokens": 10, "output_tokens": 0}


def test_stream_events_are_compact_json() -> None:
    completion = Completion(id="c", created=0, model="m", choices=[CompletionChoice(text="é")])
    event = data_event(completion)
    assert event.startswith(b"data: {") and event.endswith(b"}\n\n") and b" " not in event[6:]
    assert "usage" not in json.loads(event[6:])


def test_each_api_reads_only_the_sampling_knobs_it_declares() -> None:
    chat = ChatCompletionRequest.model_validate({"messages": [{"role": "user", "content": "x"}], "min_p": 0.2})
    assert chat.sampling().min_p == 0.2
    messages = {"messages": [{"role": "user", "content": "x"}], "max_tokens": 5}
    anthropic = MessagesRequest.model_validate({**messages, "min_p": 0.2, "top_k": 7})
    assert anthropic.sampling().min_p == 0.0 and anthropic.sampling().top_k == 7  # min_p is no Messages field
    responses = ResponsesRequest.model_validate({"input": "x", "top_k": 7, "temperature": 0.1})
    assert responses.sampling().top_k == 0 and responses.sampling().temperature == 0.1
