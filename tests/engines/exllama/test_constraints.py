"""JSON-schema and tool-call constraints: compiled to an llguidance grammar, enforced by each engine's filter.

THESE ENGINES ARE VERIFIED ONLY ON AN NVIDIA GPU (scripts/gpu-check). The grammar side is real
here (llguidance with the tiny model's real tokenizer); the stand-in runtime samples the allowed
token that closes structures soonest.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from launcher.engines.base import Constraint
from launcher.engines.exllama_common._constraints import ConstraintError, grammar_for
from launcher.engines.exllama_common._grammar_matcher import GrammarMatcher, load_ll_tokenizer
from tests.engines.exllama.conftest import LoadFn
from tests.engines.exllama.standin import Runtime
from tests.engines.exllama.support import greedy
from tests.engines.support import run

SCHEMA = {
    "type": "object",
    "properties": {"city": {"type": "string"}, "days": {"type": "integer"}},
    "required": ["city", "days"],
    "additionalProperties": False,
}
TOOL = Constraint(kind="json_schema", schema=SCHEMA, prefix_text="<tool_call>\n", suffix_text="\n</tool_call>")
CHAT = "<|im_start|>user\nWeather for three days?<|im_end|>\n<|im_start|>assistant\n"


def _matcher(directory: Path, constraint: Constraint) -> tuple[GrammarMatcher, object]:
    from tokenizers import Tokenizer

    tokenizer = Tokenizer.from_file(str(directory / "tokenizer.json"))
    eos = (tokenizer.token_to_id("<|im_end|>"),)
    added = {token.content: token_id for token_id, token in tokenizer.get_added_tokens_decoder().items()}
    matcher = GrammarMatcher(
        load_ll_tokenizer(directory, eos), grammar_for(constraint, added), tokenizer.get_vocab_size(), eos
    )
    return matcher, tokenizer


def test_a_tool_call_grammar_accepts_the_wrapped_json_and_then_only_eos(exl3_dir: Path) -> None:
    matcher, tokenizer = _matcher(exl3_dir, TOOL)
    text = '<tool_call>\n{"city": "Paris", "days": 3}\n</tool_call>'
    for token in tokenizer.encode(text, add_special_tokens=False).ids:  # type: ignore[attr-defined]
        allowed, _ending = matcher.allowed()
        assert token in allowed
        matcher.consume(token)
    allowed, ending = matcher.allowed()
    assert allowed == ending == frozenset({tokenizer.token_to_id("<|im_end|>")})  # type: ignore[attr-defined]


def test_a_grammar_rejects_what_the_schema_forbids(exl3_dir: Path) -> None:
    matcher, tokenizer = _matcher(exl3_dir, Constraint(kind="json_schema", schema=SCHEMA))
    for token in tokenizer.encode('{"city": ', add_special_tokens=False).ids:  # type: ignore[attr-defined]
        matcher.consume(token)
    allowed, _ = matcher.allowed()
    digit = tokenizer.token_to_id("3")  # type: ignore[attr-defined]
    assert digit not in allowed  # "city" must be a string
    with pytest.raises(ValueError, match="breaks the grammar"):
        matcher.consume(digit)


def test_regex_and_json_object_constraints_compile() -> None:
    assert grammar_for(Constraint(kind="regex", pattern="[0-9]+/[0-9]+")) == "start: /[0-9]+\\/[0-9]+/\n"
    assert grammar_for(Constraint(kind="json_object")) == 'start: %json {"type": "object"}\n'


def test_invalid_constraints_say_what_is_wrong() -> None:
    with pytest.raises(ConstraintError, match="Invalid type: frob"):
        grammar_for(Constraint(kind="json_schema", schema={"type": "frob"}))
    with pytest.raises(ConstraintError, match="cannot be combined with prefix"):
        grammar_for(Constraint(kind="grammar_gbnf", pattern='root ::= "a"', prefix_text="x"))


@pytest.mark.parametrize("kind", ["exl3", "exl2"])
async def test_a_constrained_request_produces_the_tool_call_and_stops(load: LoadFn, kind: str) -> None:
    runtime = Runtime()
    model = load(kind, runtime=runtime)
    outcome = await run(model, greedy(model.tokenize(CHAT), 200, constraint=TOOL))
    assert outcome.last.finish_reason == "stop"
    assert outcome.text.startswith("<tool_call>\n") and outcome.text.endswith("\n</tool_call>")
    payload = json.loads(outcome.text.removeprefix("<tool_call>\n").removesuffix("\n</tool_call>"))
    assert set(payload) == {"city", "days"} and isinstance(payload["days"], int)
    assert runtime.log.jobs[-1].grammar is not None


async def test_a_bad_schema_is_an_error_event_not_a_crash(load: LoadFn) -> None:
    model = load()
    bad = Constraint(kind="json_schema", schema={"type": "frob"})
    outcome = await run(model, greedy(model.tokenize(CHAT), 20, constraint=bad))
    assert outcome.last.finish_reason == "error" and "Invalid type: frob" in (outcome.last.error or "")
    after = await run(model, greedy(model.tokenize(CHAT), 2))
    assert after.last.finish_reason == "length"
