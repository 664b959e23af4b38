"""An integer's minimum and maximum hold in llama.cpp's grammar (the converter that ships with
llama-cpp-python leaves them out): checked with llama.cpp's own grammar sampler, number by number."""

from __future__ import annotations

from typing import Any

import pytest

from launcher.engines.base import Constraint
from launcher.engines.llamacpp._sampling import ConstraintError, compile_constraint
from tests.engines.llamacpp.support import GrammarProbe

RANGES: list[dict[str, Any]] = [
    {"minimum": 1, "maximum": 90},
    {"minimum": 17, "maximum": 342},
    {"minimum": -5},
    {"maximum": -3},
    {"minimum": -120, "maximum": 7},
    {"exclusiveMinimum": 0, "exclusiveMaximum": 10},
    {"minimum": 0.5, "maximum": 9.5},  # fractional bounds: the integers between them
]
NUMBERS = [*range(-130, 130), 342, 343, 999, 1000, 123456789]


def _allowed(bounds: dict[str, Any], number: int) -> bool:
    low = bounds.get("minimum", bounds.get("exclusiveMinimum", float("-inf")))
    high = bounds.get("maximum", bounds.get("exclusiveMaximum", float("inf")))
    exclusive = "exclusiveMinimum" in bounds
    return (number > low if exclusive else number >= low) and (
        number < high if "exclusiveMaximum" in bounds else number <= high
    )


@pytest.mark.parametrize("bounds", RANGES, ids=lambda b: ",".join(f"{k}={v}" for k, v in b.items()))
def test_the_grammar_writes_exactly_the_integers_in_range(probe: GrammarProbe, bounds: dict[str, Any]) -> None:
    grammar = compile_constraint(Constraint(kind="json_schema", schema={"type": "integer", **bounds}))
    wrong = [n for n in NUMBERS if probe.accepts(grammar, str(n)) != _allowed(bounds, n)]
    assert wrong == []
    assert not probe.accepts(grammar, "007") and not probe.accepts(grammar, "1.5")


def test_bounds_no_integer_meets_are_refused_with_the_reason() -> None:
    with pytest.raises(ConstraintError, match="no integer"):
        compile_constraint(Constraint(kind="json_schema", schema={"type": "integer", "minimum": 5, "maximum": 4}))
