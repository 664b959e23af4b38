"""Limits on the JSON schemas a request may constrain output to, and JSON Schema `pattern`s as
whole-string regexes.

A grammar compiler spells out every repetition a schema asks for: llama.cpp's converter writes
`minLength: 10**8` as a hundred million `char` items (seconds of CPU, gigabytes of memory, on
the server's event loop), and nesting or thousands of optional properties multiply its work.
`check_schema_bounds` refuses such schemas up front, in time linear in the schema's size, with
a message that names the keyword, where it is and the bound. Every engine checks the same
bounds, so a schema is accepted or refused the same way whichever engine serves it.

JSON Schema `pattern` is unanchored ("a" matches "xay"), while a grammar matches the whole
string: `whole_string_pattern` rewrites a pattern into the equivalent anchored one.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

MAX_REPETITION = 100_000
"""The largest count a schema may ask a string, array or object to repeat to (`minLength`, `maxItems`,
a pattern's `{m,n}`...), for compilers that expand repetitions lazily (llguidance). llama.cpp's
grammars spell every repetition out and pass a tighter bound (see its `_sampling`)."""
MAX_TOTAL_REPETITION = 1_000_000
"""The sum of those counts over the whole schema (each is compiled separately)."""
SPELLED_OUT_REPETITION = 1_000
"""The largest count llama.cpp's grammars accept (they spell every repetition out): the tightest bound
of any engine."""
_MAXIMUM_KEYWORDS = ("maxLength", "maxItems", "maxProperties", "maxContains")
MAX_SCHEMA_DEPTH = 64
"""Subschemas nested inside each other (the compilers recurse through them)."""
MAX_SUBSCHEMAS = 20_000
"""Subschemas in all: properties, anyOf branches, definitions..."""
MAX_PROPERTIES = 1_000
"""Properties of one object schema: optional properties cost a grammar quadratic in their number."""

COUNT_KEYWORDS = (
    "minLength",
    "maxLength",
    "minItems",
    "maxItems",
    "minProperties",
    "maxProperties",
    "minContains",
    "maxContains",
)
_SCHEMA_MAPS = ("properties", "patternProperties", "$defs", "definitions", "dependentSchemas")
_SCHEMA_LISTS = ("anyOf", "allOf", "oneOf", "prefixItems")
_SCHEMA_VALUES = (
    "items",
    "additionalItems",
    "additionalProperties",
    "unevaluatedItems",
    "unevaluatedProperties",
    "propertyNames",
    "contains",
    "not",
    "if",
    "then",
    "else",
)


class SchemaBoundsError(ValueError):
    """The schema asks for a grammar too large to compile; the message names the keyword and bound."""


def check_schema_bounds(
    schema: Any, *, max_repetition: int = MAX_REPETITION, max_total_repetition: int = MAX_TOTAL_REPETITION
) -> None:
    """Raise SchemaBoundsError if compiling `schema` into a grammar could take more than a few
    milliseconds and megabytes: repetition counts, nesting, subschema and property counts."""
    walk = _Walk(max_repetition, max_total_repetition)
    walk.visit(schema, "#", 0)


class _Walk:
    def __init__(self, max_repetition: int, max_total_repetition: int) -> None:
        self.max_repetition = max_repetition
        self.max_total_repetition = max_total_repetition
        self.total_repetition = 0
        self.subschemas = 0

    def visit(self, schema: Any, where: str, depth: int) -> None:
        if not isinstance(schema, dict):
            return  # true/false schemas, or a malformed one the compiler itself reports
        self.subschemas += 1
        if self.subschemas > MAX_SUBSCHEMAS:
            raise SchemaBoundsError(f"the schema has more than {MAX_SUBSCHEMAS} subschemas; simplify it")
        if depth > MAX_SCHEMA_DEPTH:
            raise SchemaBoundsError(
                f"the schema nests subschemas more than {MAX_SCHEMA_DEPTH} deep (at {where}); flatten it"
            )
        for keyword in COUNT_KEYWORDS:
            if keyword in schema:
                self.count(schema[keyword], f"{keyword} at {where}", keyword)
        pattern = schema.get("pattern")
        if isinstance(pattern, str):
            for count in _pattern_counts(pattern):
                self.count(count, f"a repetition count in the pattern at {where}", "pattern")
        properties = schema.get("properties")
        if isinstance(properties, dict) and len(properties) > MAX_PROPERTIES:
            raise SchemaBoundsError(
                f"the object schema at {where} has {len(properties)} properties, more than the "
                f"{MAX_PROPERTIES} structured output allows"
            )
        for key in _SCHEMA_MAPS:
            value = schema.get(key)
            if isinstance(value, dict):
                for name, sub in value.items():
                    self.visit(sub, f"{where}/{key}/{name}", depth + 1)
        for key in _SCHEMA_LISTS:
            value = schema.get(key)
            if isinstance(value, list):
                for index, sub in enumerate(value):
                    self.visit(sub, f"{where}/{key}/{index}", depth + 1)
        for key in _SCHEMA_VALUES:
            value = schema.get(key)
            if isinstance(value, list):  # draft-4 tuple `items`
                for index, sub in enumerate(value):
                    self.visit(sub, f"{where}/{key}/{index}", depth + 1)
            else:
                self.visit(value, f"{where}/{key}", depth + 1)

    def count(self, value: Any, what: str, keyword: str) -> None:
        if isinstance(value, bool) or not isinstance(value, int | float):
            return  # not a number: the compiler reports it
        if value > self.max_repetition:
            shown = value if isinstance(value, int) else f"{value:g}"
            raise SchemaBoundsError(
                f"{what} is {shown}, above the {self.max_repetition} that structured output allows for "
                f"`{keyword}`; lower it"
            )
        self.total_repetition += max(int(value), 0)
        if self.total_repetition > self.max_total_repetition:
            raise SchemaBoundsError(
                f"the schema's length and count limits (minLength, maxItems, pattern repetitions...) add up "
                f"to more than {self.max_total_repetition} (at {what}); lower them"
            )


def _pattern_counts(pattern: str) -> list[int]:
    """The numbers in a regex's `{m}`, `{m,}` and `{m,n}` quantifiers."""
    counts: list[int] = []
    for token in _regex_tokens(pattern):
        if token.startswith("{") and token.endswith("}"):
            for number in token[1:-1].split(","):
                if number.strip().isdigit():
                    counts.append(int(number.strip()))
    return counts


def _regex_tokens(pattern: str) -> list[str]:
    """A regex cut into escapes (`\\d`), character classes (`[^a-z]`), quantifier braces (`{2,3}`)
    and single characters: enough structure to find anchors, alternatives and counts."""
    tokens: list[str] = []
    index = 0
    while index < len(pattern):
        char = pattern[index]
        if char == "\\":
            tokens.append(pattern[index : index + 2])
            index += 2
        elif char == "[":
            end = index + 1
            if end < len(pattern) and pattern[end] == "^":
                end += 1
            if end < len(pattern) and pattern[end] == "]":  # a leading `]` is literal
                end += 1
            while end < len(pattern) and pattern[end] != "]":
                end += 2 if pattern[end] == "\\" else 1
            tokens.append(pattern[index : end + 1])
            index = end + 1
        elif char == "{" and (close := pattern.find("}", index)) != -1:
            tokens.append(pattern[index : close + 1])
            index = close + 1
        else:
            tokens.append(char)
            index += 1
    return tokens


def whole_string_pattern(pattern: str, any_char: str = ".") -> str:
    """The `^...$` regex a whole string must match to contain a match of the JSON Schema `pattern`.

    JSON Schema patterns are unanchored, so `a` becomes `^(any_char*a any_char*)$` (`any_char` is
    what may surround the match; `.` by default). Explicit anchors are kept: `^a` becomes
    `^(a any_char*)$` and `^a$` stays as it is; each top-level alternative is anchored on its own
    (`^a|b$`). `(?:` groups become plain groups (grammars do not capture). Raises SchemaBoundsError
    for `^`/`$` anywhere else (inside a group), which a grammar cannot express.
    """
    tokens = _regex_tokens(pattern)
    alternatives: list[list[str]] = [[]]
    depth = 0
    index = 0
    while index < len(tokens):
        token = tokens[index]
        index += 1
        if token == "(" and tokens[index : index + 2] == ["?", ":"]:
            index += 2  # a non-capturing group: the same group to a grammar
        if token == "(":
            depth += 1
        elif token == ")":
            depth -= 1
        if depth < 0 or (token.startswith("[") and (len(token) < 2 or not token.endswith("]"))):
            raise SchemaBoundsError(f"the pattern {pattern!r} is not a valid regular expression (unbalanced)")
        if token == "|" and depth == 0:
            alternatives.append([])
        else:
            alternatives[-1].append(token)
    if depth:
        raise SchemaBoundsError(f"the pattern {pattern!r} is not a valid regular expression (unbalanced)")
    pieces: list[str] = []
    for alternative in alternatives:
        starts = bool(alternative) and alternative[0] == "^"
        ends = bool(alternative) and alternative[-1] == "$"
        body = alternative[1 if starts else 0 : len(alternative) - 1 if ends else len(alternative)]
        if "^" in body or "$" in body:
            raise SchemaBoundsError(
                f"the pattern {pattern!r} has a ^ or $ anchor inside it; only anchors at the start or end "
                "of the pattern (or of its top-level alternatives) are supported"
            )
        text = "".join(body)
        pieces.append(("" if starts else f"{any_char}*") + text + ("" if ends else f"{any_char}*"))
    if len(pieces) == 1:
        return f"^{pieces[0]}$"
    return "^(" + "|".join(f"({piece})" for piece in pieces) + ")$"


def with_patterns(schema: Any, rewrite: Callable[[str], str]) -> Any:
    """A copy of `schema` with every subschema's `pattern` replaced by `rewrite(pattern)`."""

    def own(sub: dict[str, Any]) -> dict[str, Any]:
        pattern = sub.get("pattern")
        return {**sub, "pattern": rewrite(pattern)} if isinstance(pattern, str) else sub

    return _with_each_subschema(schema, own)


def without_large_maximums(schema: Any, limit: int = SPELLED_OUT_REPETITION) -> Any:
    """A copy of `schema` without the maximum counts above `limit` (`maxLength: 524288`).

    For tool schemas: agents write them to validate calls, not for a grammar (Claude Code's Workflow
    tool allows a 524,288-character script), and the grammar of a call that may be that long is the
    grammar of one without the bound. Refusing it would leave every call of the session unconstrained.
    Minimum counts stay: dropping one would let the grammar write a call the tool refuses."""

    def own(sub: dict[str, Any]) -> dict[str, Any]:
        return {
            key: value
            for key, value in sub.items()
            if not (key in _MAXIMUM_KEYWORDS and isinstance(value, int) and value > limit)
        }

    return _with_each_subschema(schema, own)


def _with_each_subschema(schema: Any, own: Callable[[dict[str, Any]], dict[str, Any]]) -> Any:
    """A copy of `schema` with `own` applied to the keywords of the schema and of each subschema in it."""
    if not isinstance(schema, dict):
        return schema
    out: dict[str, Any] = {}
    for key, value in own(schema).items():
        if key in _SCHEMA_MAPS and isinstance(value, dict):
            out[key] = {name: _with_each_subschema(sub, own) for name, sub in value.items()}
        elif key in _SCHEMA_LISTS + _SCHEMA_VALUES and isinstance(value, list):
            out[key] = [_with_each_subschema(sub, own) for sub in value]
        elif key in _SCHEMA_VALUES:
            out[key] = _with_each_subschema(value, own)
        else:
            out[key] = value
    return out
