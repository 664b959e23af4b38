"""Tool calls written by the model, parsed per model family, in one piece or while streaming.

Families: hermes/qwen `<tool_call>{"name", "arguments"}</tool_call>`, llama 3.x JSON
`{"name", "parameters"}` (bare at the start of the reply, or after `<|python_tag|>`), mistral
`[TOOL_CALLS][{...}]` (and the newer `[TOOL_CALLS]name[ARGS]{...}`), gpt-oss harmony
`<|channel|>commentary to=functions.NAME ... <|message|>{...}<|call|>`.

The streaming parser emits text as soon as it cannot be the start of a tool call. After a start
marker it holds the text back only while it can still become a call: the body is checked as it
grows (a JSON prefix, or the family's `name[ARGS]`/harmony header), and the moment it cannot be
one the marker and the body are released as text. A model that writes `<tool_call>` and then
prose therefore keeps streaming, instead of going silent until the reply ends.
"""

from __future__ import annotations

import json
import re
import secrets
from dataclasses import dataclass, field, replace
from typing import Any, Literal

from launcher.engines.base import Constraint
from launcher.server.json_prefix import is_json_prefix
from launcher.server.templates import ToolFormat


@dataclass(frozen=True)
class ParsedToolCall:
    """A call the model made: function name and its arguments as a JSON string."""

    name: str
    arguments: str
    id: str = field(default_factory=lambda: "call_" + secrets.token_hex(12))


@dataclass(frozen=True)
class TextPiece:
    """Plain text for the client."""

    text: str


ParserEvent = TextPiece | ParsedToolCall

# start marker -> end marker (None: the call runs to the end of the reply)
_MARKERS: dict[ToolFormat, dict[str, str | None]] = {
    "hermes": {"<tool_call>": "</tool_call>"},
    "llama3": {"<|python_tag|>": None},
    "mistral": {"[TOOL_CALLS]": None},
    "harmony": {"<|channel|>commentary to=functions.": "<|call|>"},
}


# Small models put raw newlines inside JSON strings (code in a Write call); read them anyway.
_DECODER = json.JSONDecoder(strict=False)


def _arguments_json(value: Any) -> str:
    if isinstance(value, str):
        try:
            value = _DECODER.decode(value)
        except json.JSONDecodeError:
            return str(value)
    return json.dumps(value if value is not None else {}, ensure_ascii=False)


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
        args = item.get("arguments", item.get("parameters", {}))
        calls.append(ParsedToolCall(name=name, arguments=_arguments_json(args)))
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


_MISTRAL_NAME = re.compile(r"\s*[\w.\-]+")
_HARMONY_NAME = re.compile(r"[\w.\-]+")
_HARMONY_HEADER_MAX = 160  # `NAME <|constrain|>json` before <|message|>: a few dozen characters


def _body_state(fmt: ToolFormat, body: str, end: str | None) -> tuple[BodyState, int]:
    """Can `body` (the text after a start marker, without its end marker) still become a call?

    Also where the complete calls end, for "calls_then_text" (JSON bodies only; 0 otherwise).
    """
    if fmt == "harmony":
        head, marker, args = body.partition("<|message|>")
        if not marker:
            fits = len(head) <= _HARMONY_HEADER_MAX and (not head or _HARMONY_NAME.match(head))
            return ("possible" if fits else "impossible"), 0
        args = args.lstrip()
        if not args or (end is not None and end.startswith(args)):
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


def parse_call_body(fmt: ToolFormat, body: str) -> list[ParsedToolCall] | None:
    """Calls inside one tool-call region (after the start marker), or None if it does not parse."""
    if fmt == "harmony":
        match = re.match(r"\s*([\w.\-]+)(.*?)<\|message\|>(.*)$", body, re.S)
        if not match:
            return None
        return [ParsedToolCall(name=match.group(1), arguments=_arguments_json(match.group(3).strip()))]
    if fmt == "mistral" and "[ARGS]" in body:
        calls = []
        for part in body.split("[TOOL_CALLS]"):
            name, _, args = part.partition("[ARGS]")
            if not name.strip():
                return None
            calls.append(ParsedToolCall(name=name.strip(), arguments=_arguments_json(args.strip())))
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


def parse_tool_calls(fmt: ToolFormat, text: str) -> tuple[str, list[ParsedToolCall]]:
    """Split a whole reply into text content and tool calls."""
    parser = StreamingToolParser(fmt)
    events = parser.feed(text) + parser.finish()
    content = "".join(e.text for e in events if isinstance(e, TextPiece))
    return content, [e for e in events if isinstance(e, ParsedToolCall)]


class StreamingToolParser:
    """Turns streamed model text into text pieces and complete tool calls."""

    def __init__(self, fmt: ToolFormat) -> None:
        self.fmt = fmt
        self.markers = _MARKERS[fmt]
        self.buffer = ""
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
                    if _body_state(self.fmt, body, None)[0] != "impossible":
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
                    self.left_as_text += 1
                    if not self._bare_json:
                        events.append(TextPiece(next(iter(self.markers))))
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
                self.in_call, self.in_call_end = True, self.markers[marker]
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
        return _body_state(self.fmt, self.buffer, self.in_call_end)

    def _close_call(self, body: str, end: str | None) -> list[ParserEvent]:
        calls = parse_call_body(self.fmt, body)
        if calls is not None:
            return list(calls)
        # Not a call after all: give the client the text the model wrote.
        self.left_as_text += 1
        if self._bare_json:
            return [TextPiece(body)]
        start = next(iter(self.markers))
        return [TextPiece(start + body + (end or ""))]

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


def _call_schema(fmt: ToolFormat, name: str, parameters: dict[str, Any] | None) -> dict[str, Any]:
    args_key = "parameters" if fmt == "llama3" else "arguments"
    return {
        "type": "object",
        "properties": {"name": {"const": name}, args_key: parameters or {"type": "object"}},
        "required": ["name", args_key],
    }


_CALL_MARKERS: dict[ToolFormat, str] = {"hermes": "<tool_call>", "mistral": "[TOOL_CALLS]"}
"""The text that starts a call, for the formats whose calls have one (llama3's bare JSON and harmony's
channels have none a lazy grammar can wait for: their calls are parsed, not constrained)."""


def _regex_literal(text: str) -> str:
    """`text` as an ECMAScript (std::regex) literal."""
    return re.sub(r"([.^$|?*+()\[\]{}\\])", r"\\\1", text)


def lazy_tool_constraint(
    fmt: ToolFormat, tools: list[dict[str, Any]], *, parallel: bool, thinking: Literal["no", "maybe", "inside"]
) -> Constraint | None:
    """The grammar for `tool_choice: auto`: free text until the model starts a call, then only calls to
    `tools` with arguments that match their schemas, one or (`parallel`) more, and then the end.

    `thinking`: whether the reply may open with a `<think>` block ("maybe") or the prompt already
    opened one ("inside"). A call marker written while thinking is not a call, so with thinking the
    grammar waits for a call that opens the reply or follows `</think>`; a call after other text is
    then parsed unconstrained, as without a grammar. (No pattern scans the whole reply with `.*`:
    llama.cpp matches them with std::regex, whose backtracking recurses once per character and can
    overflow the stack on a long reply.) None for formats without a call marker."""
    marker = _CALL_MARKERS.get(fmt)
    if marker is None:
        return None
    call = f"({_regex_literal(marker)})"
    after_thinking = rf"</think>\s*{call}"
    triggers = {
        "no": (call,),
        "maybe": (rf"^\s*{call}", after_thinking),
        "inside": (after_thinking,),
    }[thinking]
    constraint, _ = tool_constraint(fmt, tools, parallel=parallel)
    return replace(constraint, triggers=triggers, repeat=parallel and fmt == "hermes")


def tool_constraint(
    fmt: ToolFormat, tools: list[dict[str, Any]], *, parallel: bool = False
) -> tuple[Constraint, ToolFormat]:
    """A grammar constraint forcing exactly one call to one of `tools` (one or more in mistral's array
    when `parallel`), and the format it produces.

    harmony is constrained in hermes form (its call header names the tool before the JSON).
    """
    if fmt == "harmony":
        fmt = "hermes"
    schemas = [_call_schema(fmt, t["function"]["name"], t["function"].get("parameters")) for t in tools]
    schema = schemas[0] if len(schemas) == 1 else {"anyOf": schemas}
    if fmt == "hermes":
        return Constraint(
            kind="json_schema", schema=schema, prefix_text="<tool_call>\n", suffix_text="\n</tool_call>"
        ), fmt
    if fmt == "mistral":
        array = {"type": "array", "items": schema, "minItems": 1, **({} if parallel else {"maxItems": 1})}
        return Constraint(kind="json_schema", schema=array, prefix_text="[TOOL_CALLS]"), fmt
    return Constraint(kind="json_schema", schema=schema), fmt
