"""Turning raw request timings into the numbers docs/benchmarks.md reports.

Definitions (one place, so the report and the comparison script agree):
- TTFT: send -> first content token.
- TPOT: (last token - first token) / (completion tokens - 1), per request.
- ITL: gaps between consecutive content chunks, pooled over requests.
- decode tok/s (per stream): 1 / TPOT; prefill tok/s: prompt tokens / TTFT (upper bound on
  prefill time, since TTFT also holds queueing and one decode step).
- aggregate tok/s: all completion tokens of a phase / the phase's wall time; requests/s likewise.
"""

from __future__ import annotations

import itertools
import json
import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from launcher.bench.runner import PhaseResult, RequestResult

PERCENTILES = (50, 95, 99)


def percentile(values: Sequence[float], pct: float) -> float | None:
    """The pct-th percentile with linear interpolation between closest ranks (numpy's default).

    None for an empty sequence; pct outside 0..100 is an error.
    """
    if not 0 <= pct <= 100:
        raise ValueError(f"percentile must be within 0..100, got {pct}")
    if not values:
        return None
    ordered = sorted(values)
    rank = (len(ordered) - 1) * pct / 100
    low = math.floor(rank)
    high = min(low + 1, len(ordered) - 1)
    return ordered[low] + (ordered[high] - ordered[low]) * (rank - low)


@dataclass(frozen=True)
class Distribution:
    """Mean and p50/p95/p99 of one metric (seconds or tokens/s); None when there were no samples."""

    count: int
    mean: float | None
    p50: float | None
    p95: float | None
    p99: float | None

    @classmethod
    def of(cls, values: Sequence[float]) -> Distribution:
        """Summarise a list of samples."""
        mean = sum(values) / len(values) if values else None
        p50, p95, p99 = (percentile(values, p) for p in PERCENTILES)
        return cls(len(values), mean, p50, p95, p99)


def time_per_output_token(result: RequestResult) -> float | None:
    """TPOT of one request, None when it produced fewer than two tokens."""
    decode_time = result.decode_time
    if decode_time is None or result.completion_tokens < 2:
        return None
    return decode_time / (result.completion_tokens - 1)


def inter_token_latencies(result: RequestResult) -> list[float]:
    """Gaps between consecutive content chunks of one request."""
    times = result.token_times
    return [later - earlier for earlier, later in itertools.pairwise(times)]


@dataclass(frozen=True)
class PhaseSummary:
    """The metrics of one phase (one concurrency level of one workload)."""

    label: str
    concurrency: int
    requests: int
    errors: int
    wall_time: float
    ttft: Distribution
    tpot: Distribution
    itl: Distribution
    e2e: Distribution
    decode_tps_per_stream: Distribution
    prefill_tps: Distribution
    prompt_tokens: Distribution
    completion_tokens: Distribution
    aggregate_tps: float
    requests_per_s: float
    usage_reported: bool
    cached_prompt_tokens: int | None
    error_samples: tuple[str, ...] = ()
    extra: dict[str, Any] = field(default_factory=dict)


def summarize_phase(phase: PhaseResult) -> PhaseSummary:
    """Compute every per-phase metric from its raw request results."""
    ok = [r for r in phase.results if r.ok]
    failed = [r for r in phase.results if not r.ok]
    tpots = [t for r in ok if (t := time_per_output_token(r)) is not None]
    prefill = [r.prompt_tokens / r.ttft for r in ok if r.prompt_tokens and r.ttft]
    total_completion = sum(r.completion_tokens for r in ok)
    cached = [r.cached_prompt_tokens for r in ok if r.cached_prompt_tokens is not None]
    wall = max(phase.wall_time, 1e-9)
    return PhaseSummary(
        label=phase.label,
        concurrency=phase.concurrency,
        requests=len(phase.results),
        errors=len(failed),
        wall_time=phase.wall_time,
        ttft=Distribution.of([r.ttft for r in ok if r.ttft is not None]),
        tpot=Distribution.of(tpots),
        itl=Distribution.of([gap for r in ok for gap in inter_token_latencies(r)]),
        e2e=Distribution.of([r.e2e for r in ok]),
        decode_tps_per_stream=Distribution.of([1 / t for t in tpots if t > 0]),
        prefill_tps=Distribution.of(prefill),
        prompt_tokens=Distribution.of([float(r.prompt_tokens) for r in ok if r.prompt_tokens is not None]),
        completion_tokens=Distribution.of([float(r.completion_tokens) for r in ok]),
        aggregate_tps=total_completion / wall,
        requests_per_s=len(ok) / wall,
        usage_reported=bool(ok) and all(r.usage_reported for r in ok),
        cached_prompt_tokens=sum(cached) if cached else None,
        error_samples=tuple(sorted({r.error or "unknown error" for r in failed}))[:3],
    )


@dataclass(frozen=True)
class PrefixPair:
    """Cold vs warm TTFT of two requests sharing a long prefix."""

    prompt_tokens: int | None
    cold_ttft: float
    warm_ttft: float

    @property
    def ratio(self) -> float:
        """warm / cold TTFT: 0.25 means the second request started 4x sooner."""
        return self.warm_ttft / self.cold_ttft if self.cold_ttft > 0 else math.inf


def prefix_pairs(phases: Sequence[PhaseResult]) -> list[PrefixPair]:
    """One PrefixPair per two-request sequential phase whose both requests succeeded."""
    pairs: list[PrefixPair] = []
    for phase in phases:
        if len(phase.results) != 2:
            continue
        cold, warm = phase.results
        if cold.ok and warm.ok and cold.ttft is not None and warm.ttft is not None:
            pairs.append(PrefixPair(cold.prompt_tokens, cold.ttft, warm.ttft))
    return pairs


def json_validity(results: Sequence[RequestResult], required: Sequence[str]) -> tuple[int, int]:
    """(outputs that parse as a JSON object with every required key, outputs checked)."""
    valid = 0
    checked = 0
    for result in results:
        if not result.ok:
            continue
        checked += 1
        try:
            value = json.loads(result.text)
        except json.JSONDecodeError:
            continue
        if isinstance(value, dict) and all(key in value for key in required):
            valid += 1
    return valid, checked


@dataclass(frozen=True)
class PrefillInterference:
    """What running streams saw while a long prompt was being read (the mixed workload).

    The window runs from the long request's send to its first token. A background gap counts
    as inside it when the two tokens around it straddle any part of the window: a stream that
    pauses for a prefill chunk shows one long gap that may start before the send or end after
    the first token, and it is that whole pause a user watching the stream sees.
    """

    long_ttft: float
    long_prompt_tokens: int | None
    background_streams: int
    streams_through_window: int  # still streaming when the long prompt's first token came
    tokens_in_window: int  # background tokens that arrived inside the window
    gaps_in_window: int
    gap_in_window_max: float | None
    gap_in_window_p95: float | None
    itl_outside_window_p50: float | None


def _arrivals(result: RequestResult) -> list[float]:
    """The request's token times on the perf_counter clock shared by every request of a run."""
    return [result.sent_at + t for t in result.token_times]


def prefill_interference(background: Sequence[RequestResult], long: RequestResult) -> PrefillInterference | None:
    """Background gaps inside / outside the long prompt's read window; None when it got no token."""
    if not long.ok or long.ttft is None:
        return None
    window_start = long.sent_at
    window_end = long.sent_at + long.ttft
    inside: list[float] = []
    outside: list[float] = []
    tokens_in_window = 0
    through_window = 0
    streams = [r for r in background if r.ok]
    for result in streams:
        arrivals = _arrivals(result)
        tokens_in_window += sum(1 for t in arrivals if window_start <= t <= window_end)
        if arrivals and arrivals[-1] >= window_end:
            through_window += 1
        for earlier, later in itertools.pairwise(arrivals):
            overlaps = earlier < window_end and later > window_start
            (inside if overlaps else outside).append(later - earlier)
    return PrefillInterference(
        long_ttft=long.ttft,
        long_prompt_tokens=long.prompt_tokens,
        background_streams=len(streams),
        streams_through_window=through_window,
        tokens_in_window=tokens_in_window,
        gaps_in_window=len(inside),
        gap_in_window_max=max(inside, default=None),
        gap_in_window_p95=percentile(inside, 95),
        itl_outside_window_p50=percentile(outside, 50),
    )
