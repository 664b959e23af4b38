"""The calibration workload: single-stream decode speed, uncached prefill speed and the engine's memory.

Definitions (what the advisor's speed model predicts, so the two can be compared):
- decode tok/s, per stream: (content chunks - 1) / (last chunk - first chunk) of a greedy answer;
  the first chunk is left out because its time is the prefill's. The median over requests.
- prefill tok/s: uncached prompt tokens (usage.prompt_tokens minus prompt_tokens_details.cached_tokens)
  / time to the first token. TTFT also holds one decode step and the HTTP round trip, which a
  ~1,000-token prompt makes small. The median over requests.
- memory: the engine's own figures in /metrics, launcher_engine_memory_bytes{kind="weights"} +
  {kind="kv_cache"} + {kind="compute"} (older servers report no compute: then weights + KV).
- speculative speed-up: decode tok/s of an answer that copies a code snippet from its prompt with
  `"speculative": "auto"` over the same with "off" (launcher.bench.calibrate_speculative).
"""

from __future__ import annotations

import random
import secrets
import statistics
from dataclasses import dataclass, field

import httpx

from launcher.bench.calibrate_speculative import SpeculativeMeasurement, measure_speculative
from launcher.bench.memory import load_average
from launcher.bench.runner import RequestResult, calibrate_tokens_per_word, metrics_url, stream_chat
from launcher.bench.workloads import (
    DEFAULT_TOKENS_PER_WORD,
    WorkloadSettings,
    long_prompt_short_answer,
    short_prompt_long_answer,
)
from launcher.core import metric_names as names

MEMORY_KINDS = ("weights", "kv_cache", "compute")
REQUIRED_MEMORY_KINDS = ("weights", "kv_cache")


@dataclass(frozen=True)
class CalibrationWorkload:
    """How much to send. The defaults take well under a minute with a 270M model on two CPU cores."""

    decode_requests: int = 3
    decode_prompt_tokens: int = 64
    decode_tokens: int = 64
    prefill_requests: int = 2
    prefill_prompt_tokens: int = 1000
    prefill_max_tokens: int = 2  # one token ends the prefill; two in case the first is not content
    min_decode_chunks: int = 8  # fewer (an early stop) times too few steps to trust
    edit_copy_tokens: int = 150  # of the code snippet copied with speculation off, then on; 0: not measured


@dataclass(frozen=True)
class Measurement:
    """What the workload measured; None for what it could not."""

    decode_tps: float | None
    prefill_tps: float | None
    memory_bytes: int | None
    decode_samples: tuple[float, ...] = ()
    prefill_samples: tuple[float, ...] = ()
    prefill_prompt_tokens: tuple[int, ...] = ()  # uncached tokens of each prefill request
    memory_parts: dict[str, int] = field(default_factory=dict)
    errors: tuple[str, ...] = ()
    load_before: float | None = None  # 1-minute load average as the run began: other work skews speeds
    speculative: SpeculativeMeasurement | None = None  # None: not part of this workload

    @property
    def speculative_speedup(self) -> float | None:
        """Decode on copied text, speculation "auto" / "off" (None: not measured)."""
        return self.speculative.speedup if self.speculative is not None else None


def decode_rate(result: RequestResult, min_chunks: int) -> float | None:
    """Chunks per second after the first one, None for a failed or too short answer."""
    times = result.token_times
    if not result.ok or len(times) < max(2, min_chunks) or times[-1] <= times[0]:
        return None
    return (len(times) - 1) / (times[-1] - times[0])


def uncached_prompt_tokens(result: RequestResult) -> int | None:
    """Prompt tokens the server really had to read (None without usage)."""
    if not result.ok or not result.prompt_tokens:
        return None
    return result.prompt_tokens - (result.cached_prompt_tokens or 0)


def prefill_rate(result: RequestResult) -> float | None:
    """Uncached prompt tokens per second of time to the first token (the whole request when no content came)."""
    tokens = uncached_prompt_tokens(result)
    seconds = result.ttft if result.ttft is not None else result.e2e
    return tokens / seconds if tokens and seconds > 0 else None


async def _scrape(client: httpx.AsyncClient, base_url: str) -> list[tuple[str, dict[str, str], float]]:
    """(name, labels, value) of every sample in /metrics ([] when the server has none)."""
    from prometheus_client.parser import text_string_to_metric_families

    try:
        response = await client.get(metrics_url(base_url))
    except httpx.HTTPError:
        return []
    if response.status_code != 200:
        return []
    try:
        families = list(text_string_to_metric_families(response.text))
    except ValueError:
        return []
    return [(s.name, dict(s.labels), float(s.value)) for family in families for s in family.samples]


async def engine_memory(client: httpx.AsyncClient, base_url: str) -> dict[str, int]:
    """launcher_engine_memory_bytes by kind from /metrics ({} when the server reports none)."""
    samples = await _scrape(client, base_url)
    return {
        labels["kind"]: int(value)
        for name, labels, value in samples
        if name == names.ENGINE_MEMORY_BYTES and "kind" in labels
    }


async def stream_decode_counters(client: httpx.AsyncClient, base_url: str) -> tuple[float, float] | None:
    """The server's own per-stream decode counters (tokens after each stream's first, and the time
    they took), or None from a server without them."""
    values = {name: value for name, _, value in await _scrape(client, base_url)}
    tokens, seconds = (
        values.get(names.total(names.STREAM_DECODE_TOKENS)),
        values.get(names.total(names.STREAM_DECODE_SECONDS)),
    )
    return (tokens, seconds) if tokens is not None and seconds is not None else None


def memory_total(parts: dict[str, int]) -> int | None:
    """weights + KV (+ compute when reported): what the advisor's needed bytes predict."""
    if not all(parts.get(kind) for kind in REQUIRED_MEMORY_KINDS):
        return None
    return sum(parts.get(kind, 0) for kind in MEMORY_KINDS)


def _rate_between(before: tuple[float, float] | None, after: tuple[float, float] | None) -> float | None:
    if before is None or after is None or after[1] <= before[1]:
        return None
    return (after[0] - before[0]) / (after[1] - before[1])


def _median(values: list[float]) -> float | None:
    return statistics.median(values) if values else None


async def measure(
    client: httpx.AsyncClient, base_url: str, model: str | None, workload: CalibrationWorkload
) -> Measurement:
    """Run the calibration workload, one request at a time (single-stream speeds)."""
    load_before = load_average()
    # The two usage-measuring requests also warm the server up before anything is timed.
    tokens_per_word, _ = await calibrate_tokens_per_word(client, model=model, fallback=DEFAULT_TOKENS_PER_WORD)
    settings = WorkloadSettings(
        tokens_per_word=tokens_per_word,
        short_prompt_tokens=workload.decode_prompt_tokens,
        max_tokens=workload.decode_tokens,
        long_prompt_tokens=workload.prefill_prompt_tokens,
        short_answer_tokens=workload.prefill_max_tokens,
    )
    # Fresh text on every run: no prefix cache, ours or a previous run's, can serve these prompts.
    rng = random.Random(secrets.randbits(64))
    errors: list[str] = []
    decode: list[float] = []
    counters_before = await stream_decode_counters(client, base_url)
    for index, request in enumerate(short_prompt_long_answer(settings, rng, workload.decode_requests)):
        result = await stream_chat(client, request, model=model, seed=index)
        if (rate := decode_rate(result, workload.min_decode_chunks)) is not None:
            decode.append(rate)
        elif result.error:
            errors.append(result.error)
    # The server times each token where it is made; the client sees them after HTTP, SSE chunking and
    # its own scheduling, which is noise for a fast model (a toy GGUF makes a token in 0.1 ms).
    server_decode = _rate_between(counters_before, await stream_decode_counters(client, base_url))
    prefill: list[float] = []
    prompt_tokens: list[int] = []
    for index, request in enumerate(long_prompt_short_answer(settings, rng, workload.prefill_requests)):
        result = await stream_chat(client, request, model=model, seed=index)
        if (rate := prefill_rate(result)) is not None:
            prefill.append(rate)
            prompt_tokens.append(uncached_prompt_tokens(result) or 0)
        elif result.error:
            errors.append(result.error)
    parts = await engine_memory(client, base_url)
    speculative = (
        await measure_speculative(client, base_url, model, workload.edit_copy_tokens, workload.min_decode_chunks)
        if workload.edit_copy_tokens > 0
        else None
    )
    return Measurement(
        decode_tps=server_decode or _median(decode),
        prefill_tps=_median(prefill),
        memory_bytes=memory_total(parts),
        decode_samples=tuple(decode),
        prefill_samples=tuple(prefill),
        prefill_prompt_tokens=tuple(prompt_tokens),
        memory_parts=parts,
        errors=tuple(dict.fromkeys(errors))[:3],
        load_before=load_before,
        speculative=speculative,
    )
