"""Pieces of the engines' scheduling that need no thread: the prompt check, the running totals
stats() reads, the Retry-After of a full queue, and event delivery to the loop.

`_scheduler_base.SchedulerThread` builds the scheduler thread every engine runs from these; the
prompt check runs before that, on the event loop, so a bad request never reaches a queue.
This module is runtime-neutral: it must not import any engine runtime.
"""

from __future__ import annotations

import asyncio
import dataclasses
import time
from dataclasses import dataclass

from launcher.engines._streaming import StreamJob
from launcher.engines.base import GenerationEvent, GenerationRequest, PromptFault, QueueFullError


@dataclass
class Tally:
    """Running totals the scheduler thread adds to; stats reads them without a lock (plain ints)."""

    prefix_hits: int = 0
    prefix_misses: int = 0
    prefix_hit_tokens: int = 0
    prefill_tokens: int = 0
    decode_tokens: int = 0
    draft_tokens: int = 0  # speculative drafts verified
    accepted_draft_tokens: int = 0  # ... and accepted

    def prefix_lookup(self, reused_tokens: int) -> None:
        """Count one prompt's prefix-cache outcome: `reused_tokens` came from the cache (0: a miss)."""
        if reused_tokens:
            self.prefix_hits += 1
            self.prefix_hit_tokens += reused_tokens
        else:
            self.prefix_misses += 1


@dataclass(frozen=True)
class PromptCheck:
    """A request as the engine will run it, or why it cannot."""

    request: GenerationRequest  # max_tokens bounded by the room the context leaves after the prompt
    problem: str | None  # the client's mistake, in words that say what to change; None: it can run
    fault: PromptFault | None = None  # set for an empty or over-long prompt: the server's API error says so


def check_prompt(request: GenerationRequest, *, vocab_size: int, context: int) -> PromptCheck:
    """The one prompt check: every engine makes it before queueing, so a bad request fails at once, the
    same way everywhere, and no sequence outgrows its share of the context (`context` tokens per
    request). The server does not check again: it answers with the refusal (`refusal`)."""
    problem, fault = _prompt_problem(request, vocab_size=vocab_size, context=context)
    room = context - len(request.prompt_tokens)
    if problem is None and request.max_tokens > room:
        request = dataclasses.replace(request, max_tokens=room)
    return PromptCheck(request=request, problem=problem, fault=fault)


def _prompt_problem(
    request: GenerationRequest, *, vocab_size: int, context: int
) -> tuple[str | None, PromptFault | None]:
    prompt = request.prompt_tokens
    if not prompt:
        return "the prompt is empty", PromptFault("empty", context)
    if vocab_size and (min(prompt) < 0 or max(prompt) >= vocab_size):
        return f"the prompt has token ids outside this model's vocabulary (0..{vocab_size - 1})", None
    if len(prompt) >= context:  # the reply needs at least one token of room
        too_long = (
            f"the prompt is {len(prompt)} tokens but the context is {context} tokens per "
            "request: shorten the prompt or restart the server with a larger --context"
        )
        return too_long, PromptFault("too_long", context)
    if request.max_tokens < 1:
        return "max_tokens must be at least 1", None
    return None, None


def refusal(request: GenerationRequest, problem: str, fault: PromptFault | None = None) -> GenerationEvent:
    """The single event of a request the engine refuses for `problem` (answered with a 400)."""
    return GenerationEvent(
        finish_reason="error",
        error=problem,
        prompt_tokens=len(request.prompt_tokens),
        request_error=True,
        prompt_fault=fault,
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
