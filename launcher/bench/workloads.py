"""Benchmark workloads (docs/benchmarks.md): deterministic prompts with realistic token lengths.

Prompts are English-like text drawn from a fixed word list with a seeded RNG, so two servers
(or two runs) get the same requests. Lengths are set in *tokens*: a server-measured
`tokens_per_word` (see `runner.calibrate_tokens_per_word`) converts them to words, and the
report records the prompt lengths the server actually counted.
"""

from __future__ import annotations

import random
from dataclasses import dataclass, field, replace
from typing import Any

WORKLOAD_NAMES = ("short", "long", "prefix", "sweep", "json", "mixed")
"""Every workload `launcher bench --workloads` accepts, in the order they run."""

DEFAULT_WORKLOADS = ("short", "long", "prefix", "sweep", "json")
"""What runs without `--workloads`: `mixed` is opt-in, because bench-compare and the recorded
results in docs/benchmarks.md were made with exactly this set."""

DEFAULT_TOKENS_PER_WORD = 1.3
"""Used when the server does not report usage: a common figure for English with BPE tokenizers."""

_WORD_TEXT = (
    "the of and to in is that for it as was with be by on not he this are or his from at which but have an "
    "they you were her she there been one all we their has would when if so no will more can out up some "
    "time about into than them only other new could these two may first then do any like my now over such "
    "our man me even most made after also did many before must through back years where much your way well "
    "down should because each just those people how too little state good very make world still own see men "
    "work long get here between both life being under never day same another know while last might us great "
    "old year off come since against go came right used take three system river engine memory cache token "
    "model server request garden window market letter north water city morning silver stone paper music "
    "question answer number people country village mountain library report signal bridge harbor station "
    "kitchen pattern weather evening process network history machine student teacher journey winter summer"
)
_WORDS = tuple(_WORD_TEXT.split())

_LONG_ANSWER_TASK = "Write a long, detailed story that continues the notes above. Do not stop early."
_SHORT_ANSWER_TASK = "In one short sentence, what are the notes above about?"


@dataclass(frozen=True)
class BenchRequest:
    """One chat completion request the runner sends (streaming, greedy)."""

    messages: tuple[dict[str, str], ...]
    max_tokens: int
    response_format: dict[str, Any] | None = None

    def body(self, model: str | None, *, seed: int) -> dict[str, Any]:
        """The JSON body for POST /v1/chat/completions."""
        body: dict[str, Any] = {
            "messages": [dict(m) for m in self.messages],
            "max_tokens": self.max_tokens,
            "temperature": 0.0,
            "seed": seed,
            "stream": True,
            "stream_options": {"include_usage": True},
        }
        if model:
            body["model"] = model
        if self.response_format is not None:
            body["response_format"] = self.response_format
        return body


@dataclass(frozen=True)
class Phase:
    """A batch of requests sent with a fixed number of concurrent streams (closed loop).

    `sequential` phases send their requests strictly one after another and keep their order,
    which the shared-prefix workload needs (cold request first, then the warm one).
    """

    label: str
    concurrency: int
    requests: tuple[BenchRequest, ...]
    sequential: bool = False
    joins_running_streams: bool = False
    """Sent alongside the previous phase, once every one of its streams has its first token
    (the mixed workload's long prompt arriving while other answers stream)."""


@dataclass(frozen=True)
class Workload:
    """A named workload: one or more phases plus what it is meant to show."""

    name: str
    description: str
    phases: tuple[Phase, ...]
    extra: dict[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        # The runner pairs a joining phase with the one before it; a chain or a first phase
        # that joins nothing would have no streams to wait for.
        for index, phase in enumerate(self.phases):
            previous_joins = index > 0 and self.phases[index - 1].joins_running_streams
            if phase.joins_running_streams and (index == 0 or previous_joins):
                raise ValueError(f"phase {phase.label!r} of {self.name!r} has no running phase to join")


@dataclass(frozen=True)
class WorkloadSettings:
    """Knobs shared by every workload (the CLI flags)."""

    requests: int = 8  # requests per phase (at least `concurrency` per sweep level)
    max_tokens: int = 128  # output tokens for long-answer workloads
    concurrency: tuple[int, ...] = (1, 2, 4, 8)
    seed: int = 0
    tokens_per_word: float = DEFAULT_TOKENS_PER_WORD
    short_prompt_tokens: int = 64
    long_prompt_tokens: int = 1500
    short_answer_tokens: int = 16
    prefix_tokens: int = 2000
    prefix_pairs: int = 2
    mixed_streams: int = 3  # background streams of the mixed workload


def filler_text(rng: random.Random, tokens: int, tokens_per_word: float) -> str:
    """Deterministic English-like text of about `tokens` tokens (sentences of 8-16 words)."""
    words_needed = max(1, round(tokens / tokens_per_word))
    sentences: list[str] = []
    written = 0
    while written < words_needed:
        length = min(rng.randint(8, 16), words_needed - written)
        words = [rng.choice(_WORDS) for _ in range(length)]
        sentences.append(" ".join(words).capitalize() + ".")
        written += length
    return " ".join(sentences)


def _chat(text: str, task: str) -> tuple[dict[str, str], ...]:
    return ({"role": "user", "content": f"Notes:\n{text}\n\n{task}"},)


def short_prompt_long_answer(s: WorkloadSettings, rng: random.Random, count: int) -> tuple[BenchRequest, ...]:
    """Chat-style requests: a short prompt and a long answer (decode bound)."""
    return tuple(
        BenchRequest(_chat(filler_text(rng, s.short_prompt_tokens, s.tokens_per_word), _LONG_ANSWER_TASK), s.max_tokens)
        for _ in range(count)
    )


def long_prompt_short_answer(s: WorkloadSettings, rng: random.Random, count: int) -> tuple[BenchRequest, ...]:
    """Agent-style requests: a long unique prompt and a short answer (prefill bound)."""
    return tuple(
        BenchRequest(
            _chat(filler_text(rng, s.long_prompt_tokens, s.tokens_per_word), _SHORT_ANSWER_TASK),
            s.short_answer_tokens,
        )
        for _ in range(count)
    )


def shared_prefix_pair(s: WorkloadSettings, rng: random.Random) -> tuple[BenchRequest, BenchRequest]:
    """Two requests sharing a long prefix (a document); only the question at the end differs.

    The first one pays for the whole prefill; a server with prefix reuse answers the second
    after prefilling only the short suffix. The document goes in the user message, not a system
    message, because some chat templates (llama-cpp-python's "gemma") drop system messages.
    """
    document = filler_text(rng, s.prefix_tokens, s.tokens_per_word)
    questions = [filler_text(rng, 12, s.tokens_per_word) for _ in range(2)]
    first, second = (
        BenchRequest(
            ({"role": "user", "content": f"Document:\n{document}\n\nQuestion: {q} Answer briefly."},),
            s.short_answer_tokens,
        )
        for q in questions
    )
    return first, second


JSON_SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {
        "title": {"type": "string"},
        "year": {"type": "integer"},
        "tags": {"type": "array", "items": {"type": "string"}, "maxItems": 4},
        "summary": {"type": "string"},
    },
    "required": ["title", "year", "tags", "summary"],
    "additionalProperties": False,
}
"""The schema the json workload asks for (small, but with nesting, an array and an integer)."""


def json_schema_requests(s: WorkloadSettings, rng: random.Random, count: int) -> tuple[BenchRequest, ...]:
    """Structured-output requests: the answer must match `JSON_SCHEMA` (response_format json_schema)."""
    response_format = {"type": "json_schema", "json_schema": {"name": "record", "schema": JSON_SCHEMA}}
    task = "Describe the notes above as a JSON record with a title, a year, a few tags and a summary."
    return tuple(
        BenchRequest(
            _chat(filler_text(rng, s.short_prompt_tokens, s.tokens_per_word), task),
            s.max_tokens,
            response_format=response_format,
        )
        for _ in range(count)
    )


def build_workloads(names: tuple[str, ...], settings: WorkloadSettings) -> list[Workload]:
    """The requested workloads, each with its own seeded RNG so adding one does not change another."""
    unknown = [n for n in names if n not in WORKLOAD_NAMES]
    if unknown:
        raise ValueError(f"unknown workload(s) {', '.join(unknown)}; choose from {', '.join(WORKLOAD_NAMES)}")
    workloads: list[Workload] = []
    for name in WORKLOAD_NAMES:
        if name not in names:
            continue
        rng = random.Random(f"{settings.seed}:{name}")
        workloads.append(_build_one(name, settings, rng))
    return workloads


def _build_one(name: str, s: WorkloadSettings, rng: random.Random) -> Workload:
    if name == "short":
        requests = short_prompt_long_answer(s, rng, s.requests)
        return Workload(name, "short prompt, long answer, 1 stream (decode)", (Phase("c=1", 1, requests),))
    if name == "long":
        requests = long_prompt_short_answer(s, rng, s.requests)
        return Workload(name, "long prompt, short answer, 1 stream (prefill)", (Phase("c=1", 1, requests),))
    if name == "prefix":
        phases = tuple(
            Phase(f"pair {i + 1}", 1, shared_prefix_pair(s, rng), sequential=True) for i in range(s.prefix_pairs)
        )
        return Workload(
            name,
            f"two requests sharing a ~{s.prefix_tokens}-token prefix: cold, then warm",
            phases,
            extra={"prefix_tokens_target": s.prefix_tokens},
        )
    if name == "mixed":
        return _mixed(s, rng)
    if name == "sweep":
        phases = tuple(Phase(f"c={c}", c, short_prompt_long_answer(s, rng, max(s.requests, c))) for c in s.concurrency)
        return Workload(name, "short prompt, long answer, concurrency sweep (continuous batching)", phases)
    requests = json_schema_requests(s, rng, s.requests)
    return Workload(name, "json_schema structured output, 1 stream", (Phase("c=1", 1, requests),))


def _mixed(s: WorkloadSettings, rng: random.Random) -> Workload:
    """A coding agent next to other agents: its long prompt arrives while other answers stream.

    All background requests start at once (concurrency = their count), so "every stream has its
    first token" is reached while all of them are still generating.
    """
    streams = s.mixed_streams
    background = Phase(f"background c={streams}", streams, short_prompt_long_answer(s, rng, streams))
    arriving = Phase("long prompt", 1, long_prompt_short_answer(s, rng, 1), joins_running_streams=True)
    return Workload(
        "mixed",
        f"{streams} streams generating, then one ~{s.long_prompt_tokens}-token prompt arrives (chunked prefill)",
        (background, arriving),
        extra={"background_streams": streams, "long_prompt_tokens_target": s.long_prompt_tokens},
    )


def with_tokens_per_word(settings: WorkloadSettings, tokens_per_word: float) -> WorkloadSettings:
    """A copy of `settings` calibrated for a server's tokenizer."""
    return replace(settings, tokens_per_word=tokens_per_word)
