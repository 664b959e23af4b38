"""`Constraint` -> an llguidance Lark grammar, which both ExLlama engines enforce while sampling.

ExLlamaV3 ships `LLGuidanceFilter(tokenizer, lark_grammar=...)` (exllamav3/generator/filter/
llguidance.py); for ExLlamaV2, `exllamav2/_filter.py` wraps the same grammar in an ExLlamaV2Filter.
A Lark grammar lets the JSON be wrapped in literal text (`prefix_text`/`suffix_text`, e.g.
`<tool_call>` ... `</tool_call>`): `start: "<tool_call>" %json {...} "</tool_call>"`.
See llguidance docs/syntax.md for `%json` and `/regex/` terminals.
"""

from __future__ import annotations

import json

from launcher.engines.base import Constraint


class ConstraintError(ValueError):
    """The constraint cannot be compiled; the message says what to change."""


def _literal(text: str) -> str:
    # JSON string escapes are valid Lark string escapes; keep non-ASCII as is.
    return json.dumps(text, ensure_ascii=False)


def _body(constraint: Constraint) -> str:
    if constraint.kind == "json_schema":
        if not isinstance(constraint.schema, dict):
            raise ConstraintError("json_schema constraint without a schema object")
        return "%json " + json.dumps(constraint.schema, ensure_ascii=False)
    if constraint.kind == "json_object":
        return '%json {"type": "object"}'
    if constraint.kind == "regex":
        if not constraint.pattern:
            raise ConstraintError("regex constraint without a pattern")
        return "/" + constraint.pattern.replace("/", "\\/") + "/"
    raise ConstraintError(f"constraint kind {constraint.kind!r} is not supported by the ExLlama engines")


def grammar_for(constraint: Constraint) -> str:
    """The Lark grammar text (llguidance dialect) the output must match, prefix and suffix included.

    GBNF grammars are converted by llguidance itself (they cannot be wrapped in prefix/suffix text).
    Raises ConstraintError when the grammar is invalid.
    """
    import llguidance

    if constraint.kind == "grammar_gbnf":
        if constraint.prefix_text or constraint.suffix_text:
            raise ConstraintError("a GBNF grammar cannot be combined with prefix or suffix text")
        if not constraint.pattern:
            raise ConstraintError("grammar_gbnf constraint without a grammar (pattern)")
        lark = llguidance.gbnf_to_lark.gbnf_to_lark(constraint.pattern)
    else:
        parts = [_literal(constraint.prefix_text)] if constraint.prefix_text else []
        parts.append(_body(constraint))
        if constraint.suffix_text:
            parts.append(_literal(constraint.suffix_text))
        lark = "start: " + " ".join(parts) + "\n"
    problem = llguidance.LLMatcher.validate_grammar(llguidance.grammar_from("lark", lark))
    if problem:
        raise ConstraintError(f"invalid {constraint.kind} constraint: {problem}")
    return lark
