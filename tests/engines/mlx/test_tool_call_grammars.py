"""The "tool_calls" constraint as the MLX engine's llguidance grammar, over the tiny MLX model's tokenizer.

The cases are shared with the other engines (tests/engines/tool_call_cases.py): a text is accepted when
llguidance lets a model write exactly its tokens and stop.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import numpy as np
import pytest

from launcher.engines.base import Constraint
from launcher.engines.mlx._sampling import ConstraintError, GrammarCompiler
from launcher.engines.mlx._tokens import TokenizerAccess
from tests.engines.tool_call_cases import FAMILIES, QWEN3_CODER, Family, accepted, refused

Accepts = Callable[[Constraint, str], bool]


@pytest.fixture(scope="module")
def accepts(tiny_mlx_model: Path) -> Accepts:
    from transformers import AutoTokenizer

    hf = AutoTokenizer.from_pretrained(str(tiny_mlx_model))
    tokens = TokenizerAccess(hf)
    compiler = GrammarCompiler(hf, len(hf), [hf.convert_tokens_to_ids("<|im_end|>")])

    def encode(text: str) -> list[int]:
        return tokens.encode(text, add_special=False, parse_special=True)

    def check(constraint: Constraint, text: str) -> bool:
        matcher = compiler.matcher(constraint, encode)
        for token in encode(text):  # each token must be one the mask lets through
            mask = np.frombuffer(matcher.compute_bitmask(), dtype=np.uint8)
            if not np.unpackbits(mask, bitorder="little")[token] or not matcher.consume_token(token):
                return False
        return bool(matcher.is_accepting())

    return check


@pytest.mark.parametrize("family", FAMILIES, ids=lambda f: f.name)
def test_a_familys_well_formed_calls_are_accepted(accepts: Accepts, family: Family) -> None:
    assert [text for text in accepted(family) if not accepts(family.constraint, text)] == []


@pytest.mark.parametrize("family", FAMILIES, ids=lambda f: f.name)
def test_broken_calls_are_refused(accepts: Accepts, family: Family) -> None:
    assert [text for text in refused(family) if accepts(family.constraint, text)] == []


def test_a_close_text_holding_a_special_token_ends_raw_text_at_that_token(accepts: Accepts) -> None:
    # In this tokenizer `</tool_call>` is an added token: raw text cannot hold it, and ends where it comes.
    params = ("<arg_key>{name}</arg_key>\n<arg_value>", "\n</tool_call>\n")
    shape = QWEN3_CODER.constraint.calls[0]
    constraint = Constraint(kind="tool_calls", calls=(type(shape)("<c>", shape.schema, "</c>", params),))
    call = (
        "<c><arg_key>minutes</arg_key>\n<arg_value>5\n</tool_call>\n"
        "<arg_key>sound</arg_key>\n<arg_value>bell\n</tool_call>\n"
    )
    assert accepts(constraint, call + "</c>")
    assert accepts(constraint, call + "<arg_key>note</arg_key>\n<arg_value>a\n</tool_call\n\n</tool_call>\n</c>")
    assert not accepts(constraint, call + "<arg_key>note</arg_key>\n<arg_value>a</tool_call>\n</c>")  # no newline


def test_a_constraint_without_calls_is_refused_with_a_reason(accepts: Accepts) -> None:
    with pytest.raises(ConstraintError, match="at least one call"):
        accepts(Constraint(kind="tool_calls"), "")
