"""gpt-oss (harmony) replies: the analysis channel goes to reasoning fields, the final channel is the answer,
commentary tool calls are still parsed, and no control token reaches the client."""

from __future__ import annotations

import json
import random
from dataclasses import dataclass
from typing import Any

import anthropic
import openai
import pytest

from launcher.server.core.harmony import HarmonySplitter
from launcher.server.core.toolcalls import (
    ParsedToolCall,
    StreamingToolParser,
    TextPiece,
    lazy_tool_constraint,
    parse_tool_calls,
)
from tests.server.conftest import ServeFn
from tests.server.fake_model import FakeModel, fake_info
from tests.server.test_tool_families import grammar_start

# Enough of gpt-oss's template for the server to know it: channels, functions addressed with to=, tools.
HARMONY_TEMPLATE = (
    "{#- gpt-oss: <|channel|>analysis/final; tools are called as <|channel|>commentary to=functions.NAME -#}"
    "{% for m in messages %}<|start|>{{ m.role }}<|message|>{{ m.content }}<|end|>{% endfor %}"
    "{% if add_generation_prompt %}<|start|>assistant{% endif %}"
)
REPLY = (
    "<|channel|>analysis<|message|>The user greets me.<|end|>"
    "<|start|>assistant<|channel|>final<|message|>Hello!<|return|>"
)
TOOL_REPLY = (
    "<|channel|>analysis<|message|>Need the weather.<|end|>"
    '<|start|>assistant<|channel|>commentary to=functions.get_weather <|constrain|>json<|message|>{"city": "Oslo"}'
    "<|call|>"
)
TOOLS: Any = [{"type": "function", "function": {"name": "get_weather", "parameters": {"type": "object"}}}]


def merged(pieces: list[tuple[str, str]]) -> list[tuple[str, str]]:
    out: list[tuple[str, str]] = []
    for kind, text in pieces:
        if out and out[-1][0] == kind:
            out[-1] = (kind, out[-1][1] + text)
        elif text:
            out.append((kind, text))
    return out


def split_in(parts: list[str]) -> list[tuple[str, str]]:
    splitter = HarmonySplitter()
    pieces: list[tuple[str, str]] = []
    for part in parts:
        pieces.extend(splitter.feed(part))
    pieces.extend(splitter.finish())
    return merged(list(pieces))


def every_split(text: str) -> list[list[str]]:
    """The whole text, one character at a time, every two-part split and random splits."""
    rng = random.Random(7)
    splits = [[text], list(text)] + [[text[:i], text[i:]] for i in range(1, len(text))]
    for _ in range(50):
        cuts = sorted(rng.sample(range(1, len(text)), rng.randint(1, 8)))
        splits.append([text[a:b] for a, b in zip([0, *cuts], [*cuts, len(text)], strict=True)])
    return splits


def assert_same_for_every_split(text: str, expected: list[tuple[str, str]]) -> None:
    for parts in every_split(text):
        assert split_in(parts) == expected, parts


def test_analysis_then_final() -> None:
    assert_same_for_every_split(REPLY, [("reasoning", "The user greets me."), ("content", "Hello!")])


def test_final_only_and_final_without_return() -> None:
    assert_same_for_every_split("<|channel|>final<|message|>Just this.<|return|>", [("content", "Just this.")])
    assert_same_for_every_split("<|channel|>final<|message|>Cut short", [("content", "Cut short")])


def test_analysis_then_tool_call_reaches_the_tool_parser() -> None:
    expected_call = '<|channel|>commentary to=functions.get_weather<|message|>{"city": "Oslo"}<|call|>'
    assert_same_for_every_split(TOOL_REPLY, [("reasoning", "Need the weather."), ("content", expected_call)])
    content, calls = parse_tool_calls("harmony", expected_call)
    assert content == "" and [(c.name, json.loads(c.arguments)) for c in calls] == [("get_weather", {"city": "Oslo"})]


@pytest.mark.parametrize(
    "reply",
    [
        # the recipient in the role part of the header, channel after it
        '<|start|>assistant to=functions.get_weather<|channel|>commentary json<|message|>{"city": "Oslo"}<|call|>',
        # the engine stopped on <|call|> and did not write it
        '<|channel|>commentary to=functions.get_weather <|constrain|>json<|message|>{"city": "Oslo"}',
    ],
)
def test_other_tool_call_shapes_parse_the_same(reply: str) -> None:
    for parts in every_split(reply):
        [(kind, text)] = split_in(parts)
        content, calls = parse_tool_calls("harmony", text)
        assert kind == "content" and content == ""
        assert [(c.name, json.loads(c.arguments)) for c in calls] == [("get_weather", {"city": "Oslo"})]


OSLO = [("get_weather", {"city": "Oslo"})]


def structured(calls: list[ParsedToolCall]) -> list[tuple[str, Any]]:
    return [(call.name, json.loads(call.arguments)) for call in calls]


# A call in each header order, as the model writes it (the reply's first header has no `<|start|>assistant`:
# the prompt ends with it), and a call in the form server/core/harmony.py passes on
CALLS_IN_BOTH_ORDERS = [
    '<|channel|>commentary to=functions.get_weather <|constrain|>json<|message|>{"city": "Oslo"}<|call|>',
    '<|channel|>commentary to=functions.get_weather<|message|>{"city": "Oslo"}<|call|>',
    ' to=functions.get_weather<|channel|>commentary json<|message|>{"city": "Oslo"}<|call|>',
    "<|channel|>analysis<|message|>Hmm.<|end|>"
    '<|start|>assistant to=functions.get_weather<|channel|>commentary <|constrain|>json<|message|>{"city": "Oslo"}',
]


@pytest.mark.parametrize("reply", CALLS_IN_BOTH_ORDERS)
def test_the_tool_parser_reads_a_call_in_either_header_order(reply: str) -> None:
    call = reply[reply.index("<|start|>") :] if "<|end|>" in reply else reply  # without the analysis
    for parts in (list(call), [call]):  # streamed a character at a time, and whole
        parser = StreamingToolParser("harmony", TOOLS)
        events = [event for part in parts for event in parser.feed(part)] + parser.finish()
        assert "".join(e.text for e in events if isinstance(e, TextPiece)) == ""
        assert structured([e for e in events if isinstance(e, ParsedToolCall)]) == OSLO
        assert parser.left_as_text == 0


@pytest.mark.parametrize("reply", CALLS_IN_BOTH_ORDERS)
def test_a_call_in_either_header_order_reaches_the_tool_parser_through_the_splitter(reply: str) -> None:
    for parts in every_split(reply)[:40]:
        pieces = split_in(parts)
        assert "".join(text for kind, text in pieces if kind == "reasoning") in ("", "Hmm.")
        content, calls = parse_tool_calls("harmony", "".join(t for kind, t in pieces if kind == "content"), TOOLS)
        assert content == "" and structured(calls) == OSLO


@pytest.mark.parametrize(
    "reply",
    [
        "<|channel|>commentary to=functions.get_weather and then I explain what the tool would do for you",
        "I sent it to=functions.get_weather, as the docs say, and more words follow here",
    ],
)
def test_a_call_header_that_turns_into_prose_is_released_as_text(reply: str) -> None:
    content, calls = parse_tool_calls("harmony", reply, TOOLS)
    assert calls == [] and content == reply


def test_preamble_is_content_and_plain_text_passes_through() -> None:
    preamble = "<|channel|>commentary<|message|>Let me check.<|end|><|start|>assistant<|channel|>final<|message|>Done."
    assert_same_for_every_split(preamble, [("content", "Let me check.Done.")])
    assert_same_for_every_split("No channels here, a < b.", [("content", "No channels here, a < b.")])


def test_a_body_cut_short_by_a_new_header_still_splits() -> None:
    # a model that skips <|end|> before its next header must not leak that header into the thought
    skipped_end = "<|channel|>analysis<|message|>Hmm.<|start|>assistant<|channel|>final<|message|>Hi."
    assert_same_for_every_split(skipped_end, [("reasoning", "Hmm."), ("content", "Hi.")])


def test_a_header_cut_off_by_max_tokens_leaves_nothing() -> None:
    assert split_in(["<|channel|>analysis<|message|>Thinking", "<|end|><|start|>assistant<|chan"]) == [
        ("reasoning", "Thinking")
    ]


def harmony_model(reply: str) -> FakeModel:
    return FakeModel(reply=lambda prompt: reply, info=fake_info(chat_template=HARMONY_TEMPLATE))


def test_openai_gets_reasoning_content(serve: ServeFn) -> None:
    with serve(harmony_model(REPLY)) as url, openai.OpenAI(base_url=f"{url}/v1", api_key="x", max_retries=0) as api:
        reply = api.chat.completions.create(model="x", messages=[{"role": "user", "content": "Hi"}])
        message: Any = reply.choices[0].message
        assert message.content == "Hello!" and message.reasoning_content == "The user greets me."
        with api.chat.completions.create(
            model="x", messages=[{"role": "user", "content": "Hi"}], stream=True
        ) as stream:
            deltas: list[Any] = [c.choices[0].delta for c in stream if c.choices]
        assert "".join(getattr(d, "reasoning_content", None) or "" for d in deltas) == "The user greets me."
        assert "".join(d.content or "" for d in deltas) == "Hello!"
        responses = api.responses.create(model="x", input="Hi")
        assert responses.output_text == "Hello!"


def test_anthropic_gets_thinking_blocks(serve: ServeFn) -> None:
    with serve(harmony_model(REPLY)) as url, anthropic.Anthropic(base_url=url, api_key="x", max_retries=0) as claude:
        message = claude.messages.create(model="x", max_tokens=200, messages=[{"role": "user", "content": "Hi"}])
        assert [(b.type, getattr(b, "thinking", None) or getattr(b, "text", None)) for b in message.content] == [
            ("thinking", "The user greets me."),
            ("text", "Hello!"),
        ]
        with claude.messages.stream(model="x", max_tokens=200, messages=[{"role": "user", "content": "Hi"}]) as stream:
            final = stream.get_final_message()
        assert [b.model_dump() for b in final.content] == [b.model_dump() for b in message.content]


def test_tool_call_after_analysis(serve: ServeFn) -> None:
    with (
        serve(harmony_model(TOOL_REPLY)) as url,
        openai.OpenAI(base_url=f"{url}/v1", api_key="x", max_retries=0) as api,
    ):
        result = api.chat.completions.create(model="x", messages=[{"role": "user", "content": "Hi"}], tools=TOOLS)
        message: Any = result.choices[0].message
        calls = message.tool_calls or []
        assert [(c.function.name, json.loads(c.function.arguments)) for c in calls] == [
            ("get_weather", {"city": "Oslo"})
        ]
        assert result.choices[0].finish_reason == "tool_calls"
        assert not message.content and message.reasoning_content == "Need the weather."
        with api.chat.completions.create(
            model="x", messages=[{"role": "user", "content": "Hi"}], tools=TOOLS, stream=True
        ) as stream:
            deltas: list[Any] = [c.choices[0].delta for c in stream if c.choices]
        assert "".join(d.content or "" for d in deltas) == ""
        assert "".join(getattr(d, "reasoning_content", None) or "" for d in deltas) == "Need the weather."
        names: dict[int, str] = {}
        arguments: dict[int, str] = {}
        for call in (t for d in deltas for t in d.tool_calls or []):  # the name first, then argument pieces
            names[call.index] = names.get(call.index, "") + (call.function.name or "")
            arguments[call.index] = arguments.get(call.index, "") + (call.function.arguments or "")
        assert [(names[i], json.loads(arguments[i])) for i in sorted(names)] == [("get_weather", {"city": "Oslo"})]


# thoughts that name the call's header: only a header that opens a message is a call
THOUGHT = "The user wants Oslo's weather, so I write to=functions.get_weather <|constrain|>json"
ANALYSIS = f"<|channel|>analysis<|message|>{THOUGHT}<|end|>"
WEATHER_TOOLS: Any = [
    {
        "type": "function",
        "function": {
            "name": "get_weather",
            "parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]},
        },
    },
    {"type": "function", "function": {"name": "get_time", "parameters": {"type": "object", "properties": {}}}},
]


@pytest.mark.parametrize("after_analysis", [False, True])
def test_the_lazy_grammar_writes_calls_in_both_header_orders_that_reach_the_client(after_analysis: bool) -> None:
    """Each call the grammar can write, from where its trigger starts it: the trigger fires at the call's
    header and not at the one the analysis mentions, and the splitter and the tool parser read the call."""
    constraint = lazy_tool_constraint("harmony", WEATHER_TOOLS, parallel=True, thinking="no")
    assert constraint.kind == "tool_calls" and not constraint.repeat
    shapes = [shape for shape in constraint.calls if "get_weather" in shape.prefix_text]
    assert len(shapes) == 2  # the channel first and the recipient first
    for shape in shapes:
        before = ANALYSIS + "<|start|>assistant" if after_analysis else ""
        for end in ("<|call|>", ""):  # the engine writes the end-of-generation token, or stops on it
            reply = before + shape.prefix_text + '{"city": "Oslo"}' + end
            assert grammar_start(constraint, reply) == len(before), reply
            pieces = split_in([reply])
            reasoning = "".join(text for kind, text in pieces if kind == "reasoning")
            assert reasoning == (THOUGHT if after_analysis else "")
            content, calls = parse_tool_calls("harmony", "".join(t for k, t in pieces if k == "content"), WEATHER_TOOLS)
            assert content == "" and structured(calls) == OSLO


@dataclass
class LazyGrammarModel(FakeModel):
    """A scripted model on an engine that runs lazy grammars (it writes its script whatever the grammar)."""

    lazy_constraints: bool = True


def test_a_chat_with_tools_runs_under_the_harmony_call_grammar_and_gets_the_call(serve: ServeFn) -> None:
    call = '<|start|>assistant to=functions.get_weather<|channel|>commentary json<|message|>{"city": "Oslo"}'
    reply = ANALYSIS + call
    model = LazyGrammarModel(reply=lambda prompt: reply, info=fake_info(chat_template=HARMONY_TEMPLATE))
    with serve(model) as url, openai.OpenAI(base_url=f"{url}/v1", api_key="x", max_retries=0) as api:
        result = api.chat.completions.create(
            model="x", messages=[{"role": "user", "content": "Weather in Oslo?"}], tools=WEATHER_TOOLS
        )
    message: Any = result.choices[0].message
    assert [(c.function.name, json.loads(c.function.arguments)) for c in message.tool_calls or []] == [
        ("get_weather", {"city": "Oslo"})
    ]
    assert result.choices[0].finish_reason == "tool_calls" and not message.content
    assert message.reasoning_content == THOUGHT
    constraint = model.requests[0].constraint
    assert constraint is not None and constraint.kind == "tool_calls" and constraint.triggers
    # the grammar takes over at the call's recipient, not at the one the analysis names
    assert grammar_start(constraint, reply) == len(ANALYSIS) + len("<|start|>assistant")
