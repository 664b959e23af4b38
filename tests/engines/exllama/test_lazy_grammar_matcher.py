"""Lazy grammars for the ExLlama engines (`LazyGrammarMatcher`), driven token by token as ExLlamaV2
drives its filters: begin(""), then next() before each sample (the allowed tokens, or (None, None) for
no constraint) and feed(token) after it. Real llguidance over the tiny model's real tokenizer; no GPU.

The texts are what a model might write; a step's answer says what the sampler would have let through.
"""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest

from launcher.engines.base import Constraint
from launcher.engines.exllama_common._constraints import grammar_for
from launcher.engines.exllama_common._grammar_matcher import GrammarMatcher, LazyGrammarMatcher, load_ll_tokenizer
from launcher.engines.exllamav2._filter import llguidance_filter_class
from launcher.server.core.toolcalls import lazy_tool_constraint
from tests.engines.exllama.standin import Runtime

TIMER = {
    "type": "function",
    "function": {
        "name": "set_timer",
        "parameters": {
            "type": "object",
            "properties": {"minutes": {"type": "integer"}, "sound": {"enum": ["bell", "chime"]}},
            "required": ["minutes", "sound"],
        },
    },
}
HERMES = lazy_tool_constraint("hermes", [TIMER], parallel=False, thinking="no")
CALL = '<tool_call>\n{"name": "set_timer", "arguments": {"minutes": 5, "sound": "bell"}}\n</tool_call>'
SOUND = {"type": "object", "properties": {"sound": {"enum": ["bell", "chime"]}}, "required": ["sound"]}

Step = tuple[int, set[int] | None]  # the token written, and what next() allowed before it (None: anything)


class Tiny:
    """The tiny model's tokenizer, and V2 filters over it for a lazy constraint."""

    def __init__(self, directory: Path) -> None:
        from tokenizers import Tokenizer

        self.tokenizer = Tokenizer.from_file(str(directory / "tokenizer.json"))
        self.eos = self.tokenizer.token_to_id("<|im_end|>")
        self.added = {t.content: i for i, t in self.tokenizer.get_added_tokens_decoder().items()}
        self.table = load_ll_tokenizer(directory, (self.eos,))
        self.filter_class = llguidance_filter_class(Runtime().v2_filters.ExLlamaV2Filter)

    def tokens(self, text: str) -> list[int]:
        return list(self.tokenizer.encode(text, add_special_tokens=False).ids)

    def piece(self, piece: str) -> int:
        """A token by its vocabulary entry (byte-level: "Ġ" is a space)."""
        return int(self.tokenizer.token_to_id(piece))

    def lazy_filter(self, constraint: Constraint) -> Any:
        matcher = GrammarMatcher(
            self.table, grammar_for(constraint, self.added), self.tokenizer.get_vocab_size(), (self.eos,)
        )
        lazy = LazyGrammarMatcher(matcher, constraint.triggers)
        v2_filter = self.filter_class(model=None, tokenizer=None, matcher=lazy)
        v2_filter.begin("")
        return v2_filter

    def drive(self, v2_filter: Any, text: str) -> list[Step]:
        """Write `text` through the filter while it allows each token; the steps written."""
        steps: list[Step] = []
        for token in self.tokens(text):
            passed, _ending = v2_filter.next()
            steps.append((token, passed))
            if passed is not None and token not in passed:
                break  # the sampler could not have written this token
            v2_filter.feed(token)
        return steps


@pytest.fixture(scope="module")
def tiny(exl3_dir: Path) -> Tiny:
    return Tiny(exl3_dir)


def free_until(steps: list[Step]) -> int:
    """How many steps in a row, from the first, were unconstrained."""
    return next((i for i, (_, passed) in enumerate(steps) if passed is not None), len(steps))


def test_a_call_marker_mid_reply_hands_the_rest_of_the_reply_to_the_grammar(tiny: Tiny) -> None:
    assert HERMES is not None
    v2_filter = tiny.lazy_filter(HERMES)
    prose = "Sure. Let me set that timer: "
    steps = tiny.drive(v2_filter, prose + CALL)

    assert free_until(steps) == len(tiny.tokens(prose)) + 1  # the prose and the marker itself were free
    assert all(passed is not None and token in passed for token, passed in steps[free_until(steps) :])
    assert len(steps) == len(tiny.tokens(prose + CALL))  # the whole call was allowed
    assert v2_filter.next() == ({tiny.eos}, {tiny.eos})  # and after it, only the end of the reply


def test_after_the_marker_a_value_of_the_wrong_type_is_refused(tiny: Tiny) -> None:
    assert HERMES is not None
    v2_filter = tiny.lazy_filter(HERMES)
    opening = 'Okay <tool_call>\n{"name": "set_timer", "arguments": {"minutes": '
    tiny.drive(v2_filter, opening)
    passed, _ = v2_filter.next()
    assert tiny.piece("5") in passed
    assert tiny.piece('"') not in passed and tiny.piece('Ġ"') not in passed  # minutes is an integer

    steps = tiny.drive(tiny.lazy_filter(HERMES), 'Okay <tool_call>\n{"name": "stop_timer"')
    refused_at = len(steps) - 1
    assert steps[refused_at][1] is not None and steps[refused_at][0] not in steps[refused_at][1]
    assert refused_at < len(tiny.tokens('Okay <tool_call>\n{"name": "stop_timer"')) - 1  # not a tool of the request


def test_a_trigger_inside_a_token_constrains_from_the_middle_of_that_token(tiny: Tiny) -> None:
    # ' {"' is one token here: the trigger matches its "{", so the grammar has already read `{"`.
    constraint = Constraint(kind="json_schema", schema=SOUND, triggers=(r"(\{)",))
    assert tiny.tokens('The {"sound"')[1] == tiny.piece('Ġ{"')

    good = tiny.drive(tiny.lazy_filter(constraint), 'The {"sound": "bell"}')
    assert free_until(good) == 2
    assert len(good) == len(tiny.tokens('The {"sound": "bell"}'))
    assert all(token in passed for token, passed in good[2:] if passed is not None)

    v2_filter = tiny.lazy_filter(constraint)
    tiny.drive(v2_filter, 'The {"')
    passed, _ = v2_filter.next()
    assert tiny.piece("s") in passed and tiny.piece('"') not in passed  # inside the key "sound", not a new `"`


def test_without_a_trigger_nothing_is_ever_constrained(tiny: Tiny) -> None:
    assert HERMES is not None
    v2_filter = tiny.lazy_filter(HERMES)
    text = 'I would call set_timer with {"minutes": 5} but the tool_call tag is missing. 0123456789'
    steps = tiny.drive(v2_filter, text)
    assert len(steps) == len(tiny.tokens(text)) and free_until(steps) == len(steps)
    assert v2_filter.next() == (None, None)


def test_a_trigger_whose_match_already_breaks_the_grammar_leaves_the_reply_free(tiny: Tiny) -> None:
    # The match runs one character past the marker, and that character is not the "\n" the call needs.
    assert HERMES is not None
    constraint = replace(HERMES, triggers=(r"(<tool_call>).",))
    steps = tiny.drive(tiny.lazy_filter(constraint), "<tool_call>x then more text {}")
    assert free_until(steps) == len(steps) == len(tiny.tokens("<tool_call>x then more text {}"))


def test_begin_starts_over_waiting_for_the_trigger(tiny: Tiny) -> None:
    assert HERMES is not None
    v2_filter = tiny.lazy_filter(HERMES)
    tiny.drive(v2_filter, "<tool_call>")
    assert v2_filter.next()[0] is not None
    v2_filter.begin("")
    assert v2_filter.next() == (None, None)
