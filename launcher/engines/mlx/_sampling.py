"""Per-request sampling for the MLX engine: samplers, penalties and grammar-constrained decoding.

mlx-lm's BatchGenerator takes one sampler and one list of logits processors per sequence, so each
request keeps its own settings inside a shared batch. Samplers here carry their own PRNG key,
so a request with a seed gives the same text whatever else runs beside it.

Constrained decoding uses llguidance (Microsoft's grammar engine behind Guidance, also used by
llama.cpp and vLLM): it computes the allowed-token mask straight from a Hugging Face tokenizer,
compiles JSON Schema itself, and is fast enough to run per token on the CPU. Its Lark dialect lets
us wrap the JSON in literal text (tool-call tags), including added tokens such as `<tool_call>`,
which we reference by id so that llguidance and the tokenizer agree on how they are spelled.
A lazy constraint (`Constraint.triggers`) leaves the logits alone until the output matches a trigger
(`LazyGrammarProcessor`, over the engine-neutral watch in launcher/engines/lazy_grammar.py).
"""

from __future__ import annotations

import json
import logging
import random
import re
import threading
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from launcher.engines._schema_bounds import SchemaBoundsError, check_schema_bounds
from launcher.engines.base import Constraint, SamplingParams
from launcher.engines.call_lark import CallGrammarError, repeated, tool_calls_lark
from launcher.engines.lazy_grammar import TriggerWatch, catch_up

log = logging.getLogger("launcher.engines.mlx")

Sampler = Callable[[Any], Any]
LogitsProcessor = Callable[[Any, Any], Any]

PENALTY_WINDOW = 64  # tokens the repeat/presence/frequency penalties look back over
# JSON is written the way json.dumps writes it: random or weak models cannot pad it with endless
# whitespace, and capable models write it like this anyway.
_JSON_STYLE = {"whitespace_flexible": False, "item_separator": ", ", "key_separator": ": "}


class ConstraintError(ValueError):
    """The request's constraint cannot be compiled; the message says why."""


def make_sampler(params: SamplingParams) -> Sampler:
    """A sampler for one request: greedy at temperature 0, else top-p/min-p/top-k then a seeded draw."""
    import mlx.core as mx
    from mlx_lm.sample_utils import apply_min_p, apply_top_k, apply_top_p, greedy_sampler

    if params.temperature <= 0.0:
        return greedy_sampler  # shared object: mlx-lm samples all-greedy batches in one call
    seed = params.seed if params.seed is not None else random.getrandbits(63)
    state = {"key": mx.random.key(seed & 0xFFFFFFFFFFFFFFFF)}
    temperature = params.temperature

    def sample(logprobs: Any) -> Any:
        if 0.0 < params.top_p < 1.0:
            logprobs = apply_top_p(logprobs, params.top_p)
        if params.min_p > 0.0:
            logprobs = apply_min_p(logprobs, params.min_p)
        if params.top_k > 0:
            logprobs = apply_top_k(logprobs, params.top_k)
        key, subkey = mx.random.split(state["key"])
        state["key"] = key
        return mx.random.categorical(logprobs * (1.0 / temperature), key=subkey)

    return sample


def make_processors(params: SamplingParams, n_vocab: int, banned: Sequence[int]) -> list[LogitsProcessor]:
    """Logit bias (plus banned tokens) and repetition penalties, as mlx-lm logits processors."""
    from mlx_lm.sample_utils import make_logits_processors

    bias = {int(t): float(b) for t, b in params.logit_bias.items() if 0 <= int(t) < n_vocab}
    for token in banned:
        bias[token] = float("-inf")
    processors: list[LogitsProcessor] = make_logits_processors(
        logit_bias=bias or None,
        repetition_penalty=params.repeat_penalty if params.repeat_penalty != 1.0 else None,
        repetition_context_size=PENALTY_WINDOW,
        presence_penalty=params.presence_penalty or None,
        presence_context_size=PENALTY_WINDOW,
        frequency_penalty=params.frequency_penalty or None,
        frequency_context_size=PENALTY_WINDOW,
    )
    return processors


class GrammarCompiler:
    """Turns Constraints into llguidance matchers for one tokenizer (the token table is built once)."""

    def __init__(self, hf_tokenizer: Any, n_vocab: int, eos_ids: Sequence[int]) -> None:
        self._hf = hf_tokenizer
        self._n_vocab = n_vocab
        self._eos = list(eos_ids)
        self._table: Any = None
        self._lock = threading.Lock()

    def _tokenizer(self) -> Any:
        with self._lock:
            if self._table is None:
                try:
                    import llguidance.hf
                except ImportError:
                    raise ConstraintError("structured output needs llguidance: pip install 'launcher[mlx]'") from None
                try:
                    self._table = llguidance.hf.from_tokenizer(self._hf, n_vocab=self._n_vocab, eos_token=self._eos)
                except ValueError as err:  # slow (non-Rust) tokenizers have no bridge
                    raise ConstraintError(f"structured output is not available for this tokenizer: {err}") from None
            return self._table

    def prepare(self) -> None:
        """Build the token table now (about a second for a 150k vocabulary) instead of on the scheduler
        thread at the first structured request, where it would stall every running sequence."""
        try:
            self._tokenizer()
        except ConstraintError as err:  # requests with constraints will get this message as their error
            log.info("structured output unavailable: %s", err)

    def grammar(self, constraint: Constraint, encode: Callable[[str], list[int]]) -> str:
        """The Lark grammar for `constraint` (prefix text + constrained part + suffix text)."""
        table = self._tokenizer()

        def literal(text: str) -> list[str]:
            return _literal(text, encode, table)

        if constraint.kind == "tool_calls":
            for shape in constraint.calls:
                _check_bounds(shape.schema)
            try:
                return tool_calls_lark(constraint, literal, _json_value)
            except CallGrammarError as err:
                raise ConstraintError(str(err)) from None
        if constraint.kind == "json_schema":
            if constraint.schema is None:
                raise ConstraintError("a json_schema constraint needs a schema")
            _check_bounds(constraint.schema)
            body = _json_value(constraint.schema)
        elif constraint.kind == "json_object":
            body = _json_value({"type": "object"})
        elif constraint.kind == "regex":
            if not constraint.pattern:
                raise ConstraintError("a regex constraint needs a pattern")
            body = "/" + constraint.pattern.removeprefix("^").removesuffix("$").replace("/", "\\/") + "/"
        else:
            raise ConstraintError(
                f"the MLX engine does not support {constraint.kind!r} constraints (use json_schema or regex)"
            )
        parts = [*literal(constraint.prefix_text), "body", *literal(constraint.suffix_text)]
        return f"{repeated(' '.join(parts), constraint.repeat)}body: {body}\n"

    def matcher(self, constraint: Constraint, encode: Callable[[str], list[int]]) -> Any:
        """A fresh llguidance matcher for one request; raises ConstraintError for bad schemas."""
        import llguidance

        table = self._tokenizer()
        lark = self.grammar(constraint, encode)
        grammar = llguidance.LLMatcher.grammar_from_lark(lark)
        problem = llguidance.LLMatcher.validate_grammar(grammar, table)
        if problem and not problem.startswith("WARNING"):
            first = problem.strip().splitlines()[0]
            raise ConstraintError(f"cannot constrain output to this schema: {first}")
        matcher = llguidance.LLMatcher(table, grammar, log_level=0)
        if matcher.is_error():
            raise ConstraintError(f"cannot constrain output to this schema: {matcher.get_error()}")
        return matcher

    def processor(self, constraint: Constraint, encode: Callable[[str], list[int]]) -> GrammarProcessor:
        """The logits processor enforcing `constraint` for one request (lazy when it has triggers);
        raises ConstraintError for bad schemas, at once, before the request waits for a slot."""
        matcher = self.matcher(constraint, encode)
        if not constraint.triggers:
            return GrammarProcessor(matcher, self._n_vocab)
        try:
            table = self._tokenizer()
            watch = TriggerWatch(constraint.triggers, lambda token: bytes(table.decode_bytes([token])))
        except re.error as err:  # triggers are the server's own patterns: this is a bug, said plainly
            raise ConstraintError(f"a lazy constraint's trigger is not a valid pattern: {err}") from None
        return LazyGrammarProcessor(matcher, self._n_vocab, watch, table)


def _check_bounds(schema: Any) -> None:
    try:
        check_schema_bounds(schema)
    except SchemaBoundsError as err:
        raise ConstraintError(str(err)) from None


def _json_value(schema: Any) -> str:
    """A Lark rule body for one JSON value matching `schema`, written as json.dumps writes it."""
    tight = tightened(schema) if isinstance(schema, dict) else {}
    return f"%json {json.dumps({**tight, 'x-guidance': _JSON_STYLE})}"


_SAFE_INTEGER = 2**53 - 1
_BOUNDS = {"minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum"}
_SCHEMA_MAPS = ("properties", "patternProperties", "$defs", "definitions", "dependentSchemas")
_SCHEMA_LISTS = ("anyOf", "allOf", "oneOf", "prefixItems")
_SCHEMA_VALUES = ("items", "additionalProperties", "not", "if", "then", "else", "contains", "unevaluatedProperties")


def tightened(schema: Any) -> Any:
    """The schema with the limits strict structured output implies, where the schema says nothing.

    JSON Schema allows extra keys and integers of any length by default, and a model under a grammar
    that allows them can keep inventing keys or digits until it runs out of tokens. OpenAI's strict
    mode and llama.cpp's schema converter forbid unlisted keys and cap integers at 16 digits; we
    forbid unlisted keys (unless the schema allows them) and keep integers within the range JSON
    parsers read exactly (+-(2**53 - 1)).
    """
    if not isinstance(schema, dict):
        return schema
    out: dict[str, Any] = {}
    for key, value in schema.items():
        if key in _SCHEMA_MAPS and isinstance(value, dict):
            out[key] = {name: tightened(sub) for name, sub in value.items()}
        elif key in _SCHEMA_LISTS and isinstance(value, list):
            out[key] = [tightened(sub) for sub in value]
        elif key in _SCHEMA_VALUES:
            out[key] = tightened(value)
        else:
            out[key] = value
    if "properties" in out and "additionalProperties" not in out:
        out["additionalProperties"] = False
    kinds = out.get("type")
    if (kinds == "integer" or (isinstance(kinds, list) and "integer" in kinds)) and not _BOUNDS & out.keys():
        out["minimum"], out["maximum"] = -_SAFE_INTEGER, _SAFE_INTEGER
    return out


def _literal(text: str, encode: Callable[[str], list[int]], table: Any) -> list[str]:
    """Lark items for literal text: quoted strings, and `<[id]>` for added tokens it contains."""
    if not text:
        return []
    items: list[str] = []
    run: list[int] = []

    def close_run() -> None:
        if run:
            items.append(json.dumps(table.decode_str(run)))
            run.clear()

    for token in encode(text):
        if table.is_special_token(token):
            close_run()
            items.append(f"<[{token}]>")
        else:
            run.append(token)
    close_run()
    return items


class GrammarProcessor:
    """A logits processor that only lets through tokens the grammar allows.

    mlx-lm calls it once per step with the sequence so far; the newest token is the one sampled
    last step (on the first call it is the last prompt token, which the grammar never saw).
    """

    def __init__(self, matcher: Any, n_vocab: int) -> None:
        self._matcher = matcher
        self._n_vocab = n_vocab
        self._started = False

    def __call__(self, tokens: Any, logits: Any) -> Any:
        if self._started:
            self._matcher.consume_token(int(tokens[-1].item()))
        self._started = True
        return self._mask(logits)

    def _mask(self, logits: Any) -> Any:
        import mlx.core as mx

        if self._matcher.is_error():
            return logits  # the sequence is ending anyway (the server sees the error event)
        packed = np.frombuffer(self._matcher.compute_bitmask(), dtype=np.uint8)
        allowed = np.unpackbits(packed, bitorder="little")
        width = logits.shape[-1]
        if allowed.shape[0] < width:
            allowed = np.pad(allowed, (0, width - allowed.shape[0]))
        mask = mx.array(allowed[:width].astype(bool))
        return mx.where(mask, logits, mx.array(float("-inf"), dtype=logits.dtype))

    @property
    def failed(self) -> str | None:
        """The matcher's error, if the output left the grammar (should not happen: tokens are masked)."""
        return str(self._matcher.get_error()) if self._matcher.is_error() else None


class LazyGrammarProcessor(GrammarProcessor):
    """A grammar processor for a lazy constraint (`Constraint.triggers`): it passes the logits through
    untouched, watching the output for a trigger (`lazy_grammar`), until one matches; its matcher then
    catches up with the output from the match on and masks from the next token.

    Each call sees the token sampled last (as GrammarProcessor), so the speculative step, which runs a
    row with processors position by position over the kept tokens, keeps only draft tokens that the
    sampling agrees with once masked: a trigger inside a draft constrains the rest of it.
    """

    def __init__(self, matcher: Any, n_vocab: int, watch: TriggerWatch, table: Any) -> None:
        super().__init__(matcher, n_vocab)
        self._watch: TriggerWatch | None = watch  # None once the grammar took over (or gave up)
        self._table = table
        self._seen_prompt = False

    def __call__(self, tokens: Any, logits: Any) -> Any:
        if self._watch is None:
            return super().__call__(tokens, logits) if self._started else logits
        if not self._seen_prompt:  # the first call's token is the prompt's last: not output
            self._seen_prompt = True
            return logits
        handover = self._watch.add(int(tokens[-1].item()))
        if handover is None:
            return logits
        self._watch = None
        if not catch_up(self._matcher, self._table, handover):
            # What follows the trigger is not a call the grammar allows: the output stays free, as
            # the reply parsers would read such text as text.
            log.info("lazy constraint: the output after its trigger breaks the grammar; left free")
            return logits
        self._started = True
        return self._mask(logits)

    @property
    def failed(self) -> str | None:
        return super().failed if self._started else None
