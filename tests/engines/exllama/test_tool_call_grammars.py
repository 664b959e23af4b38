"""The "tool_calls" constraint as the ExLlama engines' llguidance grammar (the same Lark as MLX's, with
ExLlama's literal text), over the tiny model's real tokenizer. No GPU needed: this is the grammar side.

The cases are shared with the other engines (tests/engines/tool_call_cases.py).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace
from pathlib import Path

import pytest

from launcher.engines.base import Constraint
from launcher.engines.exllama_common._constraints import ConstraintError, grammar_for
from launcher.engines.exllama_common._grammar_matcher import GrammarMatcher, load_ll_tokenizer
from tests.engines.tool_call_cases import FAMILIES, Family, accepted, refused

Accepts = Callable[[Constraint, str], bool]


@pytest.fixture(scope="module")
def accepts(exl3_dir: Path) -> Accepts:
    from tokenizers import Tokenizer

    tokenizer = Tokenizer.from_file(str(exl3_dir / "tokenizer.json"))
    eos = (tokenizer.token_to_id("<|im_end|>"),)
    added = {token.content: token_id for token_id, token in tokenizer.get_added_tokens_decoder().items()}
    table = load_ll_tokenizer(exl3_dir, eos)

    def check(constraint: Constraint, text: str) -> bool:
        matcher = GrammarMatcher(table, grammar_for(constraint, added), tokenizer.get_vocab_size(), eos)
        for token in tokenizer.encode(text, add_special_tokens=False).ids:
            if token not in matcher.allowed()[0]:
                return False
            matcher.consume(token)
        return bool(matcher.allowed()[1])  # the output may end here

    return check


@pytest.mark.parametrize("family", FAMILIES, ids=lambda f: f.name)
def test_a_familys_well_formed_calls_are_accepted(accepts: Accepts, family: Family) -> None:
    assert [text for text in accepted(family) if not accepts(family.constraint, text)] == []


@pytest.mark.parametrize("family", FAMILIES, ids=lambda f: f.name)
def test_broken_calls_are_refused(accepts: Accepts, family: Family) -> None:
    assert [text for text in refused(family) if accepts(family.constraint, text)] == []


def test_a_control_token_in_the_literal_text_is_referenced_by_id() -> None:
    # llguidance knows `<|im_end|>` by name but not `[TOOL_CALLS]`: ids work for both.
    constraint = Constraint(kind="json_object", prefix_text="[TOOL_CALLS]", suffix_text="<|im_end|>")
    lark = grammar_for(constraint, {"[TOOL_CALLS]": 5, "<|im_end|>": 2})
    assert lark == 'start: <[5]> %json {"type": "object"} <[2]>\n'


def test_a_constraint_without_calls_is_refused_with_a_reason() -> None:
    with pytest.raises(ConstraintError, match="at least one call"):
        grammar_for(Constraint(kind="tool_calls"))


def test_a_repeated_constraint_takes_each_part_in_its_own_tags(accepts: Accepts) -> None:
    parallel = Constraint(kind="json_object", prefix_text="<tool_call>", suffix_text="</tool_call>", repeat=True)
    assert accepts(parallel, '<tool_call>{"a": 1}</tool_call>\n<tool_call>{}</tool_call>')
    assert not accepts(parallel, '<tool_call>{"a": 1}{}</tool_call>')
    assert not accepts(replace(parallel, repeat=False), "<tool_call>{}</tool_call><tool_call>{}</tool_call>")
