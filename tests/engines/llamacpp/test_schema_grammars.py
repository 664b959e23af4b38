"""JSON schemas as llama.cpp grammars: unanchored patterns, and schemas too large to compile.

Acceptance is checked by llama.cpp's own grammar sampler over the tiny GGUF's vocabulary: a text
is accepted when each of its tokens passes the grammar in turn and the grammar may end after it.
"""

from __future__ import annotations

import time
from typing import Any

import pytest

from launcher.engines.base import Constraint
from launcher.engines.llamacpp._sampling import (
    MAX_REPETITION,
    MAX_TOTAL_REPETITION,
    ConstraintError,
    compile_constraint,
)
from launcher.engines.llamacpp.model import LlamaCppModel
from tests.engines.llamacpp.support import GrammarProbe
from tests.engines.support import greedy, run


def string_grammar(pattern: str) -> str:
    return compile_constraint(Constraint(kind="json_schema", schema={"type": "string", "pattern": pattern}))


@pytest.mark.parametrize(
    ("pattern", "accepted", "refused"),
    [
        ("a", ['"a"', '"xay"', '"ab"', '"ba"'], ['"xy"', '""']),
        ("^a$", ['"a"'], ['"xay"', '"ab"', '"ba"']),
        ("^a", ['"a"', '"ab"'], ['"ba"', '"xay"']),
        ("a$", ['"a"', '"ba"'], ['"ab"', '"xay"']),
        ("^a|b$", ['"a"', '"ax"', '"xb"'], ['"xa"', '"bx"']),
        ("(?:ab)+", ['"ab"', '"xababy"'], ['"ba"']),
    ],
)
def test_a_json_schema_pattern_matches_anywhere_in_the_string_unless_anchored(
    probe: GrammarProbe, pattern: str, accepted: list[str], refused: list[str]
) -> None:
    grammar = string_grammar(pattern)
    assert [text for text in accepted if not probe.accepts(grammar, text)] == []
    assert [text for text in refused if probe.accepts(grammar, text)] == []


def test_the_text_around_an_unanchored_match_stays_valid_json(probe: GrammarProbe) -> None:
    grammar = string_grammar("a")
    assert not probe.accepts(grammar, '"x"a"')  # a bare quote would end the string early
    assert not probe.accepts(grammar, '"a\nb"')  # control characters must be escaped in JSON


def test_an_anchor_inside_a_group_is_refused_with_a_reason() -> None:
    with pytest.raises(ConstraintError, match=r"anchor inside it"):
        string_grammar("(^a)")


@pytest.mark.parametrize("pattern", ["((((", "a)", "[ab"])
def test_an_unbalanced_pattern_is_refused(pattern: str) -> None:
    with pytest.raises(ConstraintError, match=r"not a valid regular expression"):
        string_grammar(pattern)


HUGE = [
    ({"type": "string", "minLength": 10**8, "maxLength": 10**8}, "minLength at # is 100000000"),
    ({"type": "string", "minLength": 10**7, "maxLength": 10**7}, "minLength at # is 10000000"),
    ({"type": "array", "items": {"type": "integer"}, "maxItems": 10**8}, "maxItems at # is 100000000"),
    (
        {"type": "object", "properties": {"a": {"type": "string", "pattern": "^x{100000000}$"}}},
        "pattern at #/properties/a",
    ),
]


@pytest.mark.parametrize(("schema", "named"), HUGE, ids=["minLength-1e8", "minLength-1e7", "maxItems", "pattern"])
def test_a_schema_asking_for_a_huge_grammar_is_refused_at_once(schema: dict[str, Any], named: str) -> None:
    started = time.monotonic()
    with pytest.raises(ConstraintError) as caught:
        compile_constraint(Constraint(kind="json_schema", schema=schema))
    assert time.monotonic() - started < 1.0  # was 6.7 s (10**8) and 0.7 s (10**7) before llama.cpp's own parse
    assert named in str(caught.value) and f"above the {MAX_REPETITION}" in str(caught.value)


def test_repetition_counts_add_up_against_one_budget() -> None:
    count = MAX_TOTAL_REPETITION // MAX_REPETITION + 1
    many = {f"p{i}": {"type": "string", "maxLength": MAX_REPETITION} for i in range(count)}
    with pytest.raises(ConstraintError, match=f"add up to more than {MAX_TOTAL_REPETITION}"):
        compile_constraint(Constraint(kind="json_schema", schema={"type": "object", "properties": many}))


TOO_MANY = MAX_REPETITION + 1


@pytest.mark.parametrize(
    ("schema", "within", "past"),
    [
        ({"type": "string", "minLength": 3, "maxLength": MAX_REPETITION}, '"abc"', '"' + "a" * TOO_MANY + '"'),
        (
            {"type": "array", "items": {"type": "integer"}, "minItems": 1, "maxItems": MAX_REPETITION},
            "[1, 2]",
            "[" + ", ".join(["1"] * TOO_MANY) + "]",
        ),
        ({"type": "string", "pattern": f"^[a-c]{{3,{MAX_REPETITION}}}$"}, '"abc"', '"' + "a" * TOO_MANY + '"'),
    ],
    ids=["maxLength", "maxItems", "pattern"],
)
def test_a_schema_at_the_bounds_compiles_fast_and_llama_cpp_parses_it(
    probe: GrammarProbe, schema: dict[str, Any], within: str, past: str
) -> None:
    started = time.monotonic()
    grammar = compile_constraint(Constraint(kind="json_schema", schema=schema))
    assert probe.accepts(grammar, within) and not probe.accepts(grammar, past)
    assert time.monotonic() - started < 5.0  # milliseconds on an idle core; generous for a loaded machine


def test_a_compiled_schema_is_reused() -> None:
    constraint = Constraint(kind="json_schema", schema={"type": "object", "properties": {"q": {"type": "string"}}})
    assert compile_constraint(constraint) is compile_constraint(constraint)


async def test_the_engine_refuses_a_huge_schema_as_a_client_error(
    tiny_model: LlamaCppModel, text_prompt: list[int]
) -> None:
    huge = Constraint(kind="json_schema", schema=HUGE[0][0])
    outcome = await run(tiny_model, greedy(text_prompt, 4, constraint=huge))
    assert outcome.last.finish_reason == "error" and outcome.last.request_error
    assert "minLength" in (outcome.last.error or "")


async def test_the_server_compiles_a_schema_on_a_worker_thread(
    tiny_model: LlamaCppModel, text_prompt: list[int], monkeypatch: pytest.MonkeyPatch
) -> None:
    """The event loop serves every other stream and /health: the schema's grammar is built off it."""
    import threading

    import launcher.engines.llamacpp.model as engine_model
    from launcher.server.core.generation import GenerationSettings, start_generation
    from launcher.server.metrics import ServerMetrics

    compiled_on: list[int] = []

    def recording(constraint: Constraint) -> str:
        compiled_on.append(threading.get_ident())
        return compile_constraint(constraint)

    monkeypatch.setattr(engine_model, "compile_constraint", recording)
    schema = {"type": "object", "properties": {"only_in_this_test": {"type": "integer"}}, "required": []}
    settings = GenerationSettings(max_tokens=4, constraint=Constraint(kind="json_schema", schema=schema))
    metrics = ServerMetrics().for_model("tiny", tiny_model.stats)
    generation = await start_generation(tiny_model, metrics, text_prompt, settings)
    async for _ in generation:
        pass
    assert compiled_on and compiled_on[0] != threading.get_ident()
