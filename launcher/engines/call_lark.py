"""A "tool_calls" `Constraint` as an llguidance Lark grammar, for the engines that enforce one (MLX and
both ExLlamas); each passes how it writes literal text and JSON values.

    start: "<tool_call>\\n" calls "</tool_call>"
    calls: call (SEPARATOR? call)*                          # one call unless `repeat`
    call: call_0 | call_1
    call_0: "<function=set_timer>\\n" param_0_0 param_0_1? "</function>\\n"
    param_0_0: "<parameter=minutes>\\n" value_0_0 "\\n</parameter>\\n"
    value_0_0: %json {"type": "integer"}
    param_0_1: "<parameter=note>\\n" RAW_0                  # raw text, then the close text

Raw text may not contain the close text: llguidance's lexemes can say so with its `&` (and) and `~`
(not) operators, so raw text and its close text are one lexeme, "anything ending in the close text
whose only close text is at its end". Where the close text holds a special token (`</arg_value>` in
some GLM tokenizers), raw text cannot contain it anyway (a lexeme never matches a special token):
the lexeme is then the text up to it.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

from launcher.engines.base import CallShape, Constraint
from launcher.engines.call_shapes import Param, call_params

Literal = Callable[[str], list[str]]
"""Lark items for literal text: quoted strings, and token references for the special tokens in it."""
JsonValue = Callable[[Any], str]
"""A rule body for one JSON value matching a schema (`%json {...}`)."""

_SEPARATOR = "SEPARATOR: /[ \\t\\n]+/"
_ANY_TEXT = "/(?s:.*)/"


class CallGrammarError(ValueError):
    """The constraint has no grammar (no call shapes, raw text with no close text)."""


def tool_calls_lark(constraint: Constraint, literal: Literal, json_value: JsonValue) -> str:
    """The Lark text (rule `start`) for a "tool_calls" constraint (see `Constraint`, `CallShape`)."""
    if not constraint.calls:
        raise CallGrammarError("a tool_calls constraint needs at least one call shape")
    grammar = _Grammar(literal, json_value)
    calls = [grammar.call(index, shape) for index, shape in enumerate(constraint.calls)]
    grammar.rule("call", " | ".join(calls))
    if constraint.repeat:
        grammar.rule("calls", "call (SEPARATOR? call)*")
        grammar.lines.append(_SEPARATOR)
    else:
        grammar.rule("calls", "call")
    grammar.rule("start", _sequence(*literal(constraint.prefix_text), "calls", *literal(constraint.suffix_text)))
    return "\n".join(reversed(grammar.lines)) + "\n"


def repeated(once: str, repeat: bool) -> str:
    """Lark rules whose `start` is `once` (a rule body), or with `repeat` one or more of it separated by
    optional whitespace (`Constraint.repeat`: parallel tool calls, each in its own tags)."""
    if not repeat:
        return f"start: {once}\n"
    return f"start: once (SEPARATOR? once)*\nonce: {once}\n{_SEPARATOR}\n"


def _sequence(*items: str) -> str:
    return " ".join(item for item in items if item) or '""'


class _Grammar:
    def __init__(self, literal: Literal, json_value: JsonValue) -> None:
        self._literal = literal
        self._json_value = json_value
        self.lines: list[str] = []  # written last to first: `start` ends up on top
        self._raw_text: dict[str, str] = {}  # close text -> the rule for raw text followed by it

    def rule(self, name: str, body: str) -> str:
        self.lines.append(f"{name}: {body}")
        return name

    def call(self, index: int, shape: CallShape) -> str:
        if shape.params is None:
            arguments = [self.rule(f"args_{index}", self._json_value(shape.schema))]
        else:
            arguments = [self._param(param, f"{index}_{n}") for n, param in enumerate(call_params(shape))]
        prefix, suffix = self._literal(shape.prefix_text), self._literal(shape.suffix_text)
        return self.rule(f"call_{index}", _sequence(*prefix, *arguments, *suffix))

    def _param(self, param: Param, suffix: str) -> str:
        close = self._literal(param.close)
        if param.raw and param.choices is not None:
            choices = " | ".join(json.dumps(choice, ensure_ascii=False) for choice in param.choices)
            value = [f"({choices})" if choices else "", *close]
        elif param.raw:
            value = self._raw_text_then(param.close, close)
        else:
            value = [self.rule(f"value_{suffix}", self._json_value(param.schema)), *close]
        name = self.rule(f"param_{suffix}", _sequence(*self._literal(param.open), *value))
        return name if param.required else f"{name}?"

    def _raw_text_then(self, close_text: str, close: list[str]) -> list[str]:
        """Items for raw text that does not contain the close text, then the close text."""
        if not close:
            raise CallGrammarError("call parameters written as raw text need a closing text after the value")
        head_count = next((i for i, item in enumerate(close) if not item.startswith('"')), len(close))
        if close_text not in self._raw_text:
            lexeme = f"RAW_{len(self._raw_text)}"
            self.lines.append(f"{lexeme}: {' '.join([_ANY_TEXT, *close[:head_count]])}")
            if head_count == len(close):  # plain text: the value ends at the first close text
                self._raw_text[close_text] = self.rule(f"{lexeme.lower()}[lazy]", lexeme).removesuffix("[lazy]")
            else:
                self._raw_text[close_text] = lexeme
        return [self._raw_text[close_text], *close[head_count:]]
