"""The calibration workload's edit-copy measurement: how much faster speculative decoding makes an answer
that copies text from its prompt, as an agent's answer does when it rewrites a file with a small change.

One fixed ~1.5 kB Python snippet and a completion-style prompt asking for it again (so a base model copies
it too), sent twice, greedy and streamed, on /v1/completions: with `"speculative": "off"` and with
`"speculative": "auto"`. The speed-up is auto's decode tok/s over off's. Decode tok/s: the server's own
per-stream decode counters (launcher_stream_decode_tokens_total / _seconds_total, tokens after the first
over the time they took) where /metrics has them, else (completion tokens - 1) / (last chunk - first
chunk) as the client sees them.

Skipped (a reason, no speed-up) against a server whose /metrics has no launcher_speculative_draft_tokens
(not a launcher serve, or one from before speculation: it would ignore the field and both answers would
be decoded alike), one that rejects the request, or one that drafted while told "off". An engine that
drafts nothing with "auto" is measured all the same: its ~1.0x is what speculation gives it.
"""

from __future__ import annotations

import asyncio
import json
import time
from dataclasses import dataclass
from typing import Any

import httpx

from launcher.bench.runner import ServerUnreachable, fetch_metrics, sse_events
from launcher.core import metric_names as names

DRAFT_TOKENS = names.total(names.SPECULATIVE_DRAFT_TOKENS)
ACCEPTED_TOKENS = names.total(names.SPECULATIVE_ACCEPTED_TOKENS)
DECODE_TOKENS = names.total(names.STREAM_DECODE_TOKENS)
DECODE_SECONDS = names.total(names.STREAM_DECODE_SECONDS)
_SETTLE_TRIES = 20  # a stream's counters are added as it closes, just after its last byte: wait up to ~1 s
_SETTLE_DELAY = 0.05

EDIT_SNIPPET = '''\
def merge_intervals(intervals: list[tuple[int, int]]) -> list[tuple[int, int]]:
    """Merge overlapping [start, end) intervals and return them sorted by start."""
    if not intervals:
        return []
    ordered = sorted(intervals, key=lambda pair: pair[0])
    merged = [ordered[0]]
    for start, end in ordered[1:]:
        last_start, last_end = merged[-1]
        if start <= last_end:
            merged[-1] = (last_start, max(last_end, end))
        else:
            merged.append((start, end))
    return merged


def total_covered(intervals: list[tuple[int, int]]) -> int:
    """How many points the intervals cover together, each point counted once."""
    return sum(end - start for start, end in merge_intervals(intervals))


class Schedule:
    """A day's bookings, in minutes since midnight."""

    def __init__(self, opening: int = 9 * 60, closing: int = 17 * 60) -> None:
        self.opening = opening
        self.closing = closing
        self.bookings: list[tuple[int, int]] = []

    def book(self, start: int, minutes: int) -> bool:
        """Book `minutes` from `start` if that time is free and within opening hours."""
        end = start + minutes
        if start < self.opening or end > self.closing:
            return False
        if any(start < b_end and b_start < end for b_start, b_end in self.bookings):
            return False
        self.bookings.append((start, end))
        return True

'''


def edit_copy_prompt() -> str:
    """The snippet, then the request for the same code, the answer's code block already opened."""
    return f"# scheduling.py\n```python\n{EDIT_SNIPPET}```\nThe same code again:\n```python\n"


@dataclass(frozen=True)
class CopyStream:
    """One streamed completion as the client saw it (perf_counter() times)."""

    completion_tokens: int = 0
    first: float | None = None
    last: float | None = None
    error: str | None = None

    def decode_tps(self, min_tokens: int) -> float | None:
        """(completion tokens - 1) / (last chunk - first chunk); None for too short an answer."""
        if self.first is None or self.last is None or self.last <= self.first or self.completion_tokens < min_tokens:
            return None
        return (self.completion_tokens - 1) / (self.last - self.first)


@dataclass(frozen=True)
class SpeculativeMeasurement:
    """The edit-copy answer's decode tok/s with speculative decoding off and on ("auto")."""

    off_tps: float | None = None
    auto_tps: float | None = None
    draft_tokens: int | None = None  # drafted (and verified) during the "auto" answer
    accepted_tokens: int | None = None
    skipped: str | None = None  # why there is no speed-up

    @property
    def speedup(self) -> float | None:
        """auto / off decode tok/s; None when skipped or either was not measured."""
        if self.skipped is not None or not self.off_tps or not self.auto_tps:
            return None
        return self.auto_tps / self.off_tps


def copy_request_body(model: str | None, mode: str, max_tokens: int) -> dict[str, Any]:
    """The /v1/completions body: greedy, streamed with usage, speculation `mode` for this request only."""
    body: dict[str, Any] = {
        "prompt": edit_copy_prompt(),
        "max_tokens": max_tokens,
        "temperature": 0.0,
        "seed": 0,
        "stream": True,
        "stream_options": {"include_usage": True},
        "speculative": mode,
    }
    if model:
        body["model"] = model
    return body


async def stream_copy(client: httpx.AsyncClient, body: dict[str, Any]) -> CopyStream:
    """POST /v1/completions and time its text chunks; tokens from usage (chunks without it)."""
    first: float | None = None
    last: float | None = None
    chunks, usage_tokens = 0, None
    try:
        async with client.stream("POST", "completions", json=body) as response:
            if response.status_code != 200:
                detail = (await response.aread()).decode("utf-8", "replace")[:200]
                return CopyStream(error=f"HTTP {response.status_code}: {detail}")
            async for event in sse_events(response):
                now = time.perf_counter()
                if "error" in event:
                    return CopyStream(error=str(event["error"])[:200])
                choices = event.get("choices") or []
                if choices and choices[0].get("text"):
                    chunks += 1
                    first = first or now
                    last = now
                usage = event.get("usage")
                if isinstance(usage, dict) and usage.get("completion_tokens") is not None:
                    usage_tokens = int(usage["completion_tokens"])
    except httpx.ConnectError as err:
        raise ServerUnreachable(str(err)) from err
    except (httpx.HTTPError, json.JSONDecodeError, TypeError, ValueError, AttributeError) as err:
        return CopyStream(error=f"{type(err).__name__}: {err}")
    return CopyStream(usage_tokens if usage_tokens is not None else chunks, first, last)


async def _settled(client: httpx.AsyncClient, base_url: str, before: dict[str, float]) -> dict[str, float] | None:
    """/metrics once the last stream's decode counters are in (at most ~1 s; then as they are)."""
    samples = await fetch_metrics(client, base_url)
    for _ in range(_SETTLE_TRIES):
        if samples is None or DECODE_TOKENS not in before or samples.get(DECODE_TOKENS, 0) > before[DECODE_TOKENS]:
            break
        await asyncio.sleep(_SETTLE_DELAY)
        samples = await fetch_metrics(client, base_url)
    return samples


def _server_rate(before: dict[str, float], after: dict[str, float] | None) -> float | None:
    """Decode tok/s of the one stream between two scrapes, by the server's own counters."""
    if after is None or DECODE_SECONDS not in before or DECODE_SECONDS not in after:
        return None
    seconds = after[DECODE_SECONDS] - before[DECODE_SECONDS]
    tokens = after.get(DECODE_TOKENS, 0.0) - before.get(DECODE_TOKENS, 0.0)
    return tokens / seconds if seconds > 0 and tokens > 0 else None


def _delta(before: dict[str, float], after: dict[str, float] | None, name: str) -> int | None:
    if after is None or name not in before or name not in after:
        return None
    return round(after[name] - before[name])


async def measure_speculative(
    client: httpx.AsyncClient, base_url: str, model: str | None, max_tokens: int, min_tokens: int
) -> SpeculativeMeasurement:
    """The edit-copy answer with speculation off, then "auto" (one request each, one at a time)."""
    before = await fetch_metrics(client, base_url)
    if before is None or DRAFT_TOKENS not in before:
        return SpeculativeMeasurement(skipped="the server reports no speculative decoding in its /metrics")
    rates: dict[str, float] = {}
    scrapes = [before]
    for mode in ("off", "auto"):
        result = await stream_copy(client, copy_request_body(model, mode, max_tokens))
        if result.error is not None:
            return SpeculativeMeasurement(skipped=f"the {mode!r} request failed ({result.error})")
        after = await _settled(client, base_url, scrapes[-1])
        rate = _server_rate(scrapes[-1], after) if result.completion_tokens >= min_tokens else None
        rate = rate or result.decode_tps(min_tokens)
        if rate is None:
            return SpeculativeMeasurement(
                skipped=f"the {mode!r} answer was too short to time ({result.completion_tokens} tokens)"
            )
        rates[mode] = rate
        if after is None:
            return SpeculativeMeasurement(skipped="the server's /metrics stopped answering")
        scrapes.append(after)
    _, off_done, auto_done = scrapes
    if (_delta(before, off_done, DRAFT_TOKENS) or 0) > 0:
        return SpeculativeMeasurement(
            rates["off"], rates["auto"], skipped="the server drafted tokens with speculation off"
        )
    return SpeculativeMeasurement(
        off_tps=rates["off"],
        auto_tps=rates["auto"],
        draft_tokens=_delta(off_done, auto_done, DRAFT_TOKENS),
        accepted_tokens=_delta(off_done, auto_done, ACCEPTED_TOKENS),
    )
