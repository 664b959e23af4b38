"""Tool calls the model writes become structured calls, per model family, whole or streamed."""

from __future__ import annotations

import json

import pytest

from launcher.server.core.templates import ToolFormat
from launcher.server.core.toolcalls import (
    ParsedToolCall,
    StreamingToolParser,
    TextPiece,
    parse_tool_calls,
    tool_constraint,
)


@pytest.mark.parametrize(
    ("fmt", "text"),
    [
        ("hermes", 'Let me check.<tool_call>\n{"name": "get_weather", "arguments": {"city": "Paris"}}\n</tool_call>'),
        ("llama3", '{"name": "get_weather", "parameters": {"city": "Paris"}}'),
        ("llama3", '<|python_tag|>{"name": "get_weather", "parameters": {"city": "Paris"}}'),
        ("mistral", '[TOOL_CALLS][{"name": "get_weather", "arguments": {"city": "Paris"}}]'),
        ("mistral", '[TOOL_CALLS]get_weather[ARGS]{"city": "Paris"}'),
        (
            "harmony",
            '<|channel|>commentary to=functions.get_weather <|constrain|>json<|message|>{"city": "Paris"}<|call|>',
        ),
    ],
)
def test_each_family_call_is_parsed(fmt: ToolFormat, text: str) -> None:
    content, calls = parse_tool_calls(fmt, text)
    assert [(c.name, json.loads(c.arguments)) for c in calls] == [("get_weather", {"city": "Paris"})]
    assert "get_weather" not in content


def test_plain_text_passes_through_unchanged() -> None:
    for fmt in ("hermes", "llama3", "mistral", "harmony"):
        content, calls = parse_tool_calls(fmt, "The answer is 42 <tool> not a call.")  # type: ignore[arg-type]
        assert calls == []
        assert content == "The answer is 42 <tool> not a call."


def test_llama3_json_that_is_not_a_call_stays_text() -> None:
    content, calls = parse_tool_calls("llama3", '{"answer": 42}')
    assert calls == [] and content == '{"answer": 42}'


def test_broken_call_is_returned_as_text_not_lost() -> None:
    content, calls = parse_tool_calls("hermes", "<tool_call>{not json</tool_call>")
    assert calls == [] and content == "<tool_call>{not json</tool_call>"


def test_streaming_holds_back_only_a_possible_marker_prefix() -> None:
    parser = StreamingToolParser("hermes")
    assert parser.feed("Hello <tool") == [TextPiece("Hello ")]
    assert parser.feed("box> done") == [TextPiece("<toolbox> done")]


def test_streaming_call_split_into_many_pieces() -> None:
    text = (
        'Sure.\n<tool_call>\n{"name": "add", "arguments": {"a": 1, "b": 2}}\n</tool_call>\n'
        '<tool_call>{"name": "neg", "arguments": {"x": 3}}</tool_call>'
    )
    parser = StreamingToolParser("hermes")
    events = []
    for char in text:
        events.extend(parser.feed(char))
    events.extend(parser.finish())
    calls = [e for e in events if isinstance(e, ParsedToolCall)]
    assert [(c.name, json.loads(c.arguments)) for c in calls] == [("add", {"a": 1, "b": 2}), ("neg", {"x": 3})]
    assert "".join(e.text for e in events if isinstance(e, TextPiece)).strip() == "Sure."
    assert calls[0].id != calls[1].id


def test_unterminated_call_at_end_of_generation_is_still_parsed() -> None:
    content, calls = parse_tool_calls("hermes", '<tool_call>{"name": "f", "arguments": {}}')
    assert [c.name for c in calls] == ["f"] and content == ""


def test_required_constraint_names_only_the_offered_tools() -> None:
    tools = [
        {"type": "function", "function": {"name": "a", "parameters": {"type": "object"}}},
        {"type": "function", "function": {"name": "b"}},
    ]
    constraint, fmt = tool_constraint("hermes", tools)
    assert fmt == "hermes" and constraint.prefix_text.startswith("<tool_call>")
    assert constraint.schema is not None
    names = [option["properties"]["name"]["const"] for option in constraint.schema["anyOf"]]
    assert names == ["a", "b"]
    constraint, fmt = tool_constraint("harmony", tools[:1])
    assert (
        fmt == "hermes" and constraint.schema is not None and constraint.schema["properties"]["name"] == {"const": "a"}
    )


def test_call_cut_inside_the_end_marker_is_still_parsed() -> None:
    content, calls = parse_tool_calls("hermes", '<tool_call>\n{"name": "f", "arguments": {"a": 1}} \n</tool')
    assert [(c.name, json.loads(c.arguments)) for c in calls] == [("f", {"a": 1})] and content == ""


def _stream_through(parser: StreamingToolParser, text: str) -> list[tuple[int, TextPiece | ParsedToolCall]]:
    """(index of the fed character, event) for every event, feeding one character at a time."""
    events: list[tuple[int, TextPiece | ParsedToolCall]] = []
    for index, char in enumerate(text):
        events.extend((index, event) for event in parser.feed(char))
    events.extend((len(text), event) for event in parser.finish())
    return events


@pytest.mark.parametrize(
    ("fmt", "text", "released_by"),
    [
        # the starter model's reply that held 300 tokens back until the end
        ("hermes", '```\n<tool_call>\n{"name": "shell", "arguments": ["ls"] oops, and then a long story', "oops"),
        ("hermes", "<tool_call> I would call a tool here, but let me explain first.", "I"),
        ("llama3", '{"name": "get_weather", "parameters": {"city": Paris}} and more', "Paris"),
        ("llama3", "<|python_tag|>print('hello') and then much more text", "print"),
        ("mistral", "[TOOL_CALLS] is how calls begin, as I said.", "is "),
        ("harmony", "<|channel|>commentary to=functions.f " + "x" * 200, "x" * 200),
    ],
)
def test_text_after_a_start_marker_is_released_as_soon_as_it_cannot_be_a_call(
    fmt: ToolFormat, text: str, released_by: str
) -> None:
    events = _stream_through(StreamingToolParser(fmt), text)
    assert not [e for _, e in events if isinstance(e, ParsedToolCall)]
    assert "".join(e.text for _, e in events if isinstance(e, TextPiece)) == text  # nothing lost
    cut = text.index(released_by) + len(released_by)
    before_end = "".join(e.text for i, e in events if isinstance(e, TextPiece) and i < cut)
    assert len(before_end) >= text.index(released_by) - 2, "the text was held back past the point it became prose"


def test_a_long_call_is_held_whole_and_parsed() -> None:
    content = "line of a file\n" * 2000  # a Write call with 30 kB of arguments
    call = json.dumps({"name": "Write", "arguments": {"file_path": "a.txt", "content": content}})
    events = _stream_through(StreamingToolParser("hermes"), f"Writing it.\n<tool_call>\n{call}\n</tool_call>")
    calls = [e for _, e in events if isinstance(e, ParsedToolCall)]
    assert [(c.name, json.loads(c.arguments)["content"]) for c in calls] == [("Write", content)]
    assert "".join(e.text for _, e in events if isinstance(e, TextPiece)).strip() == "Writing it."


def test_a_complete_call_followed_by_prose_without_the_end_marker_is_still_a_call() -> None:
    call = '<tool_call>{"name": "f", "arguments": {"a": 1}}'
    events = _stream_through(StreamingToolParser("hermes"), call + " Now I wait for the result.")
    calls = [(i, e) for i, e in events if isinstance(e, ParsedToolCall)]
    assert [(c.name, json.loads(c.arguments)) for _, c in calls] == [("f", {"a": 1})]
    assert calls[0][0] <= len(call) + 1, "the call waited for the end of the reply"
    assert "".join(e.text for _, e in events if isinstance(e, TextPiece)).strip() == "Now I wait for the result."


def test_a_real_call_after_a_released_marker_is_still_found() -> None:
    text = '<tool_call> means a call. Like this: <tool_call>{"name": "f", "arguments": {}}</tool_call>'
    content, calls = parse_tool_calls("hermes", text)
    assert [c.name for c in calls] == ["f"]
    assert content == "<tool_call> means a call. Like this: "
