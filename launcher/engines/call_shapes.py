"""What a `CallShape`'s arguments are made of, read the same way by every engine's grammar compiler.

A call shape with `params` writes its arguments one property at a time (Qwen3-Coder's
`<parameter=NAME>\\nVALUE\\n</parameter>\\n`, GLM's `<arg_key>NAME</arg_key>\\n<arg_value>VALUE</arg_value>\\n`):
each property of the tool's schema, in the schema's order, optional ones skippable. A value that may
be a string is written as the raw text (what the family's parsers take up to the closing tag), any
other as JSON; llama.cpp's own parsers for these families read values the same way. Pure Python: the
llama.cpp (GBNF) and llguidance (Lark) compilers both build on it, and a reply parser may too.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from launcher.engines.base import CallShape

_DEFINITIONS = ("$defs", "definitions")


@dataclass(frozen=True)
class Param:
    """One property as a call writes it: `open` + value + `close`."""

    name: str
    schema: Any  # the property's schema, with the tool schema's definitions so that its `$ref`s resolve
    required: bool
    open: str
    close: str
    raw: bool  # the value is raw text, not JSON
    choices: tuple[str, ...] | None  # raw text that must be one of these (a string enum or const)


def call_params(shape: CallShape) -> list[Param]:
    """The properties of a call shape with `params`, in the order a call writes them (empty without)."""
    if shape.params is None:
        return []
    open_text, close = shape.params
    schema = shape.schema if isinstance(shape.schema, dict) else {}
    properties = schema.get("properties")
    if not isinstance(properties, dict):
        return []
    required = set(schema.get("required") or ())
    definitions = {key: schema[key] for key in _DEFINITIONS if key in schema}
    params = []
    for name, sub in properties.items():
        with_definitions = {**definitions, **sub} if isinstance(sub, dict) and definitions else sub
        raw = is_raw_text(sub)
        params.append(
            Param(
                name=name,
                schema=with_definitions,
                required=name in required,
                open=open_text.replace("{name}", name),
                close=close,
                raw=raw,
                choices=raw_choices(sub) if raw else None,
            )
        )
    return params


def is_raw_text(schema: Any) -> bool:
    """Whether a property with this schema is written as raw text: whenever its value may be a string
    (a string type, a string among its enum or const values, no type at all, or a string branch)."""
    if not isinstance(schema, dict):
        return schema is not False
    if "const" in schema:
        return isinstance(schema["const"], str)
    if isinstance(schema.get("enum"), list):
        return any(isinstance(value, str) for value in schema["enum"])
    kinds = schema.get("type")
    if kinds is None:
        branches = [sub for key in ("anyOf", "oneOf") for sub in schema.get(key) or ()]
        return not branches or any(is_raw_text(sub) for sub in branches)
    return kinds == "string" or (isinstance(kinds, list) and "string" in kinds)


def raw_choices(schema: Any) -> tuple[str, ...] | None:
    """The texts a raw value must be one of (its string enum or const values); None: any text."""
    if not isinstance(schema, dict):
        return None
    if isinstance(schema.get("const"), str):
        return (schema["const"],)
    if isinstance(schema.get("enum"), list):
        return tuple(value for value in schema["enum"] if isinstance(value, str))
    return None
