"""Per-request sampling on llama.cpp's sampler chain, grammar compilation, and logprobs.

Each running sequence owns one sampler chain (penalties and grammar keep per-sequence state);
`llama_sampler_sample` reads the logits of that sequence's row in the shared batch.
"""

from __future__ import annotations

import ctypes
import functools
import json
import time
from collections.abc import Callable, Collection, Iterable
from types import ModuleType
from typing import Any

import numpy as np
import numpy.typing as npt

from launcher.engines._schema_bounds import SchemaBoundsError, check_schema_bounds, whole_string_pattern, with_patterns
from launcher.engines.base import Constraint, SamplingParams, TokenLogprob

GRAMMAR_ROOT = "launcher-root"
_PENALTY_WINDOW = 64  # tokens the repeat/presence/frequency penalties look back over
# llama.cpp's grammars spell out every repetition a schema asks for, and an optional one (up to
# `maxLength`) as a nested group: its parser refuses ~1,500 levels and overflows its stack (the
# server crashes) at ~20,000. Below this bound a schema compiles in milliseconds.
MAX_REPETITION = 1_000
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


def compile_constraint(constraint: Constraint) -> str:
    """GBNF text whose rule `launcher-root` generates prefix_text + the constrained part + suffix_text.

    Schemas are checked against `_schema_bounds` first and compiled under a size and time budget,
    so no request can make this take more than milliseconds; results are cached per schema text
    (agents send the same tools with every turn), refusals too: tools whose grammar is over budget
    must not cost that budget again on every turn of an agent's session.
    """
    # Key order matters: the converter writes properties in the schema's order.
    schema_text = json.dumps(constraint.schema) if constraint.schema is not None else None
    outcome = _compile_outcome(
        constraint.kind,
        schema_text,
        constraint.pattern,
        constraint.prefix_text,
        constraint.suffix_text,
        constraint.repeat,
    )
    if isinstance(outcome, ConstraintError):
        raise ConstraintError(*outcome.args)
    return outcome


@functools.lru_cache(maxsize=64)
def _compile_outcome(
    kind: str, schema_text: str | None, pattern: str | None, prefix_text: str, suffix_text: str, repeat: bool
) -> str | ConstraintError:
    try:
        return _compile(kind, schema_text, pattern, prefix_text, suffix_text, repeat)
    except ConstraintError as err:
        return err


def _compile(
    kind: str, schema_text: str | None, pattern: str | None, prefix_text: str, suffix_text: str, repeat: bool
) -> str:
    from llama_cpp import llama_grammar

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
    from llama_cpp import llama_grammar

    try:
        check_schema_bounds(schema, max_repetition=MAX_REPETITION, max_total_repetition=MAX_TOTAL_REPETITION)
        schema = with_patterns(schema, lambda pattern: whole_string_pattern(pattern, _JSON_PLAIN_CHAR))
    except SchemaBoundsError as err:
        raise ConstraintError(str(err)) from None
    converter = _BudgetedConverter(
        llama_grammar.SchemaConverter, deadline=time.monotonic() + MAX_COMPILE_S, max_chars=MAX_GRAMMAR_CHARS
    )
    try:
        return converter.convert(schema)
    except ConstraintError:
        raise
    except Exception as err:  # the converter raises bare Exceptions/KeyErrors/AssertionErrors on bad schemas
        raise ConstraintError(f"unsupported JSON schema: {err}") from None


class _BudgetedConverter:
    """Runs llama.cpp's SchemaConverter, stopping it once its grammar passes `max_chars` or it runs
    past `deadline` (checked at each rule it adds, and no single rule can be large: see the bounds)."""

    def __init__(self, converter_class: Any, *, deadline: float, max_chars: int) -> None:
        budget = self

        class Converter(converter_class):  # type: ignore[misc, valid-type]
            def _add_rule(self, name: str, rule: str) -> str:
                budget.charge(len(name) + len(rule))
                return str(super()._add_rule(name, rule))

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

    def convert(self, schema: Any) -> str:
        """The GBNF text (rule `root`) for `schema`."""
        resolved = self._converter.resolve_refs(schema, "stdin")
        self._converter.visit(resolved, "")
        return str(self._converter.format_grammar())


def check_grammar(llama_cpp: ModuleType, vocab: Any, grammar: str, triggers: tuple[str, ...] = ()) -> None:
    """Raise ConstraintError if llama.cpp cannot parse `grammar` (checked before a request is queued,
    so the client gets a 400 at once instead of an error event after waiting for a slot)."""
    sampler = _grammar_sampler(llama_cpp, vocab, grammar, triggers)
    if not sampler:
        raise ConstraintError("llama.cpp rejected the grammar compiled from this constraint")
    llama_cpp.llama_sampler_free(sampler)


def _grammar_sampler(llama_cpp: ModuleType, vocab: Any, grammar: str, triggers: tuple[str, ...]) -> Any:
    """llama.cpp's grammar sampler; with `triggers` (`Constraint.triggers`: patterns the server wrote,
    never a client's, as llama.cpp's std::regex would abort the process on a bad one) its lazy form,
    which leaves tokens free until the text generated so far matches one of them."""
    if not triggers:
        return llama_cpp.llama_sampler_init_grammar(vocab, grammar.encode(), GRAMMAR_ROOT.encode())
    patterns = (ctypes.c_char_p * len(triggers))(*(t.encode() for t in triggers))
    return llama_cpp.llama_sampler_init_grammar_lazy_patterns(
        vocab, grammar.encode(), GRAMMAR_ROOT.encode(), patterns, len(triggers), None, 0
    )


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


def build_sampler(
    llama_cpp: ModuleType,
    vocab: Any,
    n_vocab: int,
    params: SamplingParams,
    grammar: str | None,
    banned_tokens: Iterable[int],
    triggers: tuple[str, ...] = (),
) -> Any:
    """A new sampler chain for one request (free it with llama_sampler_free); raises ConstraintError.
    `triggers`: the grammar is lazy (`Constraint.triggers`)."""
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
    if grammar is not None:
        grammar_sampler = _grammar_sampler(llama_cpp, vocab, grammar, triggers)
        if not grammar_sampler:
            llama_cpp.llama_sampler_free(chain)
            raise ConstraintError("llama.cpp rejected the grammar compiled from this constraint")
        add(chain, grammar_sampler)
    if params.temperature <= 0.0:
        add(chain, llama_cpp.llama_sampler_init_greedy())
        return chain
    if params.top_k > 0:
        add(chain, llama_cpp.llama_sampler_init_top_k(params.top_k))
    if params.top_p < 1.0:
        add(chain, llama_cpp.llama_sampler_init_top_p(params.top_p, 1))
    if params.min_p > 0.0:
        add(chain, llama_cpp.llama_sampler_init_min_p(params.min_p, 1))
    add(chain, llama_cpp.llama_sampler_init_temp(params.temperature))
    seed = llama_cpp.LLAMA_DEFAULT_SEED if params.seed is None else params.seed & 0xFFFFFFFF
    add(chain, llama_cpp.llama_sampler_init_dist(seed))
    return chain


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
