"""Tool calls written by the model, parsed per model family, in one piece or while streaming.

Families (`ToolFormat` lists them with their syntax): JSON ones, where a call is a JSON object
with the name inside (hermes/qwen, llama 3.x, mistral's list, granite's and phi-4's lists), and
tagged ones, where literal text names the tool and holds its JSON arguments (mistral's
`name[ARGS]`, harmony, DeepSeek, Kimi K2) or each argument in tags of its own (Qwen3-Coder's
`<parameter=P>`, GLM's `<arg_key>`). A tagged argument is text: it becomes JSON where it reads
as the type the tool's schema gives it, else it stays a string (the parser is given the tools).

The streaming parser emits text as soon as it cannot be the start of a tool call. After a start
marker it holds the text back only while it can still become a call: the body is checked as it
grows (a JSON prefix, or the family's tags in their order), and the moment it cannot be one the
marker and the body are released as text. A model that writes `<tool_call>` and then
prose therefore keeps streaming, instead of going silent until the reply ends.
"""

from __future__ import annotations

import json
import re
import secrets
from dataclasses import dataclass, field, replace
from typing import Any, Literal

from launcher.engines._schema_bounds import without_large_maximums
from launcher.engines.base import CallShape, Constraint
from launcher.engines.call_shapes import is_raw_text
from launcher.server.core.call_repair import repaired_json
from launcher.server.core.json_prefix import is_json_prefix
from launcher.server.core.templates import CALL_LIST_WRAP, ToolFormat


@dataclass(frozen=True)
class ParsedToolCall:
    """A call the model made: function name and its arguments as a JSON string."""

    name: str
    arguments: str
    id: str = field(default_factory=lambda: "call_" + secrets.token_hex(12))
    repaired: bool = field(default=False, compare=False)  # read once a slip was fixed (call_repair)


@dataclass(frozen=True)
class TextPiece:
    """Plain text for the client."""

    text: str


ParserEvent = TextPiece | ParsedToolCall

# DeepSeek's and Kimi K2's calls: a section holding one or more calls, each between two tags
_DEEPSEEK_SECTION = ("<｜tool▁calls▁begin｜>", "<｜tool▁calls▁end｜>")
_DEEPSEEK_CALL = ("<｜tool▁call▁begin｜>", "<｜tool▁sep｜>", "<｜tool▁call▁end｜>")
_KIMI_SECTION = ("<|tool_calls_section_begin|>", "<|tool_calls_section_end|>")
_KIMI_CALL = ("<|tool_call_begin|>", "<|tool_call_argument_begin|>", "<|tool_call_end|>")

# start marker -> end marker (None: the call runs to the end of the reply)
_MARKERS: dict[ToolFormat, dict[str, str | None]] = {
    "hermes": {"<tool_call>": "</tool_call>"},
    "llama3": {"<|python_tag|>": None},
    "mistral": {"[TOOL_CALLS]": None},
    # gpt-oss names a call's recipient after the channel, or before it in the role part of the header (as
    # its template writes earlier calls); the reply's first header has no `<|start|>assistant` (the prompt
    # ends with it). server/core/harmony.py writes every call in the first form.
    "harmony": {
        "<|channel|>commentary to=functions.": "<|call|>",
        "<|start|>assistant to=functions.": "<|call|>",
        " to=functions.": "<|call|>",
    },
    "qwen3_coder": {"<tool_call>": "</tool_call>"},
    "glm": {"<tool_call>": "</tool_call>"},
    "deepseek_r1": {_DEEPSEEK_SECTION[0]: _DEEPSEEK_SECTION[1]},
    "deepseek_v31": {_DEEPSEEK_SECTION[0]: _DEEPSEEK_SECTION[1]},
    # Granite 3.x writes no end marker (its list runs to the end of the reply); Phi-4-mini does.
    "granite": {CALL_LIST_WRAP["granite"][0]: CALL_LIST_WRAP["phi4"][1]},
    "phi4": {CALL_LIST_WRAP["phi4"][0]: CALL_LIST_WRAP["phi4"][1]},
    "kimi_k2": {_KIMI_SECTION[0]: _KIMI_SECTION[1]},
}


# A call written into the reply's text as a JSON code block, ```json\n{"name": ..., "arguments": ...}\n```
# (small models do, when they were not trained on the family's markers): read as a call, and counted as
# repaired, when it names one of the request's tools. Any other code block stays text.
_FENCES: dict[str, str | None] = {"```json\n": "```", "```\n": "```"}


# Small models put raw newlines inside JSON strings (code in a Write call); read them anyway.
_DECODER = json.JSONDecoder(strict=False)


def _arguments_json(value: Any) -> str | None:
    """The arguments as JSON text; None when they are text that is not JSON (no call a client can run)."""
    if isinstance(value, str):
        try:
            value = _DECODER.decode(value)
        except json.JSONDecodeError:
            return None
    return json.dumps(value if value is not None else {}, ensure_ascii=False)


def _repaired_calls(calls: list[ParsedToolCall] | None) -> list[ParsedToolCall] | None:
    return None if calls is None else [replace(call, repaired=True) for call in calls]


def _calls_from_json(value: Any) -> list[ParsedToolCall] | None:
    """Calls from a decoded JSON object/array, or None when it does not look like calls."""
    items = value if isinstance(value, list) else [value]
    calls: list[ParsedToolCall] = []
    for item in items:
        if not isinstance(item, dict):
            return None
        if isinstance(item.get("function"), dict):
            item = item["function"]
        name = item.get("name")
        if not isinstance(name, str) or not name:
            return None
        arguments = _arguments_json(item.get("arguments", item.get("parameters", {})))
        if arguments is None:
            return None
        calls.append(ParsedToolCall(name=name, arguments=arguments))
    return calls or None


def _decode_json_sequence(text: str) -> list[Any] | None:
    """JSON values separated by whitespace or `;` (llama 3 may emit several)."""
    values: list[Any] = []
    position = 0
    text = text.strip()
    while position < len(text):
        while position < len(text) and text[position] in " \t\r\n;":
            position += 1
        if position >= len(text):
            break
        try:
            value, position = _DECODER.raw_decode(text, position)
        except json.JSONDecodeError:
            return None
        values.append(value)
    return values or None


BodyState = Literal["possible", "impossible", "calls_then_text"]

_JSON_SEPARATORS = " \t\r\n;"


def _json_calls_state(body: str, end: str | None) -> tuple[BodyState, int]:
    """Whether a JSON-sequence call body can still become calls, and where complete calls end.

    Complete values must each look like calls; what follows them must be nothing yet, the start
    of the end marker, or the start of another object or array.
    """
    position, complete_end, found = 0, 0, False
    while True:
        while position < len(body) and body[position] in _JSON_SEPARATORS:
            position += 1
        rest = body[position:]
        if not rest or (end is not None and end.startswith(rest)):
            return "possible", complete_end
        if rest[0] not in "{[":
            return ("calls_then_text" if found else "impossible"), complete_end
        try:
            value, consumed = _DECODER.raw_decode(rest)
        except json.JSONDecodeError:
            if is_json_prefix(rest):
                return "possible", complete_end
            return ("calls_then_text" if found else "impossible"), complete_end
        if _calls_from_json(value) is None:
            return ("calls_then_text" if found else "impossible"), complete_end
        position += consumed
        complete_end, found = position, True


# --- Tagged families: literal tags around the name and the arguments, read by a small scanner.


class _Partial(Exception):
    """The text ran out where a call could still go on."""


class _Mismatch(Exception):
    """The text cannot be a call from here on."""


_WHITESPACE = " \t\r\n"
_NAME_CHARS = re.compile(r"[^\s<>\"'\\`{}]*")  # a tool or parameter name: no tags, quotes or JSON
_NAME_MAX = 256  # chat.py refuses longer tool names


class _Scanner:
    """Reads a call body in order; raises _Partial at the end of a text that may still become a call
    and _Mismatch where it cannot. Keeps the calls read so far and where the last one ended."""

    def __init__(self, text: str, tools: list[dict[str, Any]] | None) -> None:
        self.text, self.pos, self.tools = text, 0, tools
        self.calls: list[ParsedToolCall] = []
        self.complete_end = 0

    def at_end(self) -> bool:
        return self.pos >= len(self.text)

    def space(self) -> None:
        while self.pos < len(self.text) and self.text[self.pos] in _WHITESPACE:
            self.pos += 1

    def literal(self, literal: str) -> None:
        piece = self.text[self.pos : self.pos + len(literal)]
        if piece == literal:
            self.pos += len(literal)
        elif literal.startswith(piece):
            raise _Partial
        else:
            raise _Mismatch

    def either(self, *literals: str) -> str:
        """Which of `literals` comes next (consumed)."""
        for literal in literals:
            if self.text.startswith(literal, self.pos):
                self.pos += len(literal)
                return literal
        rest = self.text[self.pos : self.pos + max(map(len, literals))]  # not a copy of a long body
        if any(literal.startswith(rest) for literal in literals):
            raise _Partial
        raise _Mismatch

    def name(self) -> str:
        """A name: the longest run of name characters (at least one)."""
        match = _NAME_CHARS.match(self.text, self.pos)
        assert match is not None  # the pattern matches the empty string
        found = match.group()
        if len(found) > _NAME_MAX:
            raise _Mismatch
        if not found:
            raise _Partial if self.at_end() else _Mismatch
        self.pos = match.end()
        return found

    def upto(self, stop: str, *, name: bool = False) -> str:
        """The text before `stop` (both consumed); with `name`, it must be a name."""
        index = self.text.find(stop, self.pos)
        if index < 0:
            tail = self.text[self.pos :]
            if name and (len(tail) > _NAME_MAX + len(stop) or not _NAME_CHARS.fullmatch(_without_partial(tail, stop))):
                raise _Mismatch
            raise _Partial
        value = self.text[self.pos : index]
        if name and (not value or len(value) > _NAME_MAX or not _NAME_CHARS.fullmatch(value)):
            raise _Mismatch
        self.pos = index + len(stop)
        return value

    def json_object(self) -> dict[str, Any]:
        self.space()
        rest = self.text[self.pos :]
        if not rest:
            raise _Partial
        if rest[0] != "{":
            raise _Mismatch
        try:
            value, self.pos = _DECODER.raw_decode(self.text, self.pos)
        except json.JSONDecodeError:
            raise _Partial if is_json_prefix(rest) else _Mismatch from None
        return value  # type: ignore[no-any-return]

    def add_call(self, name: str, arguments: dict[str, Any]) -> None:
        self.calls.append(ParsedToolCall(name=name, arguments=json.dumps(arguments, ensure_ascii=False)))
        self.complete_end = self.pos

    def typed(self, tool: str, parameter: str, raw: str) -> Any:
        return _typed_value(raw, _tool_properties(self.tools, tool).get(parameter))


def _without_partial(text: str, marker: str) -> str:
    """`text` without a start of `marker` at its end (the rest of the marker may still come)."""
    for size in range(min(len(marker) - 1, len(text)), 0, -1):
        if text.endswith(marker[:size]):
            return text[:-size]
    return text


def _tool_name(tool: dict[str, Any]) -> str | None:
    function = tool.get("function", tool)
    return function.get("name") if isinstance(function, dict) else None


def _tool_properties(tools: list[dict[str, Any]] | None, name: str) -> dict[str, Any]:
    for tool in tools or ():
        function = tool.get("function", tool)
        if isinstance(function, dict) and function.get("name") == name:
            properties = (function.get("parameters") or {}).get("properties")
            return properties if isinstance(properties, dict) else {}
    return {}


def _schema_types(schema: Any) -> set[str]:
    """The JSON types a property's schema allows (empty: not said)."""
    if not isinstance(schema, dict):
        return set()
    declared = schema.get("type")
    types = (
        {declared}
        if isinstance(declared, str)
        else {t for t in declared if isinstance(t, str)}
        if isinstance(declared, list)
        else set()
    )
    for key in ("anyOf", "oneOf"):
        for option in schema.get(key) or ():
            types |= _schema_types(option)
    return types


def _is_type(value: Any, types: set[str]) -> bool:
    checks = {
        "string": lambda v: isinstance(v, str),
        "integer": lambda v: isinstance(v, int) and not isinstance(v, bool),
        "number": lambda v: isinstance(v, (int, float)) and not isinstance(v, bool),
        "boolean": lambda v: isinstance(v, bool),
        "object": lambda v: isinstance(v, dict),
        "array": lambda v: isinstance(v, list),
        "null": lambda v: v is None,
    }
    return any(checks[t](value) for t in types if t in checks)


def _typed_value(raw: str, schema: Any) -> Any:
    """A tagged argument's value: the text itself where the schema lets it be a string (the rule the call
    grammar writes values by: `call_shapes.is_raw_text`), else JSON where it reads as a type the schema
    allows. Without a schema, JSON where it reads as JSON (`2` is a number, `Paris` a string)."""
    if isinstance(schema, dict) and is_raw_text(schema):
        return raw
    types = _schema_types(schema)
    try:
        value = _DECODER.decode(raw.strip())
    except json.JSONDecodeError:
        return raw
    return value if not types or _is_type(value, types) else raw


def _read_qwen3_coder(scan: _Scanner) -> None:
    """`<function=NAME>` then `<parameter=P>\\nVALUE\\n</parameter>` for each argument, `</function>`."""
    scan.space()
    scan.literal("<function=")
    name = scan.upto(">", name=True)
    arguments: dict[str, Any] = {}
    while True:
        scan.space()
        if scan.either("<parameter=", "</function>") == "</function>":
            break
        parameter = scan.upto(">", name=True)
        raw = scan.upto("</parameter>")
        # the template writes the value between two newlines; they are not part of it
        raw = raw.removeprefix("\n").removesuffix("\n")
        arguments[parameter] = scan.typed(name, parameter, raw)
    scan.add_call(name, arguments)
    scan.space()
    if not scan.at_end():
        raise _Mismatch  # the call is whole; what follows inside the marker is not


def _read_glm(scan: _Scanner) -> None:
    """NAME, then `<arg_key>K</arg_key><arg_value>V</arg_value>` for each argument. Only the end marker
    ends the call (nothing in it closes the last argument list), so a call is whole only at the end."""
    scan.space()
    name = scan.name()
    arguments: dict[str, Any] = {}
    while True:
        scan.space()
        if scan.at_end():
            scan.add_call(name, arguments)
            return
        scan.literal("<arg_key>")
        key = scan.upto("</arg_key>", name=True)
        scan.space()
        scan.literal("<arg_value>")
        arguments[key] = scan.typed(name, key, scan.upto("</arg_value>"))


def _read_deepseek(scan: _Scanner) -> None:
    """Calls, each `<｜tool▁call▁begin｜>NAME<｜tool▁sep｜>{...}<｜tool▁call▁end｜>` (V3.1) or
    `<｜tool▁call▁begin｜>function<｜tool▁sep｜>NAME\\n```json\\n{...}\\n```<｜tool▁call▁end｜>` (V3, R1)."""
    begin, separator, end = _DEEPSEEK_CALL
    while True:
        scan.space()
        if scan.at_end():
            return
        scan.literal(begin)
        head = scan.upto(separator, name=True)
        scan.space()
        if scan.at_end():
            raise _Partial
        if scan.text[scan.pos] == "{":
            name, arguments = head, scan.json_object()
        else:
            name = scan.name()
            scan.space()
            scan.literal("```json")
            arguments = scan.json_object()
            scan.space()
            scan.literal("```")
        scan.space()
        scan.literal(end)
        scan.add_call(name, arguments)


_KIMI_ID = re.compile(r"(?:functions\.)?(.+?)(?::\d+)?")


def _read_kimi_k2(scan: _Scanner) -> None:
    """Calls, each `<|tool_call_begin|>functions.NAME:INDEX<|tool_call_argument_begin|>{...}<|tool_call_end|>`."""
    begin, separator, end = _KIMI_CALL
    while True:
        scan.space()
        if scan.at_end():
            return
        scan.literal(begin)
        call_id = scan.upto(separator, name=True)
        match = _KIMI_ID.fullmatch(call_id.strip())
        if match is None:
            raise _Mismatch
        arguments = scan.json_object()
        scan.space()
        scan.literal(end)
        scan.add_call(match.group(1), arguments)


_TAGGED_READERS = {
    "qwen3_coder": _read_qwen3_coder,
    "glm": _read_glm,
    "deepseek_r1": _read_deepseek,
    "deepseek_v31": _read_deepseek,
    "kimi_k2": _read_kimi_k2,
}


def _reads_as_tagged(fmt: ToolFormat, body: str) -> bool:
    """Whether a body is read as the family's tags. Qwen3-Coder and GLM share Hermes's `<tool_call>`, and
    their models at times write a Hermes JSON call inside it: a body that opens with `{` is read as JSON."""
    if fmt not in _TAGGED_READERS:
        return False
    return _MARKERS[fmt] != _MARKERS["hermes"] or not body.lstrip().startswith("{")


def _tagged_calls(
    fmt: ToolFormat, body: str, end: str | None, tools: list[dict[str, Any]] | None
) -> tuple[BodyState | Literal["whole"], list[ParsedToolCall], int]:
    """A tagged family's body read: whether it is whole, may still become calls, or went wrong after
    (or before) some whole calls; the calls read, and where the last one ended."""
    scan = _Scanner(_without_partial(body, end) if end else body, tools)
    try:
        _TAGGED_READERS[fmt](scan)
    except _Partial:
        return "possible", scan.calls, scan.complete_end
    except _Mismatch:
        return ("calls_then_text" if scan.calls else "impossible"), scan.calls, scan.complete_end
    return "whole", scan.calls, len(body)


_MISTRAL_NAME = re.compile(r"\s*[\w.\-]+")
_HARMONY_NAME = re.compile(r"[^\s<>\"'\\`{}]+")
_HARMONY_HEADER_MAX = 160  # `NAME<|channel|>commentary <|constrain|>json` before <|message|>: a few dozen characters
# What a call's header holds after the tool's name: the channel where the recipient came first
# (`<|channel|>commentary`), then the arguments' content type (` json`, ` <|constrain|>json`), each optional.
_HARMONY_HEADER_REST = re.compile(r"(?:<\|channel\|>\w+)?\s*(?:<\|constrain\|>)?\s*[\w\-/]*\s*")
_HARMONY_HEADER_TAGS = ("<|channel|>", "<|constrain|>", "<|message|>")


def _harmony_header(head: str, *, whole: bool) -> bool:
    """Whether `head` (a harmony call's header after `to=functions.`, up to `<|message|>`) is one: the tool's
    name and what may follow it. Not `whole`: the header may still go on (it can stop inside a tag)."""
    if len(head) > _HARMONY_HEADER_MAX:
        return False
    if not whole:
        for tag in _HARMONY_HEADER_TAGS:
            head = _without_partial(head, tag)
        if not head:
            return True
    name = _HARMONY_NAME.match(head)
    rest = head[name.end() :] if name else ""
    if not whole and rest.endswith("<|channel|>"):
        rest += "commentary"  # the channel's name comes next
    return name is not None and _HARMONY_HEADER_REST.fullmatch(rest) is not None


def _body_state(
    fmt: ToolFormat, body: str, end: str | None, tools: list[dict[str, Any]] | None = None
) -> tuple[BodyState, int]:
    """Can `body` (the text after a start marker, without its end marker) still become a call?

    Also where the complete calls end, for "calls_then_text" (0 otherwise). A JSON body that can
    become a call only once repaired (call_repair: a trailing comma, single quotes) is "possible".
    """
    state = _written_body_state(fmt, body, end, tools)
    if state[0] == "possible" or _reads_as_tagged(fmt, body):
        return state
    fixed = repaired_json(body)
    if fixed is not None and _written_body_state(fmt, fixed, end, tools)[0] == "possible":
        return "possible", 0
    return state


def _written_body_state(
    fmt: ToolFormat, body: str, end: str | None, tools: list[dict[str, Any]] | None
) -> tuple[BodyState, int]:
    if _reads_as_tagged(fmt, body):
        state, _, calls_end = _tagged_calls(fmt, body, end, tools)
        return ("possible" if state == "whole" else state), calls_end
    if fmt == "harmony":
        head, marker, args = body.partition("<|message|>")
        if not _harmony_header(head, whole=bool(marker)):
            return "impossible", 0
        if not marker:
            return "possible", 0
        args = args.lstrip()
        if end is not None:  # the reply may be cut inside `<|call|>` (text streamed in pieces)
            args = _without_partial(args, end)
        if not args:
            return "possible", 0
        return ("possible" if args[0] in "{[" and is_json_prefix(args) else "impossible"), 0
    stripped = body.lstrip()
    if fmt == "mistral" and stripped and stripped[0] not in "{[":
        name = _MISTRAL_NAME.match(body)
        if name is None:
            return "impossible", 0
        rest = body[name.end() :]
        if "[ARGS]".startswith(rest) or not rest:
            return "possible", 0
        if not rest.startswith("[ARGS]"):
            return "impossible", 0
        args = rest[len("[ARGS]") :].lstrip()
        if "[TOOL_CALLS]" in args:
            return "possible", 0  # several calls: checked whole when the reply ends
        return ("possible" if not args or (args[0] in "{[" and is_json_prefix(args)) else "impossible"), 0
    return _json_calls_state(body, end)


def parse_call_body(
    fmt: ToolFormat, body: str, tools: list[dict[str, Any]] | None = None
) -> list[ParsedToolCall] | None:
    """Calls inside one tool-call region (after the start marker), or None if it does not parse.
    `tools` (the request's) type the arguments of families that write them as tagged text. A JSON
    body that parses only once repaired (call_repair) gives calls marked `repaired`."""
    calls = _written_calls(fmt, body, tools)
    if calls is not None or _reads_as_tagged(fmt, body):
        return calls
    fixed = repaired_json(body)
    return None if fixed is None else _repaired_calls(_written_calls(fmt, fixed, tools))


def _written_calls(fmt: ToolFormat, body: str, tools: list[dict[str, Any]] | None) -> list[ParsedToolCall] | None:
    if _reads_as_tagged(fmt, body):
        state, calls, _ = _tagged_calls(fmt, body, None, tools)
        return calls if state == "whole" and calls else None
    if fmt == "harmony":
        head, marker, args = body.partition("<|message|>")
        recipient = _HARMONY_NAME.match(head)
        if not marker or recipient is None or not _harmony_header(head, whole=True):
            return None
        arguments = _arguments_json(args.strip())
        return None if arguments is None else [ParsedToolCall(name=recipient.group(), arguments=arguments)]
    if fmt == "mistral" and "[ARGS]" in body:
        calls = []
        for part in body.split("[TOOL_CALLS]"):
            name, _, args = part.partition("[ARGS]")
            if not name.strip():
                return None
            arguments = _arguments_json(args.strip())
            if arguments is None:
                return None
            calls.append(ParsedToolCall(name=name.strip(), arguments=arguments))
        return calls
    values = _decode_json_sequence(body)
    if values is None:
        return None
    calls = []
    for value in values:
        found = _calls_from_json(value)
        if found is None:
            return None
        calls.extend(found)
    return calls


def parse_tool_calls(
    fmt: ToolFormat, text: str, tools: list[dict[str, Any]] | None = None
) -> tuple[str, list[ParsedToolCall]]:
    """Split a whole reply into text content and tool calls (`tools`: as for `StreamingToolParser`)."""
    parser = StreamingToolParser(fmt, tools)
    events = parser.feed(text) + parser.finish()
    content = "".join(e.text for e in events if isinstance(e, TextPiece))
    return content, [e for e in events if isinstance(e, ParsedToolCall)]


class StreamingToolParser:
    """Turns streamed model text into text pieces and complete tool calls.

    `tools`: the request's tools, which say what type each argument of a tagged family is (without
    them, an argument is JSON where it reads as JSON)."""

    def __init__(self, fmt: ToolFormat, tools: list[dict[str, Any]] | None = None) -> None:
        self.fmt = fmt
        self.tools = tools
        self._tool_names = {_tool_name(tool) for tool in tools or ()}
        self.markers = {**_MARKERS[fmt], **(_FENCES if self._tool_names else {})}
        self.buffer = ""
        self.in_call_start = ""  # start marker of the open call
        self.in_call_end: str | None = None  # end marker of the open call
        self.in_call = False
        self.seen_text = False  # llama 3 bare JSON only counts at the very start
        self._bare_json = False  # the open call is bare llama 3 JSON (no marker to give back)
        self._checked_size = 0  # body size at the last look-ahead check
        self.left_as_text = 0  # calls started that did not parse, given to the client as text

    def _longest_marker_prefix(self, text: str) -> int:
        best = 0
        for marker in self.markers:
            for size in range(min(len(marker) - 1, len(text)), 0, -1):
                if text.endswith(marker[:size]):
                    best = max(best, size)
                    break
        return best

    def feed(self, text: str) -> list[ParserEvent]:
        """Events made certain by this piece of text."""
        self.buffer += text
        events: list[ParserEvent] = []
        while True:
            if self.in_call:
                end = self.in_call_end
                if end is not None and end in self.buffer:
                    body, _, rest = self.buffer.partition(end)
                    if self._state(body, None)[0] != "impossible":
                        self.buffer, self.in_call = rest, False
                        events.extend(self._close_call(body, end))
                        continue
                    verdict: BodyState = "impossible"
                    calls_end = 0
                else:
                    verdict, calls_end = self._body_verdict()
                if verdict == "possible":
                    return events
                self.in_call, self.seen_text = False, True
                if verdict == "impossible":
                    # Not a call: the marker is text, and the body is read again as text (it may
                    # hold a real call further on).
                    if not self._fenced:  # a code block is only a call when it parses
                        self.left_as_text += 1
                    if not self._bare_json:
                        events.append(TextPiece(self.in_call_start))
                    continue
                # Complete calls, then the model went on writing without the end marker.
                body, self.buffer = self.buffer[:calls_end], self.buffer[calls_end:]
                events.extend(self._close_call(body, None))
                continue
            if self.fmt == "llama3" and not self.seen_text:
                stripped = self.buffer.lstrip()
                if not stripped:
                    return events
                if stripped.startswith("{"):
                    self.in_call, self.in_call_end, self.buffer = True, None, stripped
                    self._bare_json, self._checked_size = True, 0
                    continue
            found = [(self.buffer.find(m), m) for m in self.markers if m in self.buffer]
            if found:
                index, marker = min(found)
                if index:
                    events.append(TextPiece(self.buffer[:index]))
                self.seen_text = True
                self.buffer = self.buffer[index + len(marker) :]
                self.in_call, self.in_call_start, self.in_call_end = True, marker, self.markers[marker]
                self._bare_json, self._checked_size = False, 0
                continue
            hold = self._longest_marker_prefix(self.buffer)
            ready = self.buffer[: len(self.buffer) - hold]
            if ready:
                events.append(TextPiece(ready))
                if ready.strip():
                    self.seen_text = True
            self.buffer = self.buffer[len(ready) :]
            return events

    def _body_verdict(self) -> tuple[BodyState, int]:
        """The look-ahead check of the open call's body, run again once the body has grown by 1/32.

        Re-reading a long body on every token would cost quadratic time for a call that writes a
        large file; checking at geometric steps keeps the total linear and the delay bounded.
        """
        size = len(self.buffer)
        if size - self._checked_size < max(1, size // 32):
            return "possible", 0
        self._checked_size = size
        return self._state(self.buffer, self.in_call_end)

    @property
    def _fenced(self) -> bool:
        """The open call is a JSON code block in the text (see _FENCES)."""
        return self.in_call_start in _FENCES

    def _state(self, body: str, end: str | None) -> tuple[BodyState, int]:
        if self._fenced:
            return _body_state("hermes", body, end)  # a code block holds hermes-style JSON calls
        return _body_state(self.fmt, body, end, self.tools)

    def _calls(self, body: str) -> list[ParsedToolCall] | None:
        if not self._fenced:
            return parse_call_body(self.fmt, body, self.tools)
        calls = parse_call_body("hermes", body)
        if calls is None or any(call.name not in self._tool_names for call in calls):
            return None  # a code block of JSON that calls none of the request's tools: text
        return _repaired_calls(calls)

    def _close_call(self, body: str, end: str | None) -> list[ParserEvent]:
        calls = self._calls(body)
        if calls is not None:
            return list(calls)
        # Not a call after all: give the client the text the model wrote.
        if not self._fenced:
            self.left_as_text += 1
        if self._bare_json:
            return [TextPiece(body)]
        return [TextPiece(self.in_call_start + body + (end or ""))]

    def finish(self) -> list[ParserEvent]:
        """Flush at the end of generation (an unterminated call is parsed as it stands)."""
        events: list[ParserEvent] = []
        if self.in_call:
            self.in_call = False
            body = self.buffer
            end = self.in_call_end
            if end:  # the reply may stop inside the end marker (max_tokens): drop the partial marker
                for size in range(len(end) - 1, 0, -1):
                    if body.rstrip().endswith(end[:size]):
                        body = body.rstrip()[:-size]
                        break
            events.extend(self._close_call(body, None))
        elif self.buffer:
            events.append(TextPiece(self.buffer))
        self.buffer = ""
        return events


def _grammar_tools(tools: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The tools as their call grammar sees them: maximum counts too large for a grammar dropped
    (`without_large_maximums`: Claude Code's tools would otherwise get no call grammar at all)."""
    return [
        {
            **tool,
            "function": {**tool["function"], "parameters": without_large_maximums(tool["function"].get("parameters"))},
        }
        for tool in tools
    ]


def _call_schema(fmt: ToolFormat, name: str, parameters: dict[str, Any] | None) -> dict[str, Any]:
    args_key = "parameters" if fmt == "llama3" else "arguments"
    return {
        "type": "object",
        "properties": {"name": {"const": name}, args_key: parameters or {"type": "object"}},
        "required": ["name", args_key],
    }


_CALL_MARKERS: dict[ToolFormat, str] = {
    fmt: next(iter(markers)) for fmt, markers in _MARKERS.items() if fmt not in ("llama3", "harmony")
}
"""The text that starts a call, for the formats whose calls open with a control token a lazy grammar can
wait for (llama3's and harmony's calls have triggers of their own: `_llama3_triggers`, `_harmony_triggers`)."""


def _call_shape(fmt: ToolFormat, name: str, schema: dict[str, Any]) -> CallShape:
    """One tool's call as `fmt` writes it, in the spacing of the family's template."""
    if fmt == "qwen3_coder":
        return CallShape(
            f"<tool_call>\n<function={name}>\n",
            schema,
            "</function>\n</tool_call>",
            params=("<parameter={name}>\n", "\n</parameter>\n"),
        )
    if fmt == "glm":
        return CallShape(
            f"<tool_call>{name}\n",
            schema,
            "</tool_call>",
            params=("<arg_key>{name}</arg_key>\n<arg_value>", "</arg_value>\n"),
        )
    if fmt == "deepseek_r1":
        begin, separator, end = _DEEPSEEK_CALL
        return CallShape(f"{begin}function{separator}{name}\n```json\n", schema, f"\n```{end}")
    if fmt == "deepseek_v31":
        begin, separator, end = _DEEPSEEK_CALL
        return CallShape(f"{begin}{name}{separator}", schema, end)
    if fmt == "kimi_k2":
        # The template numbers calls across the conversation (`:0`, `:1`, ...); a literal can only say one
        # number, and the parser does not read it.
        begin, separator, end = _KIMI_CALL
        return CallShape(f"{begin}functions.{name}:0{separator}", schema, end)
    raise ValueError(f"{fmt} calls are JSON, not tagged")


_SECTIONS: dict[ToolFormat, tuple[str, str]] = {
    "deepseek_r1": _DEEPSEEK_SECTION,
    "deepseek_v31": _DEEPSEEK_SECTION,
    "kimi_k2": _KIMI_SECTION,
}
"""The families whose calls sit in one section: its opening and closing text."""


def _regex_literal(text: str) -> str:
    """`text` as an ECMAScript (std::regex) literal."""
    return re.sub(r"([.^$|?*+()\[\]{}\\])", r"\\\1", text)


_AT_END = r"(?![\s\S])"
"""Where the text written so far ends (ECMAScript has no `\\Z`, and Python's `$` also matches before a
final newline)."""


def _prefixes_pattern(texts: list[str], *, empty: bool = True) -> str:
    """A pattern (ECMAScript and Python alike) for any prefix of any of `texts` (with `empty`, none too):
    their characters as a trie of nested optional groups, so it grows with the texts' length."""
    trie: dict[str, Any] = {}
    for text in texts:
        node = trie
        for char in text:
            node = node.setdefault(char, {})

    def branches(node: dict[str, Any]) -> str:
        return "|".join(
            _regex_literal(char) + (f"(?:{branches(child)})?" if child else "") for char, child in node.items()
        )

    return f"(?:{branches(trie)})" + ("?" if empty else "")


def _opening_trigger(before: str, fixed: str, rests: list[str], *, empty: bool = True) -> str:
    """A trigger for a call whose grammar starts with `fixed` and then one of `rests` (its tools' openings):
    `before` (a pattern, left outside the grammar), `fixed`, then a prefix of one of `rests`, up to where
    the text written so far ends.

    Ending the match at the end of the text keeps the grammar from being handed text it refuses: llama.cpp
    hands it everything from the trigger's group to the end of the token that set it off, and a refused
    character there aborts the process (a token `.read` after `to=functions` where no tool is `read...`).
    A text that leaves every opening never sets the trigger off: that call is parsed unconstrained."""
    return f"{before}({_regex_literal(fixed)}{_prefixes_pattern(rests, empty=empty)}){_AT_END}"


def _tool_names(tools: list[dict[str, Any]]) -> list[str]:
    return [str(tool["function"]["name"]) for tool in tools]


_REPLY_STARTS: dict[str, tuple[str, ...]] = {
    "no": (r"^\s*",),
    "maybe": (r"^\s*", r"</think>\s*"),
    "inside": (r"</think>\s*",),
}
"""Where a reply's own text starts (patterns), by `thinking`: its beginning, or the end of its thoughts."""

_LLAMA3_OPENING = '{"name": "'


def _llama3_triggers(tools: list[dict[str, Any]], thinking: Literal["no", "maybe", "inside"]) -> tuple[str, ...]:
    """Llama 3.x: a JSON call after `<|python_tag|>` (anywhere outside thinking), or a bare one opening the
    reply, as its template writes calls: `{"name": "NAME", "parameters": {...}}`. A bare JSON object is only
    a call once it names one of the tools (`{"name": "g` for get_weather), as a JSON answer may well have a
    "name"; after `<|python_tag|>` its `{` is enough."""
    rests = [f'{name}", "parameters": ' for name in _tool_names(tools)]
    tag = _regex_literal("<|python_tag|>") + r"\s*"
    tagged = (tag,) if thinking == "no" else tuple(start + tag for start in _REPLY_STARTS[thinking])
    after_tag = [_opening_trigger(before, "{", [_LLAMA3_OPENING[1:] + rest for rest in rests]) for before in tagged]
    bare = [_opening_trigger(start, _LLAMA3_OPENING, rests, empty=False) for start in _REPLY_STARTS[thinking]]
    return (*after_tag, *bare)


# gpt-oss's call headers, each from where its grammar starts: the channel first (as the model writes them),
# or the recipient first (as its template writes earlier calls, the role `<|start|>assistant` before it).
_HARMONY_CHANNEL_FIRST = ("<|channel|>commentary to=functions.", " <|constrain|>json<|message|>")
_HARMONY_RECIPIENT_FIRST = (" to=functions.", "<|channel|>commentary json<|message|>")
# A header opens a message: the reply's first (its `<|start|>assistant` is the prompt's end) or one after
# an ended message. So a header written inside the analysis text, before its `<|end|>`, is not a call.
_HARMONY_MESSAGE_START = r"(?:^|<\|end\|><\|start\|>assistant)"


def _harmony_call_shapes(tools: list[dict[str, Any]]) -> tuple[CallShape, ...]:
    """Each tool's call in both header orders, up to its JSON arguments. Not `<|call|>`: it is gpt-oss's
    end-of-generation token, which llama.cpp lets a grammar's text end with only once the grammar is
    complete (it would have to be spelled out in pieces); the engines end the reply with it there."""
    return tuple(
        CallShape(f"{head}{tool['function']['name']}{tail}", tool["function"].get("parameters") or {"type": "object"})
        for tool in tools
        for head, tail in (_HARMONY_CHANNEL_FIRST, _HARMONY_RECIPIENT_FIRST)
    )


def _harmony_triggers(tools: list[dict[str, Any]]) -> tuple[str, ...]:
    return tuple(
        _opening_trigger(_HARMONY_MESSAGE_START, head, [f"{name}{tail}" for name in _tool_names(tools)])
        for head, tail in (_HARMONY_CHANNEL_FIRST, _HARMONY_RECIPIENT_FIRST)
    )


def lazy_tool_constraint(
    fmt: ToolFormat, tools: list[dict[str, Any]], *, parallel: bool, thinking: Literal["no", "maybe", "inside"]
) -> Constraint:
    """The grammar for `tool_choice: auto`: free text until the model starts a call, then only calls to
    `tools` with arguments that match their schemas, one or (`parallel`) more, and then the end.

    `thinking`: whether the reply may open with a `<think>` block ("maybe") or the prompt already
    opened one ("inside"). A call marker written while thinking is not a call, so with thinking the
    grammar waits for a call that opens the reply or follows `</think>`; a call after other text is
    then parsed unconstrained, as without a grammar. gpt-oss (harmony) thinks in a channel of its own:
    its grammar waits for a call header that opens a message. Every engine searches the reply so far
    with the patterns (Python `re`) after each token (engines/lazy_grammar.py); none starts with `.*`,
    which would only make each search slower.

    Llama 3.x and gpt-oss write one call per reply (gpt-oss ends its reply with `<|call|>`), so theirs is
    one call whatever `parallel` says."""
    tools = _grammar_tools(tools)
    if fmt == "harmony":
        return Constraint(kind="tool_calls", calls=_harmony_call_shapes(tools), triggers=_harmony_triggers(tools))
    if fmt == "llama3":
        constraint, _ = tool_constraint(fmt, tools)
        return replace(constraint, triggers=_llama3_triggers(tools, thinking))
    call = f"({_regex_literal(_CALL_MARKERS[fmt])})"
    after_thinking = rf"</think>\s*{call}"
    triggers = {
        "no": (call,),
        "maybe": (rf"^\s*{call}", after_thinking),
        "inside": (after_thinking,),
    }[thinking]
    constraint, _ = tool_constraint(fmt, tools, parallel=parallel)
    return replace(constraint, triggers=triggers)


def tool_constraint(
    fmt: ToolFormat, tools: list[dict[str, Any]], *, parallel: bool = False
) -> tuple[Constraint, ToolFormat]:
    """A grammar constraint forcing exactly one call to one of `tools` (one or more when `parallel`, in
    the families that write several calls in a list or a section, or one after another), and the
    format it produces.

    harmony is constrained in hermes form (its call header names the tool before the JSON).
    """
    tools = _grammar_tools(tools)
    if fmt == "harmony":
        fmt = "hermes"
    if fmt in _TAGGED_READERS:
        shapes = tuple(
            _call_shape(fmt, t["function"]["name"], t["function"].get("parameters") or {"type": "object"})
            for t in tools
        )
        prefix, suffix = _SECTIONS.get(fmt, ("", ""))
        return Constraint(kind="tool_calls", calls=shapes, prefix_text=prefix, suffix_text=suffix, repeat=parallel), fmt
    schemas = [_call_schema(fmt, t["function"]["name"], t["function"].get("parameters")) for t in tools]
    schema = schemas[0] if len(schemas) == 1 else {"anyOf": schemas}
    if fmt == "hermes":
        return Constraint(
            kind="json_schema",
            schema=schema,
            prefix_text="<tool_call>\n",
            suffix_text="\n</tool_call>",
            repeat=parallel,  # each call in its own tags, one after another
        ), fmt
    if fmt == "mistral" or fmt in CALL_LIST_WRAP:
        array = {"type": "array", "items": schema, "minItems": 1, **({} if parallel else {"maxItems": 1})}
        prefix, suffix = CALL_LIST_WRAP.get(fmt, ("[TOOL_CALLS]", ""))
        return Constraint(kind="json_schema", schema=array, prefix_text=prefix, suffix_text=suffix), fmt
    return Constraint(kind="json_schema", schema=schema), fmt
