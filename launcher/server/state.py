"""What one running server knows: its config, its models (the pool) and its metrics.

A server started with a MODEL (or none, and no presets: the starter) loads it on a background
thread (the app shows /health 503 "loading" meanwhile); requests for it wait for that load, while
the library's other models load by name on request. A server with presets and no MODEL has nothing
to wait for at start; one that runs a child engine waits for the child's /health the same
way (`prepare`).
"""

from __future__ import annotations

import asyncio
import logging
import threading
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from dataclasses import dataclass, field

from launcher.core.config import ServeConfig
from launcher.core.errors import LauncherError
from launcher.server.errors import ApiError, shutting_down
from launcher.server.metrics import ServerMetrics
from launcher.server.pool.model_pool import ModelPool
from launcher.server.pool.model_slot import ModelEntry, ModelSlot
from launcher.server.request_log import current_request
from launcher.server.sse import KEEPALIVE_INTERVAL_S
from launcher.server.upstreams.remotes import Remotes

log = logging.getLogger(__name__)

DRAIN_TIMEOUT_S = 1.0  # how long a stopping server waits for streams to write their end


@dataclass
class ServerState:
    """Shared by every route of one app."""

    config: ServeConfig
    pool: ModelPool
    metrics: ServerMetrics
    startup: str | None = None  # the model loaded when the server starts (`launcher serve MODEL`)
    startup_error: LauncherError | None = None
    started: threading.Event = field(default_factory=threading.Event)  # the startup load has ended
    keepalive_s: float = KEEPALIVE_INTERVAL_S  # silence before a stream sends a keep-alive
    draining: bool = False  # the server is stopping: no new generations
    stopping: asyncio.Event = field(default_factory=asyncio.Event)  # set with `draining`, for waits to end on
    remotes: Remotes = field(default_factory=Remotes)  # the upstream servers of remote models
    prepare: Callable[[], Awaitable[None]] | None = None  # what must be ready first (a child engine's load)

    @property
    def startup_slot(self) -> ModelSlot | None:
        """The startup model while it is loaded."""
        return self.pool.slots.get(self.startup) if self.startup else None

    async def load_startup(self) -> None:
        """Load the startup model (the lifespan runs this as a task); its error is kept for /health."""
        try:
            if self.prepare is not None:
                await self.prepare()
            if self.startup is not None:
                await self.pool.acquire(self.startup)
                self.pool.release(self.pool.slots[self.startup])
        except ApiError:
            self.startup_error = self.pool.errors.get(self.startup or "") or LauncherError("the model failed to load")
        except LauncherError as err:  # from `prepare`
            self.startup_error = err
        except asyncio.CancelledError:
            raise
        finally:
            self.started.set()

    def check_open(self) -> None:
        """A 503 once the server is stopping, or while the startup model is still loading and
        failed (a server of that one model, which cannot serve it, says why on every request)."""
        if self.draining:
            raise shutting_down()
        if self.startup_error is not None and self.pool.names.serves_one_model:
            raise ApiError(503, f"The model failed to load: {self.startup_error}")

    @asynccontextmanager
    async def using(self, requested: str, ttl_s: float | None = None) -> AsyncIterator[ModelSlot]:
        """The model for a request's `model` (loaded first if it is not), held while the block
        starts its generation (which then keeps it busy); the request log records who answered."""
        self.check_open()
        record = current_request()
        if record is not None:
            record.asked = requested  # in the log even when no model answers (a swap given up, a failed load)
        slot = await self._acquire_unless_stopping(requested, ttl_s)
        try:
            self.check_open()  # a load that ended after the stop began starts no generation
            if record is not None:
                record.model, record.asked = slot.id, requested
            yield slot
        finally:
            self.pool.release(slot)

    async def _acquire_unless_stopping(self, requested: str, ttl_s: float | None) -> ModelSlot:
        """The pool's slot for `requested`, or the shutdown 503 as soon as the server stops while this
        waits (for a load, or a swap). uvicorn would cancel the request only after its grace
        period, and a stream waiting for its model would then end without a word."""
        acquiring = asyncio.ensure_future(self.pool.acquire(requested, ttl_s=ttl_s))
        stopped = asyncio.ensure_future(self.stopping.wait())
        try:
            await asyncio.wait({acquiring, stopped}, return_when=asyncio.FIRST_COMPLETED)
        except asyncio.CancelledError:  # the client left: give up the wait, and a slot it just got
            await self._abandon(acquiring)
            raise
        finally:
            stopped.cancel()
        if not acquiring.done():
            await self._abandon(acquiring)
            raise shutting_down()
        return acquiring.result()

    async def _abandon(self, acquiring: asyncio.Future[ModelSlot]) -> None:
        acquiring.cancel()
        try:
            slot = await asyncio.shield(acquiring)
        except (asyncio.CancelledError, Exception):  # the wait ended as cancelled, or failed: no slot held
            return
        self.pool.release(slot)  # it got the slot just as it was given up

    async def remote_entry(self, requested: str) -> ModelEntry | None:
        """The remote model a request's `model` names (None: a local one, or a 404 for no model at all);
        the request log records who answers."""
        try:
            entry = await self.pool.entry(requested)
        except ApiError as err:  # `NAME/typo`: say what that remote lists
            unknown = self.remotes.unknown_model(requested) if err.status == 404 else None
            if unknown is None:
                raise
            raise unknown from None
        if entry.remote is None:
            return None
        self.check_open()
        record = current_request()
        if record is not None:
            record.model, record.asked = entry.name, requested
        return entry

    def needs_load(self, requested: str) -> bool:
        """True when a request for `requested` would wait for a load."""
        return self.pool.loaded_slot(requested) is None

    async def drain(self, timeout_s: float = DRAIN_TIMEOUT_S) -> None:
        """Stop: refuse new generations and end the running ones, so each client hears that its
        reply was cut (an error in its API's terms, `generation.cut_short`) instead of a stream
        that stops mid-word or a half answer marked complete. A request waiting for a slot ends
        the same way. Generations that start while this waits (their request passed `check_open`
        just before) are ended too."""
        self.draining = True
        self.stopping.set()  # requests still waiting for a load or a swap get their 503 now
        reason = "the server is shutting down"
        relayed = self.remotes.interrupt(reason)  # at their next piece
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout_s
        told = len(relayed)  # generations to tell the log about
        while True:
            fresh = [g for slot in self.pool.slots.values() for g in list(slot.live) if not g.interrupted]
            told += len(fresh)
            if told:
                log.info("stopping: ending %d running generation(s)", told)
                told = 0
            for generation in fresh:
                await generation.interrupt(reason)
            # Until no model is busy, not only until the generations seen so far end: a request that
            # holds a model but had not started its generation yet (its engine queue counted it, its
            # first step not taken) starts it now, and is ended on the next turn of this loop.
            busy = any(slot.busy for slot in self.pool.slots.values()) or any(not r.finished for r in relayed)
            if not busy or loop.time() >= deadline:
                return
            await asyncio.sleep(0.02)
