"""What every engine's `generate` hands back: an async iterator over one job's events.

Each engine runs its model on a scheduler thread that puts a job's `GenerationEvent`s on the
job's asyncio queue (see `launcher.engines._jobs`). `EventStream` reads that queue on the
server's loop and turns closing the stream early (aclose, task cancel, garbage collection)
into `job.cancelled = True` plus a wake-up, so the scheduler drops the job at its next step.
This module is runtime-neutral: it must not import any engine runtime.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from typing import Protocol

from launcher.engines.base import GenerationEvent


class StreamJob(Protocol):
    """The part of an engine's job that streaming and event delivery use."""

    loop: asyncio.AbstractEventLoop
    queue: asyncio.Queue[GenerationEvent]
    cancelled: bool


class Waker(Protocol):
    """A scheduler that can be told to look at cancellations now."""

    def wake(self) -> None:
        """Wake the scheduler thread (called from the event loop)."""


class EventStream(AsyncIterator[GenerationEvent]):
    """The async iterator `generate` returns; closing it early (aclose, task cancel, GC) cancels the job.

    `scheduler` is None for a job that never reached a scheduler (a request refused up front,
    whose single error event is already on the queue).
    """

    def __init__(self, job: StreamJob, scheduler: Waker | None) -> None:
        self._job = job
        self._scheduler = scheduler
        self._done = False

    def __aiter__(self) -> EventStream:
        return self

    async def __anext__(self) -> GenerationEvent:
        if self._done:
            raise StopAsyncIteration
        try:
            event = await self._job.queue.get()
        except asyncio.CancelledError:
            self._cancel()
            raise
        if event.finish_reason is not None:
            self._done = True
        return event

    def interrupt(self, reason: str) -> None:
        """End the stream at its next read with a "cancelled" finish (the server is stopping): the
        reader writes a proper end for its client, then closes the stream, which cancels the job."""
        if not self._done:
            self._job.queue.put_nowait(GenerationEvent(finish_reason="cancelled", error=reason))

    async def aclose(self) -> None:
        """Stop generating: the scheduler drops the job (and frees its sequence) before its next step."""
        self._cancel()

    def _cancel(self) -> None:
        if not self._done:
            self._done = True
            self._job.cancelled = True
            if self._scheduler is not None:
                self._scheduler.wake()

    def __del__(self) -> None:
        # A stream dropped without being exhausted or closed must not keep generating.
        if not self._done:
            self._job.cancelled = True
