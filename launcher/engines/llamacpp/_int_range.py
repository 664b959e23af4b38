"""An integer's `minimum`/`maximum` as a GBNF rule: the schema converter that ships with llama-cpp-python
leaves them out (llama.cpp's C++ converter has them), so a tool argument bounded 1-90 could come out
as 3333333333333333. MLX and ExLlama (llguidance) enforce them already.

A range of decimal numbers is cut into blocks that share a prefix, then one digit within a span, then
any digits: 17-342 is 1[7-9] | [2-9][0-9] | [1-2][0-9][0-9] | 3[0-3][0-9] | 34[0-2]. Unbounded sides
stop at 16 digits, as the converter's own integers do.
"""

from __future__ import annotations

import math
from typing import Any

MAX_DIGITS = 16  # the converter's integral-part: [0-9] | [1-9] [0-9]{0,15}
_LARGEST = 10**MAX_DIGITS - 1


def integer_bounds(schema: dict[str, Any]) -> tuple[int | None, int | None] | None:
    """(lowest, highest) integer the schema allows (None: unbounded on that side); None when the schema
    is no integer with bounds. Fractional and exclusive bounds are turned into the integers they allow."""
    if schema.get("type") != "integer":
        return None
    low = high = None
    bound_keys = ("minimum", "exclusiveMinimum", "maximum", "exclusiveMaximum")
    values = {key: schema[key] for key in bound_keys if isinstance(schema.get(key), (int, float))}
    values = {key: value for key, value in values.items() if not isinstance(value, bool)}
    if not values:
        return None
    if "minimum" in values:
        low = math.ceil(values["minimum"])
    if "exclusiveMinimum" in values:
        low = max(low if low is not None else -_LARGEST, math.floor(values["exclusiveMinimum"]) + 1)
    if "maximum" in values:
        high = math.floor(values["maximum"])
    if "exclusiveMaximum" in values:
        high = min(high if high is not None else _LARGEST, math.ceil(values["exclusiveMaximum"]) - 1)
    return low, high


def _blocks(low: int, high: int) -> list[tuple[str, str, str, int]]:
    """[low, high] (0 <= low <= high) as blocks (prefix, first digit, last digit, free digits after)."""
    blocks = []
    for digits in range(len(str(low)), len(str(high)) + 1):
        start = max(low, 10 ** (digits - 1) if digits > 1 else 0)
        stop = min(high, 10**digits - 1)
        while start <= stop:
            free = 0  # how many trailing digits may be anything (the first digit is never free)
            while free + 1 < digits and start % 10 ** (free + 1) == 0 and start + 10 ** (free + 1) - 1 <= stop:
                free += 1
            step = 10**free
            span = 1  # how many values the digit before them takes
            while (start // step) % 10 + span <= 9 and start + (span + 1) * step - 1 <= stop:
                span += 1
            end = start + span * step - 1
            text, last = str(start), str(end)
            position = len(text) - free - 1
            blocks.append((text[:position], text[position], last[position], free))
            start = end + 1
    return blocks


def _block_gbnf(prefix: str, first: str, last: str, free: int) -> str:
    if first == last:
        prefix, middle = prefix + first, []
    else:
        middle = [f"[{first}-{last}]"]
    parts = [f'"{prefix}"'] if prefix else []
    return " ".join([*parts, *middle, *["[0-9]"] * free])


def _naturals_gbnf(low: int, high: int | None) -> list[str]:
    """Alternatives for the integers in [low, high] (high None: up to MAX_DIGITS digits), low >= 0."""
    finite = high if high is not None else 10 ** len(str(low)) - 1
    alternatives = [_block_gbnf(*block) for block in _blocks(low, min(finite, _LARGEST))]
    if high is None and len(str(low)) < MAX_DIGITS:  # every longer number
        longest = MAX_DIGITS - 1
        alternatives.append(f"[1-9] [0-9]{{{len(str(low))},{longest}}}")
    return alternatives


def integer_range_gbnf(low: int | None, high: int | None) -> str:
    """A GBNF expression for the integers in [low, high] (either side may be None: unbounded).
    Raises ValueError when no integer is in the range."""
    alternatives: list[str] = []
    if high is None or high >= 0:  # the non-negative part
        alternatives += _naturals_gbnf(max(low or 0, 0), high)
    if low is None or low < 0:  # the negative part, as "-" and its magnitude
        smallest = 1 if high is None or high >= 0 else -high
        largest = None if low is None else -low
        if largest is None or smallest <= largest:
            alternatives += [f'"-" {body}' for body in _naturals_gbnf(smallest, largest)]
    if not alternatives:
        raise ValueError(f"no integer is at least {low} and at most {high}")
    return "(" + " | ".join(alternatives) + ")"
