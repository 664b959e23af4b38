"""The engine seam: what the engine-agnostic server needs from an inference runtime.

The server renders chat templates, parses tool calls, builds response shapes and enforces
limits; an engine only turns token ids into a stream of new tokens for many concurrent
requests. Batching lives inside each engine because each runtime batches differently.

Threading contract: `LoadedModel.generate` is an async generator used from the server's
event loop. Engines run the model on their own thread(s) and hand events back to the loop.
Closing the async generator early (client disconnect, stop string found) must free the
sequence within one decode step.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from typing import Any, Literal, Protocol, runtime_checkable

from launcher.core.config import ServeConfig, SpeculativeMode
from launcher.core.model_types import LocalModel, ModelFormat
from launcher.engine_specs import Availability
from launcher.hardware.machine import Machine

REPLY_MARKERS: tuple[str, ...] = (
    # gpt-oss (harmony) channels and tool calls
    "<|start|>",
    "<|channel|>",
    "<|message|>",
    "<|constrain|>",
    "<|end|>",
    "<|return|>",
    "<|call|>",
    # Mistral tool calls (control tokens in the v3/tekken tokenizers)
    "[TOOL_CALLS]",
    "[ARGS]",
    "[CALL_ID]",
    # Llama 3.1 built-in tool calls
    "<|python_tag|>",
    # thinking and Hermes-style tool calls (also Qwen3-Coder's and GLM's), where a tokenizer makes them
    # control tokens
    "<think>",
    "</think>",
    "<tool_call>",
    "</tool_call>",
    # GLM 4.5+ tagged arguments
    "<arg_key>",
    "</arg_key>",
    "<arg_value>",
    "</arg_value>",
    # DeepSeek V3 / R1 / V3.1 tool calls
    "<｜tool▁calls▁begin｜>",
    "<｜tool▁calls▁end｜>",
    "<｜tool▁call▁begin｜>",
    "<｜tool▁call▁end｜>",
    "<｜tool▁sep｜>",
    # Granite 3.x and Phi-4-mini tool calls
    "<|tool_call|>",
    "<|/tool_call|>",
    # Kimi K2 tool calls
    "<|tool_calls_section_begin|>",
    "<|tool_calls_section_end|>",
    "<|tool_call_begin|>",
    "<|tool_call_argument_begin|>",
    "<|tool_call_end|>",
)
"""Special tokens that carry a reply's structure. An engine writes them into the generated text when
the model emits them, because the server's reply parsers (reasoning, tool calls) read them there;
other control tokens (turn markers and the like) stay invisible."""


@dataclass(frozen=True)
class ModelInfo:
    """What the server needs to know about a loaded model."""

    id: str
    engine: str
    engine_version: str
    path: str
    format: ModelFormat
    architecture: str
    context_length: int  # the context the server will allow (n_ctx per sequence)
    train_context_length: int
    vocab_size: int
    quant: str | None
    chat_template: str | None  # the model's own Jinja template, if it has one
    bos_token: str | None
    eos_token: str | None
    eos_token_ids: tuple[int, ...]
    add_bos_token: bool
    can_embed: bool
    parallel: int
    extra: dict[str, Any] = field(default_factory=dict)  # engine-specific facts for /v1/models


@dataclass(frozen=True)
class CallShape:
    """One tool's call as a model family writes it: literal text, the arguments, literal text.

    `params` None: the arguments are one JSON object matching `schema` (DeepSeek's
    `<｜tool▁call▁begin｜>NAME<｜tool▁sep｜>{...}<｜tool▁call▁end｜>`, Kimi K2, gpt-oss). Otherwise the
    arguments are written one property at a time, in the schema's order (optional ones may be left
    out, required ones may not): `params[0]` with `{name}` replaced by the property's name, its value,
    then `params[1]`. A string value is the raw text (anything that does not contain `params[1]`),
    any other value is JSON matching the property's schema. Qwen3-Coder: ("<parameter={name}>\n",
    "\n</parameter>\n"); GLM 4.5+: ("<arg_key>{name}</arg_key>\n<arg_value>", "</arg_value>\n").
    """

    prefix_text: str
    schema: dict[str, Any]
    suffix_text: str = ""
    params: tuple[str, str] | None = None


@dataclass(frozen=True)
class Constraint:
    """Constrained decoding requested by the server; each engine compiles it its own way.

    kind "json_schema": `schema` is a JSON Schema the output must match.
    kind "json_object": any JSON object.
    kind "regex" / "grammar_gbnf": raw grammars where an engine supports them.
    kind "tool_calls": `prefix_text`, then one of `calls` (or, with `repeat`, one or more of them
    separated by optional whitespace), then `suffix_text`. For families that name the tool outside
    the arguments' JSON, or write the arguments as tagged parameters.
    `prefix_text`: literal text the output must start with before the constrained part
    (used for tool calls rendered as e.g. `<tool_call>{...}</tool_call>`).
    `repeat`: prefix + constrained part + suffix once or more, whitespace between (parallel tool calls);
    for "tool_calls", the calls repeat between one prefix and one suffix.
    `triggers`: a lazy constraint (regular expressions; none: not lazy). Output is free until the text
    so far matches one; from the match (its first group, if it has one) on, the output must match the
    constraint. Tool calls on `tool_choice: auto`: the model may answer in words, and a call it starts
    is a well-formed call. Only engines whose models say `lazy_constraints` get one.
    """

    kind: Literal["json_schema", "json_object", "regex", "grammar_gbnf", "tool_calls"]
    schema: dict[str, Any] | None = None
    pattern: str | None = None
    prefix_text: str = ""
    suffix_text: str = ""
    repeat: bool = False
    triggers: tuple[str, ...] = ()
    calls: tuple[CallShape, ...] = ()


@dataclass(frozen=True)
class SamplingParams:
    """Per-request sampling, mapped by each engine onto its sampler chain."""

    temperature: float = 0.8
    top_p: float = 1.0
    top_k: int = 0  # 0 = off
    min_p: float = 0.0
    seed: int | None = None
    presence_penalty: float = 0.0
    frequency_penalty: float = 0.0
    repeat_penalty: float = 1.0
    logit_bias: dict[int, float] = field(default_factory=dict)


@dataclass
class GenerationRequest:
    """One request handed to the engine: prompt tokens in, tokens out.

    `max_tokens` is what the caller allows; the engine bounds it by the room the prompt leaves in the
    context (`engines._jobs.check_prompt`), so a caller with no limit of its own passes the context.
    """

    prompt_tokens: list[int]
    max_tokens: int
    sampling: SamplingParams = field(default_factory=SamplingParams)
    constraint: Constraint | None = None
    logprobs: int | None = None  # None = off; N = also return the top-N alternatives
    ignore_eos: bool = False
    request_id: str = ""
    # Prompt positions worth a sliding-window checkpoint besides the engine's own (where the user's part
    # of a chat begins: launcher/server/core/checkpoint_hints.py); engines without such layers ignore them.
    checkpoint_hints: tuple[int, ...] = ()
    # Speculative decoding for this request (launcher/engines/speculation.py): None follows the server's
    # `--speculative`; "off" decodes one token per step, "ngram" drafts from the sequence's own text.
    speculative: SpeculativeMode | None = None


@dataclass(frozen=True)
class TokenLogprob:
    """Log-probability of a produced token, with the top alternatives when asked."""

    token_id: int
    text: str
    logprob: float
    top: tuple[tuple[str, float], ...] = ()


FinishReason = Literal["stop", "length", "cancelled", "error"]


@dataclass(frozen=True)
class PromptFault:
    """Which prompt check a refused request failed (`engines._jobs.check_prompt`, the one every engine
    makes), so the server can answer as the hosted APIs do: clients act on an over-long prompt's
    `context_length_exceeded` (they shorten the conversation and retry) where any other 400 is final."""

    kind: Literal["empty", "too_long"]
    context: int  # the tokens per request the prompt was checked against


@dataclass(frozen=True)
class GenerationEvent:
    """A step of generation. `text` is the decoded piece (UTF-8 safe: partial characters are held back).

    The last event has `finish_reason` set and carries the usage counts.
    """

    token_ids: tuple[int, ...] = ()
    text: str = ""
    logprobs: tuple[TokenLogprob, ...] = ()
    finish_reason: FinishReason | None = None
    prompt_tokens: int = 0
    cached_prompt_tokens: int = 0  # prompt tokens served from the prefix cache
    disk_prompt_tokens: int = 0  # of those, the ones put back from the prompt cache on disk
    completion_tokens: int = 0
    # Speculative decoding: draft tokens verified for this request, and how many of them were accepted
    # (each accepted one is a completion token that took no decode step of its own).
    draft_tokens: int = 0
    accepted_draft_tokens: int = 0
    error: str | None = None
    # The engine refused the request as asked (bad token ids, a constraint it cannot compile): the
    # client's mistake, which the server answers with a 400, not a 500.
    request_error: bool = False
    prompt_fault: PromptFault | None = None  # a refusal for the prompt's size: which check it failed


@dataclass(frozen=True)
class EngineStats:
    """Live numbers the server exports in /metrics."""

    requests_running: int = 0
    requests_waiting: int = 0
    kv_cache_used_tokens: int = 0
    kv_cache_total_tokens: int = 0
    prefix_cache_hits: int = 0
    prefix_cache_misses: int = 0
    prefix_cache_hit_tokens: int = 0
    memory: dict[str, int] = field(default_factory=dict)  # engine-specific: {"mlx_active": ..., ...}
    # Tokens processed since load (counters): the server derives prefill/decode tok/s from their deltas.
    prefill_tokens_total: int = 0
    decode_tokens_total: int = 0
    # Speculative decoding since load (counters): draft tokens verified and those accepted.
    speculative_draft_tokens_total: int = 0
    speculative_accepted_tokens_total: int = 0
    # Sliding-window checkpoints (llama.cpp): held now, the most that may be held, restores since load.
    swa_checkpoints: int = 0
    swa_checkpoints_max: int = 0
    swa_checkpoint_budget_bytes: int = 0
    swa_checkpoint_restores: int = 0
    # The prompt cache on disk (launcher/engines/prompt_cache.py): lookups that restored a stored prefix
    # and those that found none, tokens restored, seconds spent restoring, this model's entries and bytes.
    prompt_cache_disk_hits: int = 0
    prompt_cache_disk_misses: int = 0
    prompt_cache_disk_restored_tokens: int = 0
    prompt_cache_disk_restore_seconds: float = 0.0
    prompt_cache_disk_writes: int = 0
    prompt_cache_disk_write_failures: int = 0
    prompt_cache_disk_entries: int = 0
    prompt_cache_disk_bytes: int = 0
    prompt_cache_disk_budget_bytes: int = 0


class QueueFullError(Exception):
    """Raised by `generate` when the engine's wait queue is full (the server answers 429)."""

    def __init__(self, retry_after_s: float = 1.0) -> None:
        super().__init__("too many requests waiting")
        self.retry_after_s = retry_after_s


class LoadedModel(Protocol):
    """A model loaded by an engine and ready to generate."""

    info: ModelInfo

    def tokenize(self, text: str, *, add_special: bool = False, parse_special: bool = True) -> list[int]:
        """Text to token ids (special-token text like `<|im_end|>` parsed when `parse_special`)."""
        ...

    def detokenize(self, tokens: list[int]) -> str:
        """Token ids back to text."""
        ...

    def generate(self, request: GenerationRequest) -> AsyncIterator[GenerationEvent]:
        """Stream events for one request; raises QueueFullError when the queue is full.

        The prompt is checked here, not by the caller (`engines._jobs.check_prompt`: empty, over the
        context, ids outside the vocabulary; `max_tokens` bounded by the room left): a request that
        cannot run gets one refusal event (`_jobs.refusal`), and the server answers with it.
        """
        ...

    async def embed(self, texts: list[str]) -> list[list[float]]:
        """Embeddings for each text; raises EngineError if the model cannot embed."""
        ...

    def stats(self) -> EngineStats:
        """Live numbers for /metrics (cheap; called from the event loop)."""
        ...

    def close(self) -> None:
        """Stop generation threads and free the model."""
        ...


@runtime_checkable
class Engine(Protocol):
    """An inference runtime the launcher can drive. Described by an `EngineSpec` (`launcher.engine_specs`),
    which names the class; `launcher.engines.registry` builds it."""

    name: str

    def availability(self, machine: Machine) -> Availability:
        """The runtime's own answer, past the spec's cheap checks: does the installed build work here,
        with which backend? If not, why, in words a user understands. May import the runtime."""
        ...

    def load(self, model: LocalModel, config: ServeConfig) -> LoadedModel:
        """Load the model; raises ModelError/EngineError subclasses with clear messages."""
        ...
