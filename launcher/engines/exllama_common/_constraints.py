"""`Constraint` -> an llguidance Lark grammar, which both ExLlama engines enforce while sampling.

ExLlamaV3 ships `LLGuidanceFilter(tokenizer, lark_grammar=...)` (exllamav3/generator/filter/
llguidance.py); for ExLlamaV2, `exllamav2/_filter.py` wraps the same grammar in an ExLlamaV2Filter.
A Lark grammar lets the JSON be wrapped in literal text (`prefix_text`/`suffix_text`, e.g.
`<tool_call>` ... `</tool_call>`): `start: "<tool_call>" %json {...} "</tool_call>"`.
See llguidance docs/syntax.md for `%json` and `/regex/` terminals. A lazy constraint's triggers
(`checked_triggers`) travel beside the grammar to the engines' lazy filters (_grammar_matcher.py).
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from typing import Any

from launcher.engines._schema_bounds import SchemaBoundsError, check_schema_bounds
from launcher.engines.base import Constraint
from launcher.engines.call_lark import CallGrammarError, repeated, tool_calls_lark


class ConstraintError(ValueError):
    """The constraint cannot be compiled; the message says what to change."""


def _literal(text: str, special_tokens: Mapping[str, int]) -> list[str]:
    """Lark items for literal text; added tokens in it (`<tool_call>`) become token references.

    llguidance treats a tokenizer's added tokens as special: their text cannot be matched by a
    string literal, only by a reference, which is also what a model emits (one token, not the
    letters). References are by id (`<[480]>`): llguidance knows only some by name (`<tool_call>`
    but not `[TOOL_CALLS]`).
    """
    if not text:
        return []
    names = sorted((t for t in special_tokens if t and t in text), key=len, reverse=True)
    if not names:
        return [json.dumps(text, ensure_ascii=False)]  # JSON escapes are valid Lark escapes
    parts = re.split("(" + "|".join(map(re.escape, names)) + ")", text)
    return [f"<[{special_tokens[p]}]>" if p in names else json.dumps(p, ensure_ascii=False) for p in parts if p]


def _json_value(schema: Any) -> str:
    try:
        check_schema_bounds(schema)
    except SchemaBoundsError as err:
        raise ConstraintError(str(err)) from None
    return "%json " + json.dumps(schema if isinstance(schema, dict) else {}, ensure_ascii=False)


def _body(constraint: Constraint) -> str:
    if constraint.kind == "json_schema":
        if not isinstance(constraint.schema, dict):
            raise ConstraintError("json_schema constraint without a schema object")
        return _json_value(constraint.schema)
    if constraint.kind == "json_object":
        return '%json {"type": "object"}'
    if constraint.kind == "regex":
        if not constraint.pattern:
            raise ConstraintError("regex constraint without a pattern")
        return "/" + constraint.pattern.replace("/", "\\/") + "/"
    raise ConstraintError(f"constraint kind {constraint.kind!r} is not supported by the ExLlama engines")


def checked_triggers(constraint: Constraint) -> tuple[str, ...]:
    """A lazy constraint's triggers, each a valid Python regular expression (lazy_grammar searches with `re`)."""
    for trigger in constraint.triggers:
        try:
            re.compile(trigger)
        except re.error as err:  # the server's own patterns: a bug, said plainly
            raise ConstraintError(f"a lazy constraint's trigger {trigger!r} is not a valid pattern: {err}") from None
    return tuple(constraint.triggers)


def grammar_for(constraint: Constraint, special_tokens: Mapping[str, int] | None = None) -> str:
    """The Lark grammar text (llguidance dialect) the output must match, prefix and suffix included.

    `special_tokens`: the tokenizer's added tokens, text -> id (see `_literal`). GBNF grammars are
    converted by llguidance itself (they cannot be wrapped in prefix/suffix text).
    Raises ConstraintError when the grammar is invalid.
    """
    import llguidance

    added = dict(special_tokens or {})
    if constraint.kind == "grammar_gbnf":
        if constraint.prefix_text or constraint.suffix_text:
            raise ConstraintError("a GBNF grammar cannot be combined with prefix or suffix text")
        if not constraint.pattern:
            raise ConstraintError("grammar_gbnf constraint without a grammar (pattern)")
        lark = llguidance.gbnf_to_lark.gbnf_to_lark(constraint.pattern)
    elif constraint.kind == "tool_calls":
        try:
            lark = tool_calls_lark(constraint, lambda text: _literal(text, added), _json_value)
        except CallGrammarError as err:
            raise ConstraintError(f"invalid tool_calls constraint: {err}") from None
    else:
        parts = [
            *_literal(constraint.prefix_text, added),
            _body(constraint),
            *_literal(constraint.suffix_text, added),
        ]
        lark = repeated(" ".join(parts), constraint.repeat)
    problem = llguidance.LLMatcher.validate_grammar(llguidance.grammar_from("lark", lark))
    if problem:
        raise ConstraintError(f"invalid {constraint.kind} constraint: {problem}")
    return lark
