"""Thinking models: `<think>` text goes to reasoning fields, the answer (and its tool calls) stays clean."""

from __future__ import annotations

import json
from typing import Any

import anthropic
import openai

from launcher.server.core.reasoning import ThinkSplitter
from tests.server.conftest import ServeFn
from tests.server.fake_model import CHATML, FakeModel, fake_info

# Like Qwen3's template: it knows about <think> (here it only mentions it, for the splitter to turn on).
THINKING_TEMPLATE = "{#- the model reasons in <think></think> before answering -#}" + CHATML
REPLY = "<think>\nThe user greets me.\n</think>\n\nHello!"


def split_all(splitter: ThinkSplitter, text: str) -> list[tuple[str, str]]:
    pieces = []
    for char in text:
        pieces.extend(splitter.feed(char))
    pieces.extend(splitter.finish())
    merged: list[tuple[str, str]] = []
    for kind, piece in pieces:
        if merged and merged[-1][0] == kind:
            merged[-1] = (kind, merged[-1][1] + piece)
        else:
            merged.append((kind, piece))
    return merged


def test_splitter_streams_thinking_then_answer() -> None:
    assert split_all(ThinkSplitter(), REPLY) == [("reasoning", "The user greets me.\n"), ("content", "Hello!")]
    assert split_all(ThinkSplitter(), "No thinking here.") == [("content", "No thinking here.")]
    assert split_all(ThinkSplitter(starts_inside=True), "hmm</think>Hi") == [("reasoning", "hmm"), ("content", "Hi")]
    assert split_all(ThinkSplitter(), "<thin") == [("content", "<thin")]


def thinking_model(reply: str) -> FakeModel:
    return FakeModel(reply=lambda prompt: reply, info=fake_info(chat_template=THINKING_TEMPLATE))


def test_openai_gets_reasoning_content(serve: ServeFn) -> None:
    with serve(thinking_model(REPLY)) as url:
        api = openai.OpenAI(base_url=f"{url}/v1", api_key="x", max_retries=0)
        reply = api.chat.completions.create(model="x", messages=[{"role": "user", "content": "Hi"}])
        message: Any = reply.choices[0].message
        assert message.content == "Hello!" and message.reasoning_content == "The user greets me.\n"
        chunks = list(api.chat.completions.create(model="x", messages=[{"role": "user", "content": "Hi"}], stream=True))
        deltas: list[Any] = [c.choices[0].delta for c in chunks if c.choices]
        assert "".join(getattr(d, "reasoning_content", None) or "" for d in deltas) == "The user greets me.\n"
        assert "".join(d.content or "" for d in deltas) == "Hello!"


def test_anthropic_gets_thinking_blocks(serve: ServeFn) -> None:
    with serve(thinking_model(REPLY)) as url:
        claude = anthropic.Anthropic(base_url=url, api_key="x", max_retries=0)
        message = claude.messages.create(model="x", max_tokens=100, messages=[{"role": "user", "content": "Hi"}])
        assert [block.type for block in message.content] == ["thinking", "text"]
        with claude.messages.stream(model="x", max_tokens=100, messages=[{"role": "user", "content": "Hi"}]) as stream:
            final = stream.get_final_message()
        assert [b.model_dump() for b in final.content] == [b.model_dump() for b in message.content]


def test_tool_calls_are_read_from_the_answer_only(serve: ServeFn) -> None:
    reply = '<think>maybe <tool_call>{"name": "x", "arguments": {}}</tool_call>?</think>' + (
        '<tool_call>{"name": "get_weather", "arguments": {"city": "Oslo"}}</tool_call>'
    )
    tools: Any = [{"type": "function", "function": {"name": "get_weather", "parameters": {"type": "object"}}}]
    with serve(thinking_model(reply)) as url:
        api = openai.OpenAI(base_url=f"{url}/v1", api_key="x", max_retries=0)
        result = api.chat.completions.create(model="x", messages=[{"role": "user", "content": "Hi"}], tools=tools)
        calls = result.choices[0].message.tool_calls or []
        assert [(c.function.name, json.loads(c.function.arguments)) for c in calls] == [  # type: ignore[union-attr]
            ("get_weather", {"city": "Oslo"})
        ]
