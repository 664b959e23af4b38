"""The strict JSON-prefix check the tool-call look-ahead relies on."""

from __future__ import annotations

import json

import pytest

from launcher.server.core.json_prefix import is_json_prefix

VALUES = [
    {"name": "Bash", "arguments": {"command": 'echo "hi" > a.txt\n', "n": -1.5e3, "ok": True, "x": None}},
    [1, [2, {"a": []}], "é\u00e9\\"],
    {"deep": [[[[{"k": "v"}]]]], "esc": "\u2603 \t"},
]


@pytest.mark.parametrize("value", VALUES)
def test_every_prefix_of_valid_json_is_a_prefix(value: object) -> None:
    text = json.dumps(value, ensure_ascii=False)
    assert all(is_json_prefix(text[:size]) for size in range(len(text) + 1))
    assert is_json_prefix("\n  " + text)


@pytest.mark.parametrize(
    "text",
    [
        '{"name": "f", "arguments": ["ls"] oops',  # garbage after a value inside an object
        '{"a": 1} and then prose',  # anything after the complete value
        "{name: 1}",  # unquoted key
        '{"a" 1',  # missing colon
        '{"a": tru e}',
        '{"a": "\\x"}',  # invalid escape
        '{"a": "\\u12G4"}',
        "[1, 2}",  # mismatched bracket
        "print('hello')",
        "I would call a tool",
    ],
)
def test_text_that_went_wrong_is_not_a_prefix(text: str) -> None:
    assert not is_json_prefix(text)


def test_raw_newlines_in_strings_are_accepted_like_the_call_parser_does() -> None:
    assert is_json_prefix('{"content": "line one\nline two')
