"""Per-request sampling on llama.cpp's sampler chain, grammar compilation, and logprobs.

Each running sequence owns one `RequestSampler` (penalties and grammar keep per-sequence state),
which reads the logits of that sequence's row in the shared batch.
"""

from __future__ import annotations

import ctypes
import functools
import json
import math
import time
from collections.abc import Callable, Collection, Iterable
from types import ModuleType
from typing import Any

import numpy as np
import numpy.typing as npt

from launcher.engines._schema_bounds import (
    SPELLED_OUT_REPETITION,
    SchemaBoundsError,
    check_schema_bounds,
    whole_string_pattern,
    with_patterns,
)
from launcher.engines.base import CallShape, Constraint, SamplingParams, TokenLogprob
from launcher.engines.call_shapes import Param, call_params
from launcher.engines.llamacpp._int_range import integer_bounds, integer_range_gbnf

GRAMMAR_ROOT = "launcher-root"
_PENALTY_WINDOW = 64  # tokens the repeat/presence/frequency penalties look back over
# llama.cpp's grammars spell out every repetition a schema asks for, and an optional one (up to
# `maxLength`) as a nested group: its parser refuses ~1,500 levels and overflows its stack (the
# server crashes) at ~20,000. Below this bound a schema compiles in milliseconds.
MAX_REPETITION = SPELLED_OUT_REPETITION
MAX_TOTAL_REPETITION = 20_000
# What a grammar compiled from a schema may come to. The schema bounds keep real schemas far below
# these; they catch what multiplies past them (a definition inlined by many `allOf`s, say), and
# llama.cpp's own parser then spends ~15 ms per MB of grammar.
MAX_GRAMMAR_CHARS = 2_000_000
MAX_COMPILE_S = 1.0
# What may surround a match of an unanchored `pattern` inside a JSON string: plain characters
# that need no escape (the converter writes pattern characters into the JSON text as they are).
_JSON_PLAIN_CHAR = r'[^"\\\x00-\x1F\x7F]'


class ConstraintError(ValueError):
    """The request's constraint cannot be turned into a grammar; the message says why."""


def _gbnf_literal(text: str) -> str:
    escaped = text.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n").replace("\r", "\\r")
    return '"' + escaped.replace("\t", "\\t") + '"'


def _gbnf_char(char: str) -> str:
    """One character inside a GBNF character class (escaped unless a letter or digit)."""
    if char.isascii() and char.isalnum():
        return char
    code = ord(char)
    return f"\\x{code:02X}" if code < 0x100 else f"\\u{code:04X}" if code < 0x10000 else f"\\U{code:08X}"


def compile_constraint(constraint: Constraint) -> str:
    """GBNF text whose rule `launcher-root` generates prefix_text + the constrained part + suffix_text.

    Schemas are checked against `_schema_bounds` first and compiled under a size and time budget,
    so no request can make this take more than milliseconds; results are cached per schema text
    (agents send the same tools with every turn), refusals too: tools whose grammar is over budget
    must not cost that budget again on every turn of an agent's session.
    """
    # Key order matters: the converter writes properties in the schema's order.
    schema_text = json.dumps(constraint.schema) if constraint.schema is not None else None
    calls = tuple((c.prefix_text, json.dumps(c.schema), c.suffix_text, c.params) for c in constraint.calls)
    outcome = _compile_outcome(
        constraint.kind,
        schema_text,
        constraint.pattern,
        constraint.prefix_text,
        constraint.suffix_text,
        constraint.repeat,
        calls,
    )
    if isinstance(outcome, ConstraintError):
        raise ConstraintError(*outcome.args)
    return outcome


CallKey = tuple[tuple[str, str, str, tuple[str, str] | None], ...]
"""A constraint's call shapes as a cache key: prefix text, schema as JSON text, suffix text, params."""


@functools.lru_cache(maxsize=64)
def _compile_outcome(
    kind: str,
    schema_text: str | None,
    pattern: str | None,
    prefix_text: str,
    suffix_text: str,
    repeat: bool,
    calls: CallKey = (),
) -> str | ConstraintError:
    try:
        return _compile(kind, schema_text, pattern, prefix_text, suffix_text, repeat, calls)
    except ConstraintError as err:
        return err


def _compile(
    kind: str,
    schema_text: str | None,
    pattern: str | None,
    prefix_text: str,
    suffix_text: str,
    repeat: bool,
    calls: CallKey = (),
) -> str:
    from llama_cpp import llama_grammar

    if kind == "tool_calls":
        shapes = [CallShape(prefix, json.loads(schema), suffix, params) for prefix, schema, suffix, params in calls]
        return _tool_calls_gbnf(shapes, prefix_text, suffix_text, repeat)
    if kind == "json_schema":
        if schema_text is None:
            raise ConstraintError("a json_schema constraint needs a schema")
        body = _schema_to_gbnf(json.loads(schema_text))
    elif kind == "json_object":
        body = llama_grammar.json_schema_to_gbnf(json.dumps({"type": "object"}))
    elif kind == "grammar_gbnf":
        if not pattern:
            raise ConstraintError("a grammar_gbnf constraint needs the grammar text in `pattern`")
        body = pattern
    elif kind == "regex":
        if not pattern:
            raise ConstraintError("a regex constraint needs a pattern")
        try:
            check_schema_bounds({"pattern": pattern}, max_repetition=MAX_REPETITION)
            converter = llama_grammar.SchemaConverter(  # type: ignore[no-untyped-call]
                prop_order={}, allow_fetch=False, dotall=False, raw_pattern=True
            )
            anchored = ("" if pattern.startswith("^") else "^") + pattern + ("" if pattern.endswith("$") else "$")
            converter.visit({"type": "string", "pattern": anchored}, "")  # type: ignore[no-untyped-call]
            body = converter.format_grammar()  # type: ignore[no-untyped-call]
        except Exception as err:
            raise ConstraintError(f"unsupported regex: {err}") from None
    else:
        raise ConstraintError(f"unknown constraint kind {kind!r}")
    parts = [_gbnf_literal(prefix_text)] if prefix_text else []
    parts.append("root")
    if suffix_text:
        parts.append(_gbnf_literal(suffix_text))
    if repeat:
        once = f"{GRAMMAR_ROOT}-once"
        return f"{body}\n{once} ::= {' '.join(parts)}\n{GRAMMAR_ROOT} ::= {once} ([ \\t\\n]* {once})*\n"
    return f"{body}\n{GRAMMAR_ROOT} ::= {' '.join(parts)}\n"


def _schema_to_gbnf(schema: Any) -> str:
    """llama.cpp's own JSON-schema converter, within the bounds, with JSON Schema's unanchored patterns."""
    converter = _new_converter()
    converter.add(_bounded(schema), "", "stdin")
    return converter.grammar()


def _bounded(schema: Any) -> Any:
    """`schema` checked against the bounds, its patterns anchored as a grammar needs them."""
    try:
        check_schema_bounds(schema, max_repetition=MAX_REPETITION, max_total_repetition=MAX_TOTAL_REPETITION)
        return with_patterns(schema, lambda pattern: whole_string_pattern(pattern, _JSON_PLAIN_CHAR))
    except SchemaBoundsError as err:
        raise ConstraintError(str(err)) from None


def _new_converter() -> _BudgetedConverter:
    from llama_cpp import llama_grammar

    return _BudgetedConverter(
        llama_grammar.SchemaConverter, deadline=time.monotonic() + MAX_COMPILE_S, max_chars=MAX_GRAMMAR_CHARS
    )


def _tool_calls_gbnf(shapes: list[CallShape], prefix_text: str, suffix_text: str, repeat: bool) -> str:
    """GBNF for a "tool_calls" constraint: prefix text, one call (with `repeat`, one or more separated by
    whitespace) written as one of the `shapes`, suffix text. All schemas share one converter, and so
    its rules (`space`, `string`...) and its size and time budget."""
    if not shapes:
        raise ConstraintError("a tool_calls constraint needs at least one call shape")
    grammar = _CallGrammar(_new_converter())
    calls = [grammar.call(index, shape) for index, shape in enumerate(shapes)]
    call = grammar.rule(f"{GRAMMAR_ROOT}-call", " | ".join(calls))
    body = f"{call} ([ \\t\\n]* {call})*" if repeat else call
    grammar.rule(GRAMMAR_ROOT, _sequence(_literal_or_empty(prefix_text), body, _literal_or_empty(suffix_text)))
    return grammar.text()


def _literal_or_empty(text: str) -> str:
    return _gbnf_literal(text) if text else ""


def _sequence(*items: str) -> str:
    return " ".join(item for item in items if item)


class _CallGrammar:
    """The rules of a tool_calls grammar: the converter's for JSON values, and ours, `launcher-root-*`."""

    def __init__(self, converter: _BudgetedConverter) -> None:
        self._converter = converter
        self._rules: dict[str, str] = {}
        self._raw_text: dict[str, str] = {}  # close text -> the rule for raw text followed by it

    def rule(self, name: str, body: str) -> str:
        self._converter.charge(len(name) + len(body))
        self._rules[name] = body
        return name

    def text(self) -> str:
        ours = "\n".join(f"{name} ::= {body}" for name, body in self._rules.items())
        return f"{self._converter.grammar()}\n{ours}\n"

    def call(self, index: int, shape: CallShape) -> str:
        """The rule for one call shape: its prefix text, its arguments, its suffix text."""
        name = f"{GRAMMAR_ROOT}-call{index}"
        if shape.params is None:
            arguments = self._converter.add(_bounded(shape.schema), f"call{index}-args", f"call{index}")
        else:
            _bounded(shape.schema)  # its properties' schemas are within the bounds if the tool's is
            params = call_params(shape)
            arguments = _sequence(*(self._param(param, f"{name}-p{n}") for n, param in enumerate(params)))
        prefix, suffix = _literal_or_empty(shape.prefix_text), _literal_or_empty(shape.suffix_text)
        return self.rule(name, _sequence(prefix, arguments, suffix) or '""')

    def _param(self, param: Param, name: str) -> str:
        """The item for one property (a rule, optional unless required): open text, value, close text."""
        close = _literal_or_empty(param.close)
        if param.raw and param.choices is not None:
            value = _sequence("(" + " | ".join(map(_gbnf_literal, param.choices)) + ")" if param.choices else "", close)
        elif param.raw:
            value = self._raw_text_then(param.close)
        else:
            schema = param.schema if isinstance(param.schema, dict) else {}
            value = _sequence(self._converter.add(_bounded(schema), f"{name}-value", name), close)
        self.rule(name, _sequence(_literal_or_empty(param.open), value) or '""')
        return name if param.required else f"{name}?"

    def _raw_text_then(self, close: str) -> str:
        """A rule for raw text followed by `close`, where the text does not contain `close` (so the first
        `close` after a value is the one that ends it, as the families' parsers read it).

        GBNF has no lookahead: this spells out the matcher of `close` (Knuth-Morris-Pratt). In state k the
        text so far ends with the first k characters of `close` and contains no whole `close`; a character
        of `close` moves to the state it leads to, any other character back to 0, and `close` itself ends
        the value unless reading it from k would complete an earlier `close`."""
        if close in self._raw_text:
            return self._raw_text[close]
        if not close:
            raise ConstraintError("call parameters written as raw text need a closing text after the value")
        base = f"{GRAMMAR_ROOT}-raw{len(self._raw_text)}"
        alphabet = sorted(set(close))
        others = "[^" + "".join(map(_gbnf_char, alphabet)) + "]"
        step = _close_matcher(close)
        for state in range(len(close)):
            alternatives = [f"{others} {base}-s0"]
            for char in alphabet:
                following = step(state, char)
                if following < len(close):
                    alternatives.append(f"{_gbnf_literal(char)} {base}-s{following}")
            if _ends_cleanly(step, state, close):
                alternatives.append(_gbnf_literal(close))
            self.rule(f"{base}-s{state}", " | ".join(alternatives))
        self._raw_text[close] = f"{base}-s0"
        return self._raw_text[close]


def _close_matcher(close: str) -> Callable[[int, str], int]:
    """The Knuth-Morris-Pratt step for `close`: (matched prefix length, next char) -> new matched length."""
    failure = [0] * (len(close) + 1)
    for index in range(1, len(close)):
        k = failure[index]
        while k and close[index] != close[k]:
            k = failure[k]
        failure[index + 1] = k + 1 if close[index] == close[k] else 0

    def step(state: int, char: str) -> int:
        while state and (state == len(close) or close[state] != char):
            state = failure[state]
        return state + 1 if close[state] == char else 0

    return step


def _ends_cleanly(step: Callable[[int, str], int], state: int, close: str) -> bool:
    """Whether reading `close` from `state` completes it only at its last character."""
    for char in close[:-1]:
        state = step(state, char)
        if state == len(close):
            return False
    return True


_SHAPING_KEYS = frozenset(
    {"$ref", "oneOf", "anyOf", "allOf", "type", "const", "enum", "properties", "additionalProperties"}
    | {"items", "prefixItems", "pattern", "format", "minLength", "maxLength", "minItems", "maxItems"}
)
"""Keywords the converter reads a value's shape from; a schema with none of them allows any value."""


class _BudgetedConverter:
    """Runs llama.cpp's SchemaConverter, stopping it once its grammar passes `max_chars` or it runs
    past `deadline` (checked at each rule it adds, and no single rule can be large: see the bounds)."""

    def __init__(self, converter_class: Any, *, deadline: float, max_chars: int) -> None:
        from llama_cpp.llama_grammar import PRIMITIVE_RULES, RESERVED_NAMES

        budget = self

        class Converter(converter_class):  # type: ignore[misc, valid-type]
            def _add_rule(self, name: str, rule: str) -> str:
                budget.charge(len(name) + len(rule))
                return str(super()._add_rule(name, rule))

            def visit(self, schema: Any, name: str) -> str:
                rule_name = name + "-" if name in RESERVED_NAMES else name or "root"
                if isinstance(schema, dict) and schema and not _SHAPING_KEYS.intersection(schema):
                    # only words (`{"description": ...}`): any JSON value, which the converter refuses
                    return self._add_rule(rule_name, self._add_primitive("value", PRIMITIVE_RULES["value"]))
                # an integer's bounds, which the converter leaves out (engines/llamacpp/_int_range.py)
                bounds = integer_bounds(schema) if isinstance(schema, dict) else None
                if bounds is None:
                    return str(super().visit(schema, name))
                try:
                    body = integer_range_gbnf(*bounds)
                except ValueError as err:
                    raise ConstraintError(f"the schema cannot be met: {err}") from None
                return self._add_rule(rule_name, f"{body} space")

        self._converter = Converter(prop_order={}, allow_fetch=False, dotall=False, raw_pattern=False)
        self._deadline = deadline
        self._max_chars = max_chars
        self._chars = 0

    def charge(self, chars: int) -> None:
        """Count a rule's size; raise ConstraintError once over budget."""
        self._chars += chars
        if self._chars > self._max_chars:
            raise ConstraintError(
                f"the grammar for this schema would pass {self._max_chars:,} characters; simplify the schema "
                "(fewer properties, definitions used fewer times, lower length and item limits)"
            )
        if time.monotonic() > self._deadline:
            raise ConstraintError(f"compiling this schema took over {MAX_COMPILE_S:g} s; simplify it")

    def add(self, schema: Any, name: str, url: str) -> str:
        """Add the rules for `schema` (its `$ref`s resolved within it, under `url`); its rule's name
        (`root` for name "")."""
        try:
            resolved = self._converter.resolve_refs(schema, url)
            return str(self._converter.visit(resolved, name))
        except ConstraintError:
            raise
        except Exception as err:  # the converter raises bare Exceptions/KeyErrors/AssertionErrors on bad schemas
            raise ConstraintError(f"unsupported JSON schema: {err}") from None

    def grammar(self) -> str:
        """The GBNF text of every rule added so far."""
        return str(self._converter.format_grammar())


def check_grammar(llama_cpp: ModuleType, vocab: Any, grammar: str) -> None:
    """Raise ConstraintError if llama.cpp cannot parse `grammar` (checked before a request is queued,
    so the client gets a 400 at once instead of an error event after waiting for a slot)."""
    sampler = llama_cpp.llama_sampler_init_grammar(vocab, grammar.encode(), GRAMMAR_ROOT.encode())
    if not sampler:
        raise ConstraintError("llama.cpp rejected the grammar compiled from this constraint")
    llama_cpp.llama_sampler_free(sampler)


def logits_row(logits_pointer: Any, n_vocab: int) -> npt.NDArray[np.float32]:
    """A numpy view (no copy) of one row of llama.cpp's logits, from `llama_get_logits_ith`."""
    return np.ctypeslib.as_array(ctypes.cast(logits_pointer, ctypes.POINTER(ctypes.c_float)), shape=(n_vocab,))


def plain_greedy(params: SamplingParams, grammar: str | None, banned_tokens: Collection[int]) -> bool:
    """True when the request's next token is just the highest logit: nothing reshapes the logits first."""
    return (
        params.temperature <= 0.0
        and grammar is None
        and not params.logit_bias
        and not banned_tokens
        and params.repeat_penalty == 1.0
        and not params.frequency_penalty
        and not params.presence_penalty
    )


def greedy_token(logits_pointer: Any, n_vocab: int) -> int:
    """The first highest logit of a row, which is what llama.cpp's greedy sampler picks.

    The sampler chain copies the whole vocabulary into a candidate array before it looks at it:
    about 1 ms per sequence and step for a 262k-token vocabulary on a 2-core CPU, ~10% of a
    4-sequence decode step. numpy's argmax over the row in place takes ~25 us.
    """
    return int(logits_row(logits_pointer, n_vocab).argmax())


_CANDIDATE = np.dtype([("id", np.int32), ("logit", np.float32), ("p", np.float32)])  # llama_token_data


class RequestSampler:
    """One request's sampling: its sampler chain, and its grammar beside the chain, not in it.

    A grammar sampler looks at every candidate it is given, and a 262k-token vocabulary made a
    constrained reply 3-4 times slower than a free one on a small model. So, as llama.cpp's own
    common sampler does, the chain picks a token from the row first, and only when the grammar refuses
    that token is the grammar applied to every candidate and the token picked again.
    """

    def __init__(self, llama_cpp: ModuleType, chain: Any, grammar: Any, n_vocab: int) -> None:
        self._ll = llama_cpp
        self._chain = chain
        self._grammar = grammar
        self._n_vocab = n_vocab
        self._candidates: npt.NDArray[Any] | None = None
        if grammar is not None:
            self._candidates = np.zeros(n_vocab, dtype=_CANDIDATE)
            self._ids = np.arange(n_vocab, dtype=np.int32)

    def sample(self, context: Any, row: int) -> int:
        """The token for a row of the batch's logits, accepted into the chain (and the grammar)."""
        if self._grammar is None:
            return int(self._ll.llama_sampler_sample(self._chain, context, row))
        logits = logits_row(self._ll.llama_get_logits_ith(context, row), self._n_vocab)
        token = self._pick(logits, with_grammar=False)
        if not grammar_allows(self._ll, self._grammar, token):
            token = self._pick(logits, with_grammar=True)
        self._ll.llama_sampler_accept(self._grammar, token)
        self._ll.llama_sampler_accept(self._chain, token)
        return token

    def _pick(self, logits: npt.NDArray[np.float32], *, with_grammar: bool) -> int:
        assert self._candidates is not None
        candidates = self._candidates
        candidates["id"] = self._ids  # samplers sort the array in place
        candidates["logit"] = logits
        candidates["p"] = 0.0
        pointer = candidates.ctypes.data_as(ctypes.POINTER(self._ll.llama_token_data))
        array = self._ll.llama_token_data_array(pointer, self._n_vocab, -1, False)
        if with_grammar:
            self._ll.llama_sampler_apply(self._grammar, ctypes.byref(array))
        self._ll.llama_sampler_apply(self._chain, ctypes.byref(array))
        return int(array.data[array.selected].id)

    def free(self) -> None:
        """Free the chain and the grammar."""
        self._ll.llama_sampler_free(self._chain)
        if self._grammar is not None:
            self._ll.llama_sampler_free(self._grammar)


def grammar_allows(llama_cpp: ModuleType, grammar: Any, token: int) -> bool:
    """Whether a grammar sampler, in its state now, lets `token` come next (accepting a refused token
    would throw inside llama.cpp and abort the process)."""
    data = (llama_cpp.llama_token_data * 1)()
    data[0].id, data[0].logit, data[0].p = token, 0.0, 0.0
    candidates = llama_cpp.llama_token_data_array(data, 1, -1, False)
    llama_cpp.llama_sampler_apply(grammar, ctypes.byref(candidates))
    return not math.isinf(data[0].logit)


def build_sampler(
    llama_cpp: ModuleType,
    vocab: Any,
    n_vocab: int,
    params: SamplingParams,
    grammar: str | Any | None,
    banned_tokens: Iterable[int],
) -> RequestSampler:
    """A new sampler for one request (free it with `free`); raises ConstraintError. `grammar`: GBNF
    text, or a grammar sampler already made (a lazy grammar's, caught up: the sampler takes it over)."""
    chain = llama_cpp.llama_sampler_chain_init(llama_cpp.llama_sampler_chain_default_params())
    add = llama_cpp.llama_sampler_chain_add
    biases = {int(token): float(bias) for token, bias in params.logit_bias.items() if 0 <= int(token) < n_vocab}
    for token in banned_tokens:
        biases[token] = float("-inf")
    if biases:
        array = (llama_cpp.llama_logit_bias * len(biases))()
        for index, (token, bias) in enumerate(biases.items()):
            array[index].token = token
            array[index].bias = bias
        add(chain, llama_cpp.llama_sampler_init_logit_bias(n_vocab, len(biases), array))
    if params.repeat_penalty != 1.0 or params.frequency_penalty or params.presence_penalty:
        add(
            chain,
            llama_cpp.llama_sampler_init_penalties(
                n_vocab,
                _PENALTY_WINDOW,
                params.repeat_penalty,
                params.frequency_penalty,
                params.presence_penalty,
            ),
        )
    grammar_sampler = None
    if grammar is not None:
        grammar_sampler = (
            llama_cpp.llama_sampler_init_grammar(vocab, grammar.encode(), GRAMMAR_ROOT.encode())
            if isinstance(grammar, str)
            else grammar
        )
        if not grammar_sampler:
            llama_cpp.llama_sampler_free(chain)
            raise ConstraintError("llama.cpp rejected the grammar compiled from this constraint")
    sampler = RequestSampler(llama_cpp, chain, grammar_sampler, n_vocab)
    if params.temperature <= 0.0:
        add(chain, llama_cpp.llama_sampler_init_greedy())
        return sampler
    if params.top_k > 0:
        add(chain, llama_cpp.llama_sampler_init_top_k(params.top_k))
    if params.top_p < 1.0:
        add(chain, llama_cpp.llama_sampler_init_top_p(params.top_p, 1))
    if params.min_p > 0.0:
        add(chain, llama_cpp.llama_sampler_init_min_p(params.min_p, 1))
    add(chain, llama_cpp.llama_sampler_init_temp(params.temperature))
    seed = llama_cpp.LLAMA_DEFAULT_SEED if params.seed is None else params.seed & 0xFFFFFFFF
    add(chain, llama_cpp.llama_sampler_init_dist(seed))
    return sampler


def token_logprob(
    logits_pointer: Any, n_vocab: int, token: int, top_n: int, piece: Callable[[int], str]
) -> TokenLogprob:
    """Log-probability of `token` under the model's distribution at this row, with the top-N alternatives."""
    logits = logits_row(logits_pointer, n_vocab)
    peak = float(logits.max())
    log_total = peak + float(np.log(np.exp(logits - peak, dtype=np.float64).sum()))
    top: tuple[tuple[str, float], ...] = ()
    if top_n > 0:
        count = min(top_n, n_vocab)
        candidates = np.argpartition(logits, -count)[-count:]
        ordered = candidates[np.argsort(logits[candidates])[::-1]]
        top = tuple((piece(int(t)), float(logits[t]) - log_total) for t in ordered)
    return TokenLogprob(token_id=token, text=piece(token), logprob=float(logits[token]) - log_total, top=top)
