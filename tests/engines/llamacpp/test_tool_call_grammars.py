"""The "tool_calls" constraint as a llama.cpp grammar: each family's calls, as its parsers read them.

Acceptance is checked by llama.cpp's own grammar sampler over the tiny GGUF's vocabulary (the cases
are shared with the other engines: tests/engines/tool_call_cases.py); then a real generation.
"""

from __future__ import annotations

import pytest

from launcher.engines.base import CallShape, Constraint, GenerationRequest, SamplingParams
from launcher.engines.llamacpp._sampling import compile_constraint
from launcher.engines.llamacpp.model import LlamaCppModel
from tests.engines.llamacpp.support import GrammarProbe
from tests.engines.support import run
from tests.engines.tool_call_cases import (
    FAMILIES,
    QWEN3_CODER,
    Family,
    accepted,
    lazy_single_call,
    read_qwen3_coder,
    refused,
    timer_arguments_are_valid,
)


@pytest.mark.parametrize("family", FAMILIES, ids=lambda f: f.name)
def test_a_familys_well_formed_calls_are_accepted(probe: GrammarProbe, family: Family) -> None:
    grammar = compile_constraint(family.constraint)
    assert [text for text in accepted(family) if not probe.accepts(grammar, text)] == []


@pytest.mark.parametrize("family", FAMILIES, ids=lambda f: f.name)
def test_broken_calls_are_refused(probe: GrammarProbe, family: Family) -> None:
    grammar = compile_constraint(family.constraint)
    assert [text for text in refused(family) if probe.accepts(grammar, text)] == []


def test_without_repeat_one_call_is_the_whole_reply(probe: GrammarProbe) -> None:
    single = Constraint(kind="tool_calls", calls=QWEN3_CODER.constraint.calls)
    grammar = compile_constraint(single)
    timer = QWEN3_CODER.call("set_timer", minutes="5", sound="bell")
    assert probe.accepts(grammar, timer)
    assert not probe.accepts(grammar, timer + "\n" + timer)


@pytest.mark.parametrize(
    "close", ["\n</parameter>\n", "aab", "abab", "</x>", "\n\n"], ids=["qwen", "aab", "abab", "short", "newlines"]
)
def test_raw_text_ends_at_the_first_close_text_whatever_it_repeats(probe: GrammarProbe, close: str) -> None:
    # The close text's own overlaps are where a hand-built "no close text inside" rule goes wrong.
    shape = CallShape(
        "<c>", {"type": "object", "properties": {"v": {"type": "string"}}, "required": ["v"]}, "", ("", close)
    )
    grammar = compile_constraint(Constraint(kind="tool_calls", calls=(shape,)))
    pieces = ["", "a", "b", "x", "\n", "<", "/", close[:-1], close[1:], close[: len(close) // 2]]
    for first in pieces:
        for second in pieces:
            value = first + second
            text = "<c>" + value + close
            assert probe.accepts(grammar, text) == (text.find(close, 3) == 3 + len(value)), repr(text)


async def test_a_generated_call_is_a_call_the_parser_reads(tiny_model: LlamaCppModel, text_prompt: list[int]) -> None:
    # Lazy, as the server asks on tool_choice auto: `<tool_call>` made the likeliest token, the random
    # model's call after it is held to the shape (an integer, one of the enum's values).
    constraint = lazy_single_call(QWEN3_CODER, r"(<tool_call>)")
    marker = tiny_model.tokenize("<tool_call>")
    assert len(marker) == 1
    sampling = SamplingParams(temperature=0.0, logit_bias={marker[0]: 30.0})
    request = GenerationRequest(text_prompt, 200, sampling=sampling, speculative="off", constraint=constraint)
    outcome = await run(tiny_model, request)
    assert outcome.last.finish_reason == "stop", outcome.text
    calls = read_qwen3_coder(outcome.text)
    assert calls is not None and len(calls) == 1, outcome.text
    name, arguments = calls[0]
    assert (name == "set_timer" and timer_arguments_are_valid(arguments)) or (name, arguments) == ("stop_timer", {})
