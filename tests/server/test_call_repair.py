"""Tool-call JSON with a certain fix is repaired; JSON that would need a guess is left alone."""

from __future__ import annotations

import json

import pytest

from launcher.server.call_repair import repaired_json
from launcher.server.json_prefix import is_json_prefix


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
