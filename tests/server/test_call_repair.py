"""Tool-call JSON with a certain fix is repaired; JSON that would need a guess is left alone.

Through the reply parser, whole and streamed: a repaired call reaches the client as a call (counted as
repaired), one that needs a guess as the text the model wrote (counted as left as text)."""

from __future__ import annotations

import json
import logging
from typing import Any

import httpx
import openai
import pytest

from launcher.server.core.call_repair import repaired_json
from launcher.server.core.json_prefix import is_json_prefix
from launcher.server.core.templates import ToolFormat
from launcher.server.core.toolcalls import ParsedToolCall, StreamingToolParser, TextPiece, parse_tool_calls
from tests.metrics_text import metric_total
from tests.server.conftest import ServeFn
from tests.server.fake_model import FakeModel


@pytest.mark.parametrize(
    ("slipped", "meant"),
    [
        ('{"path": "a.py",}', {"path": "a.py"}),
        ('{"paths": ["a.py", "b.py", ], }', {"paths": ["a.py", "b.py"]}),
        ("{'path': 'a.py'}", {"path": "a.py"}),
        ("{'text': 'it\\'s \"quoted\"'}", {"text": 'it\'s "quoted"'}),
        ("{'all': True, 'force': False, 'limit': None}", {"all": True, "force": False, "limit": None}),
        ('{"flags": [True, False]}', {"flags": [True, False]}),
    ],
)
def test_a_slip_with_one_meaning_is_fixed(slipped: str, meant: object) -> None:
    fixed = repaired_json(slipped)
    assert fixed is not None and json.loads(fixed) == meant


@pytest.mark.parametrize(
    "text",
    [
        '{"path": "a.py"}',  # nothing to fix
        '{"note": "True, it\'s done, }"}',  # the words and commas are inside a string
        '{"Truth": 1}',
        '{"a": Nonesuch}',  # not a constant: a guess, so not fixed
    ],
)
def test_text_without_a_certain_fix_is_left_alone(text: str) -> None:
    assert repaired_json(text) is None


def test_a_call_still_streaming_is_repaired_as_a_prefix() -> None:
    body = "{'name': 'read_file', 'arguments': {'path': 'a.py', 'all': True}}"
    for end in range(1, len(body) + 1):
        prefix = body[:end]
        fixed = repaired_json(prefix)
        assert is_json_prefix(fixed if fixed is not None else prefix), prefix


def test_a_long_body_is_repaired_in_linear_time() -> None:
    """A Write call carries a whole file; repair must not rescan the text per character."""
    body = "{'content': '" + "x = 1, y = [2, 3]\\n" * 20_000 + "',}"
    fixed = repaired_json(body)
    assert fixed is not None and json.loads(fixed)["content"].startswith("x = 1")


TOOLS: Any = [
    {
        "type": "function",
        "function": {
            "name": "read_file",
            "parameters": {"type": "object", "properties": {"path": {"type": "string"}, "all": {"type": "boolean"}}},
        },
    }
]
READ_A = {"path": "a.py", "all": True}


def _streamed(fmt: ToolFormat, text: str, tools: Any = None) -> tuple[str, list[ParsedToolCall], int]:
    parser = StreamingToolParser(fmt, tools)
    events = [event for start in range(0, len(text), 2) for event in parser.feed(text[start : start + 2])]
    events += parser.finish()
    content = "".join(event.text for event in events if isinstance(event, TextPiece))
    return content, [event for event in events if isinstance(event, ParsedToolCall)], parser.left_as_text


@pytest.mark.parametrize(
    ("fmt", "reply"),
    [
        (
            "hermes",
            "Reading it.\n<tool_call>\n{'name': 'read_file', 'arguments': {'path': 'a.py', 'all': True}}\n</tool_call>",
        ),
        ("hermes", '<tool_call>\n{"name": "read_file", "arguments": {"path": "a.py", "all": true,},}\n</tool_call>'),
        ("mistral", "[TOOL_CALLS]read_file[ARGS]{'path': 'a.py', 'all': True}"),
        ("llama3", '<|python_tag|>{"name": "read_file", "parameters": {"path": "a.py", "all": true,}}'),
        (
            "harmony",
            "<|channel|>commentary to=functions.read_file <|constrain|>json"
            "<|message|>{'path': 'a.py', 'all': True}<|call|>",
        ),
        ("hermes", 'Reading it.\n```json\n{"name": "read_file", "arguments": {"path": "a.py", "all": true}}\n```\n'),
    ],
)
def test_a_slipped_call_reaches_the_client_as_a_repaired_call(fmt: ToolFormat, reply: str) -> None:
    for content, calls, left in (_whole(fmt, reply), _streamed(fmt, reply, TOOLS)):
        assert [(call.name, json.loads(call.arguments), call.repaired) for call in calls] == [
            ("read_file", READ_A, True)
        ]
        assert left == 0 and "read_file" not in content


def _whole(fmt: ToolFormat, text: str) -> tuple[str, list[ParsedToolCall], int]:
    parser = StreamingToolParser(fmt, TOOLS)
    events = parser.feed(text) + parser.finish()
    content = "".join(event.text for event in events if isinstance(event, TextPiece))
    return content, [event for event in events if isinstance(event, ParsedToolCall)], parser.left_as_text


def test_a_call_written_right_is_not_counted_as_repaired() -> None:
    _, calls = parse_tool_calls("hermes", '<tool_call>{"name": "read_file", "arguments": {"path": "a.py"}}</tool_call>')
    assert len(calls) == 1 and not calls[0].repaired


@pytest.mark.parametrize(
    ("reply", "left"),
    [
        (
            '<tool_call>\n{"name": "read_file", "arguments": {"path": "a.py"\n</tool_call>',
            1,
        ),  # a missing brace: a guess
        ("[TOOL_CALLS]read_file[ARGS]path=a.py", 1),  # arguments that are no JSON at all
        ('```json\n{"name": "delete_everything", "arguments": {}}\n```\n', 0),  # not one of the request's tools
        ('```json\n{"name": "my-app", "version": "1.0"}\n```\n', 0),  # a JSON file, not a call
        ("```\nls -la\n```\n", 0),
    ],
)
def test_a_call_that_needs_a_guess_and_code_blocks_stay_text(reply: str, left: int) -> None:
    fmt: ToolFormat = "mistral" if reply.startswith("[TOOL_CALLS]") else "hermes"
    for content, calls, left_as_text in (_whole(fmt, reply), _streamed(fmt, reply, TOOLS)):
        assert calls == [] and left_as_text == left
        assert content == reply


@pytest.mark.parametrize("stream", [False, True])
def test_the_client_gets_a_repaired_call_and_the_log_and_metrics_say_so(
    serve: ServeFn, caplog: pytest.LogCaptureFixture, stream: bool
) -> None:
    """A real server around the scripted engine (it writes Python's dict repr, as small models do)."""
    caplog.set_level(logging.INFO, logger="launcher.requests")
    call = "<tool_call>\n{'name': 'read_file', 'arguments': {'path': 'a.py', 'all': True}}\n</tool_call>"
    model = FakeModel(reply=lambda _prompt: call)
    with serve(model) as url:
        client = openai.OpenAI(base_url=f"{url}/v1", api_key="x")
        asked: Any = {"model": "fake-model", "messages": [{"role": "user", "content": "Read a.py"}], "tools": TOOLS}
        if stream:
            chunks = list(client.chat.completions.create(**asked, stream=True))
            deltas = [call for chunk in chunks for call in chunk.choices[0].delta.tool_calls or []]
            arguments = "".join(call.function.arguments or "" for call in deltas)
            finish = chunks[-1].choices[0].finish_reason
        else:
            reply = client.chat.completions.create(**asked)
            arguments = reply.choices[0].message.tool_calls[0].function.arguments  # type: ignore[index, union-attr]
            finish = reply.choices[0].finish_reason
        metrics = httpx.get(f"{url}/metrics").text
    assert json.loads(arguments) == READ_A and finish == "tool_calls"
    assert metric_total(metrics, "launcher_tool_calls_total", outcome="repaired") == 1
    logged = [r.getMessage() for r in caplog.records if r.name == "launcher.requests" and "calls=" in r.getMessage()]
    assert logged and "calls=1 repaired=1" in logged[-1]
