"""Is this text the beginning of one JSON value? A strict, incremental-friendly check.

The tool-call parser holds back what a model writes after a call marker only while it can still
become a call; this tells it the moment the text stops being JSON. Partial-JSON parsers made for
display (jiter's partial mode and the like) accept trailing garbage, which is exactly what must
be caught here. Raw control characters inside strings are allowed because small models write
them (a newline in code) and the call parser reads strings leniently too.
"""

from __future__ import annotations

_WHITESPACE = " \t\r\n"
_ESCAPES = '"\\/bfnrtu'
_HEX = "0123456789abcdefABCDEF"
_NUMBER_CHARS = "+-.eE0123456789"
_LITERALS = ("true", "false", "null")


def _string_end(text: str, start: int) -> int | None:
    """Index after the string opening at `start`; len(text) if it is unfinished; None if invalid."""
    index = start + 1
    while index < len(text):
        char = text[index]
        if char == '"':
            return index + 1
        if char == "\\":
            if index + 1 >= len(text):
                return len(text)
            escape = text[index + 1]
            if escape not in _ESCAPES:
                return None
            if escape == "u":
                digits = text[index + 2 : index + 6]
                if any(d not in _HEX for d in digits):
                    return None
                index += 6
                continue
            index += 2
            continue
        index += 1
    return len(text)


def _scalar_end(text: str, start: int) -> int | None:
    """Index after a number or literal at `start` (len(text) if it may still go on); None if invalid."""
    char = text[start]
    if char in "-0123456789":
        index = start
        while index < len(text) and text[index] in _NUMBER_CHARS:
            index += 1
        return index
    for literal in _LITERALS:
        piece = text[start : start + len(literal)]
        if literal.startswith(piece):
            return start + len(piece)
    return None


def is_json_prefix(text: str) -> bool:
    """True when `text` (leading whitespace allowed) is the start of a single JSON value, or all of it."""
    stack: list[str] = []  # open containers: "{" or "["
    expect = "value"  # value | value_or_close | key | key_or_close | colon | after
    index = 0
    while index < len(text):
        char = text[index]
        if char in _WHITESPACE:
            index += 1
            continue
        if expect in ("value", "value_or_close"):
            if char == "]" and expect == "value_or_close":
                stack.pop()
                expect, index = "after", index + 1
            elif char in "{[":
                stack.append(char)
                expect, index = ("key_or_close" if char == "{" else "value_or_close"), index + 1
            else:
                end = _string_end(text, index) if char == '"' else _scalar_end(text, index)
                if end is None:
                    return False
                expect, index = "after", end
        elif expect in ("key", "key_or_close"):
            if char == "}" and expect == "key_or_close":
                stack.pop()
                expect, index = "after", index + 1
            elif char == '"':
                end = _string_end(text, index)
                if end is None:
                    return False
                expect, index = "colon", end
            else:
                return False
        elif expect == "colon":
            if char != ":":
                return False
            expect, index = "value", index + 1
        else:  # after a value
            if not stack:
                return False  # the value is complete; anything more is not part of it
            if char == ",":
                expect = "key" if stack[-1] == "{" else "value"
            elif (char == "}" and stack[-1] == "{") or (char == "]" and stack[-1] == "["):
                stack.pop()
            else:
                return False
            index += 1
    return True
