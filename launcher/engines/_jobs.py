"""Scheduler plumbing the engines share: the bounded wait queue and event delivery to the loop.

Each engine's scheduler thread owns its model and its own step logic (batching, sampling,
prefix reuse); these helpers cover only what is the same everywhere: refusing a request with
QueueFullError (and a retry-after estimate) when too many already wait, the numbers stats()
reads, and handing a step's events to each request's asyncio loop in one wake-up per loop.
This module is runtime-neutral: it must not import any engine runtime.
"""

from __future__ import annotations

import asyncio
import time
from collections import deque
from dataclasses import dataclass
from typing import TypeVar

from launcher.engines._streaming import StreamJob
from launcher.engines.base import EngineStats, GenerationEvent, GenerationRequest, QueueFullError

JobT = TypeVar("JobT", bound=StreamJob)


@dataclass(frozen=True)
class SchedulerCounters:
    """A consistent-enough snapshot for stats (plain ints read without a lock)."""

    running: int
    waiting: int
    kv_used_tokens: int
    prefix_hits: int
    prefix_misses: int
    prefix_hit_tokens: int
    prefill_tokens: int
    decode_tokens: int

    def engine_stats(self, *, kv_total_tokens: int, memory: dict[str, int], kv_cap: int | None = None) -> EngineStats:
        """These counters as the EngineStats /metrics reads (`kv_cap` bounds an estimated used count)."""
        used = self.kv_used_tokens if kv_cap is None else min(self.kv_used_tokens, kv_cap)
        return EngineStats(
            requests_running=self.running,
            requests_waiting=self.waiting,
            kv_cache_used_tokens=used,
            kv_cache_total_tokens=kv_total_tokens,
            prefix_cache_hits=self.prefix_hits,
            prefix_cache_misses=self.prefix_misses,
            prefix_cache_hit_tokens=self.prefix_hit_tokens,
            memory=memory,
            prefill_tokens_total=self.prefill_tokens,
            decode_tokens_total=self.decode_tokens,
        )


@dataclass
class Tally:
    """Running totals the scheduler thread adds to; stats reads them without a lock (plain ints)."""

    prefix_hits: int = 0
    prefix_misses: int = 0
    prefix_hit_tokens: int = 0
    prefill_tokens: int = 0
    decode_tokens: int = 0

    def prefix_lookup(self, reused_tokens: int) -> None:
        """Count one prompt's prefix-cache outcome: `reused_tokens` came from the cache (0: a miss)."""
        if reused_tokens:
            self.prefix_hits += 1
            self.prefix_hit_tokens += reused_tokens
        else:
            self.prefix_misses += 1

    def snapshot(self, *, running: int, waiting: int, kv_used_tokens: int) -> SchedulerCounters:
        """These totals plus the scheduler's current occupancy, for stats()."""
        return SchedulerCounters(
            running=running,
            waiting=waiting,
            kv_used_tokens=kv_used_tokens,
            prefix_hits=self.prefix_hits,
            prefix_misses=self.prefix_misses,
            prefix_hit_tokens=self.prefix_hit_tokens,
            prefill_tokens=self.prefill_tokens,
            decode_tokens=self.decode_tokens,
        )


def prompt_problem(request: GenerationRequest, *, vocab_size: int, context: int) -> str | None:
    """Why the engine cannot run `request` as asked (the client's mistake), or None.

    Every engine checks this before queueing, so a bad request fails at once, the same way everywhere.
    """
    prompt = request.prompt_tokens
    if not prompt:
        return "the prompt is empty"
    if vocab_size and (min(prompt) < 0 or max(prompt) >= vocab_size):
        return f"the prompt has token ids outside this model's vocabulary (0..{vocab_size - 1})"
    if len(prompt) >= context:
        return (
            f"the prompt is {len(prompt)} tokens but the context is {context} tokens per "
            "request: shorten the prompt or restart the server with a larger --context"
        )
    if request.max_tokens < 1:
        return "max_tokens must be at least 1"
    return None


def refusal(request: GenerationRequest, problem: str) -> GenerationEvent:
    """The single event of a request the engine refuses for `problem` (answered with a 400)."""
    return GenerationEvent(
        finish_reason="error", error=problem, prompt_tokens=len(request.prompt_tokens), request_error=True
    )


UNLOADED = GenerationEvent(finish_reason="cancelled", error="the model has been unloaded")
"""The single event of a request made after the model was closed."""


MAX_RETRY_AFTER_S = 20.0
"""The longest Retry-After a full queue answers with: clients wait that long on a kept-alive
connection, and the server keeps idle connections open longer than this (server/connections.py)."""


class RequestPace:
    """A running average of how long a request takes, for the Retry-After of a full queue."""

    def __init__(self, initial_s: float = 2.0) -> None:
        self.average_s = initial_s

    def finished(self, submitted_at: float) -> None:
        """Count a request that was submitted at `submitted_at` (time.monotonic) and has just ended."""
        elapsed = time.monotonic() - submitted_at
        self.average_s = 0.8 * self.average_s + 0.2 * elapsed

    def queue_full(self, slots: int) -> QueueFullError:
        """The error for a refused request: retry when a place in the queue is likely free again.

        A place frees when any of the `slots` running requests ends, on average every
        `average_s / slots` seconds; waiting for the whole queue to drain would overstate it.
        """
        return QueueFullError(retry_after_s=min(MAX_RETRY_AFTER_S, max(1.0, round(self.average_s / slots, 1))))


def append_bounded(
    waiting: deque[JobT], job: JobT, *, free: int, slots: int, max_queue: int, pace: RequestPace
) -> None:
    """Queue `job` (FIFO) unless `max_queue` jobs already wait for one of `slots` (`free` of them idle).

    Cancelled jobs still in the queue do not count: they are pruned before refusing. Raises
    QueueFullError with a retry-after from `pace`. Call with the scheduler's lock held.
    """
    if len(waiting) - free >= max_queue:
        open_jobs = [j for j in waiting if not j.cancelled]
        waiting.clear()
        waiting.extend(open_jobs)
        if len(waiting) - free >= max_queue:
            raise pace.queue_full(slots)
    waiting.append(job)


class EventOutbox:
    """Events produced during one scheduler step, delivered together when the step ends."""

    def __init__(self) -> None:
        self._items: list[tuple[StreamJob, GenerationEvent]] = []

    def emit(self, job: StreamJob, event: GenerationEvent) -> None:
        """Queue `event` for `job` (scheduler thread only)."""
        self._items.append((job, event))

    def flush(self) -> None:
        """Deliver the queued events in order: one wake-up per event loop per step, not one per token."""
        if not self._items:
            return
        outbox, self._items = self._items, []
        by_loop: dict[asyncio.AbstractEventLoop, list[tuple[StreamJob, GenerationEvent]]] = {}
        for job, event in outbox:
            by_loop.setdefault(job.loop, []).append((job, event))
        for loop, items in by_loop.items():
            try:
                loop.call_soon_threadsafe(_put_all, items)
            except RuntimeError:  # the loop is closed: nobody is listening any more
                for job, _event in items:
                    job.cancelled = True


def _put_all(items: list[tuple[StreamJob, GenerationEvent]]) -> None:
    for job, event in items:
        job.queue.put_nowait(event)
