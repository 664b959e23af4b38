"""Lazy grammars' trigger watch (launcher/engines/lazy_grammar.py): where, in the tokens generated so far,
the grammar takes over, as llama.cpp's lazy grammars decide it."""

from __future__ import annotations

import pytest

from launcher.engines.lazy_grammar import Handover, TriggerWatch

VOCABULARY = {1: b"Let", 2: b" me", 3: b" call", 4: b"<tool_call>", 5: b"\n{", 6: b"x[TOOL", 7: b"_CALLS]", 8: b"[{"}
VOCABULARY |= {9: "é".encode()[:1], 10: "é".encode()[1:] + b"<", 11: b"</think>", 12: b"  "}


def watch(triggers: tuple[str, ...], tokens: list[int]) -> tuple[int, Handover] | None:
    """After which token (its index) the grammar takes over, and the handover; None if it never does."""
    watcher = TriggerWatch(triggers, VOCABULARY.__getitem__)
    for index, token in enumerate(tokens):
        handover = watcher.add(token)
        if handover is not None:
            return index, handover
    return None


def test_a_trigger_at_a_token_boundary_hands_over_from_that_token() -> None:
    assert watch((r"(<tool_call>)",), [1, 2, 3, 4, 5]) == (3, Handover(b"", (4,)))


def test_a_match_starting_inside_a_token_hands_over_the_rest_of_its_text() -> None:
    # "x[TOOL" + "_CALLS]": the grammar starts at "[", inside the first of the two tokens.
    assert watch((r"(\[TOOL_CALLS\])",), [1, 6, 7, 8]) == (2, Handover(b"[TOOL", (7,)))


def test_the_first_group_marks_the_start_and_without_one_the_whole_match() -> None:
    assert watch((r"</think>\s*(<tool_call>)",), [11, 12, 4]) == (2, Handover(b"", (4,)))
    assert watch((r"</think>\s*<tool_call>",), [11, 12, 4]) == (2, Handover(b"", (11, 12, 4)))


def test_an_anchored_trigger_only_matches_at_the_start_of_the_output() -> None:
    assert watch((r"^\s*(<tool_call>)",), [12, 4]) == (1, Handover(b"", (4,)))
    assert watch((r"^\s*(<tool_call>)",), [1, 4, 4]) is None


def test_a_character_split_across_tokens_is_searched_whole() -> None:
    assert watch((r"é(<)",), [9, 10]) == (1, Handover(b"<", ()))


def test_triggers_matching_at_once_are_tried_in_order() -> None:
    assert watch((r"(ll)", r"( ca)"), [1, 2, 3]) == (2, Handover(b"ll", ()))


def test_a_bad_pattern_is_refused_when_the_watch_is_made() -> None:
    import re

    with pytest.raises(re.error):
        TriggerWatch(("(unclosed",), VOCABULARY.__getitem__)
