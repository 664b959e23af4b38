"""Tool-call JSON that a model almost wrote right, repaired where the fix is certain.

Small models slip in a few ways that leave no doubt about what they meant: a comma before a closing
bracket, Python's quotes and constants (`{'path': 'a.py', 'all': True}`: the model wrote a dict
repr). Those are fixed. What would need a guess is not: a missing bracket (was the call cut short,
or did the model forget?), keys without quotes, comments. Such a call reaches the client as text.

`repaired_json` also works on a prefix of a value (a call still streaming), so the streaming parser
can tell early whether a body can still become a call once repaired.
"""

from __future__ import annotations

import re

_PYTHON_CONSTANTS = {"True": "true", "False": "false", "None": "null"}
_VALUE_STARTS = ":[,"
_TRAILING_COMMA = re.compile(r",\s*[}\]]")  # after these (or at the start), a bare word is a value


def _constant_at(text: str, index: int) -> tuple[str, str] | None:
    """(Python constant written at `index`, its JSON spelling), also for a constant the text stops
    inside; None when the word there is not one."""
    for python, spelled in _PYTHON_CONSTANTS.items():
        word = text[index : index + len(python)]
        after = text[index + len(python) : index + len(python) + 1]
        if word == python and not (after.isalnum() or after == "_"):
            return python, spelled
        if index + len(word) == len(text) and word and python.startswith(word):
            return word, spelled[: len(word)]
    return None


def repaired_json(text: str) -> str | None:
    """`text` with trailing commas dropped, single-quoted strings double-quoted and Python's
    True/False/None spelled as JSON; None when none of that was there to fix."""
    out: list[str] = []
    changed = False
    quote = ""  # the open string's quote character, "" outside strings
    last = ""  # the last character written outside strings but whitespace
    index = 0
    while index < len(text):
        char = text[index]
        if quote:
            if char == "\\" and index + 1 < len(text):
                escaped = text[index + 1]
                if quote == "'" and escaped == "'":
                    out.append("'")  # \' is not a JSON escape
                    changed = True
                else:
                    out.append(char + escaped)
                index += 2
                continue
            if char == quote:
                out.append('"')
                quote, last = "", '"'
            elif char == '"':  # a double quote inside a single-quoted string
                out.append('\\"')
                changed = True
            else:
                out.append(char)
            index += 1
            continue
        if char in "\"'":
            quote = char
            changed = changed or char == "'"
            out.append('"')
            index += 1
            continue
        if char == "," and _TRAILING_COMMA.match(text, index):
            changed = True
            index += 1
            continue
        if char.isalpha() and last in ("", *_VALUE_STARTS):
            found = _constant_at(text, index)
            if found is not None:
                python, spelled = found
                out.append(spelled)
                changed, last = True, spelled[-1]
                index += len(python)
                continue
        out.append(char)
        if not char.isspace():
            last = char
        index += 1
    return "".join(out) if changed else None
