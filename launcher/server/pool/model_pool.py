"""The models a server has loaded: loaded by name on request, several at once within memory,
unloaded when idle or when a newer request needs the room.

- **Single-flight.** Concurrent requests for a model that is loading wait for that one load
  (LM Studio has been seen loading a model twice under a burst); a failed load gives every
  waiter the same error.
- **Within memory.** Each load is planned by the advisor (`server.planning.plan`, the same
  decision `launcher serve MODEL` makes), and its fit's bytes are counted against the budget:
  `--memory-budget`, else what the machine had free when the server started. A model that does
  not fit beside the loaded ones first unloads the least recently used idle one; a model that
  cannot fit even alone is a 400 with the numbers, never an out-of-memory crash.
- **Never under a request.** A model is busy from the moment a request picks it until its
  generation ends (`ModelSlot.busy`); busy models are never unloaded. A load that needs their
  memory waits for them (up to `--swap-wait`, 120 s by default), then answers 503 with Retry-After.
- **Fair swaps.** While a load waits for room, the loaded models take no new requests: those
  wait until the swap is done (or given up). Otherwise a model kept busy by a stream of requests
  would never drain, and a request for another model would wait out the bound and fail.
- **Idle unload.** A model idle for its TTL (`--ttl`, a preset's `ttl`, or a request's `ttl`
  field as LM Studio takes it) is unloaded, and its memory goes back to the system.

Loads and unloads run one at a time (`_memory_lock`), so two loads never both count the same
free memory. All bookkeeping happens on the event loop; engines load and close on threads.

A model an engine serves as a child server (`--engine vllm`, a plug-in's) is loaded here too
(`load_child`: the child starts, and the load ends when it answers /health) and closed with the pool
(the child stops); its requests go to it as to an upstream (`ModelEntry.remote`), and it takes none of
this server's memory.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections import Counter
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager, suppress
from dataclasses import dataclass
from typing import Protocol

import anyio

from launcher.core.config import ServeConfig
from launcher.core.errors import LauncherError, ModelDoesNotFitError, ModelNotFoundError
from launcher.core.units import format_bytes
from launcher.engines.base import LoadedModel
from launcher.server.core.templates import load_template
from launcher.server.errors import ApiError
from launcher.server.metrics import ServerMetrics
from launcher.server.pool.model_names import ModelNames, alias_target
from launcher.server.pool.model_slot import ModelEntry, ModelSlot

log = logging.getLogger(__name__)

SWAP_RETRY_AFTER_S = 10
"""The Retry-After of a load that waited `--swap-wait` in vain."""
REAP_INTERVAL_S = 1.0
"""How often idle models are checked against their TTL."""
RESCAN_EVERY_S = 10.0
"""The library is scanned again for an unknown name at most this often."""


@dataclass(frozen=True)
class PreparedLoad:
    """A planned load: the engine, the settings and the memory it will take, and how to start it."""

    engine: str
    engine_reason: str
    config: ServeConfig
    needed_bytes: int  # the advisor's fit (0: not known, not counted against the budget)
    load: Callable[[], LoadedModel]


class Closable(Protocol):
    """What a child engine's load leaves running: closing it stops the child."""

    def close(self) -> None:
        """Stop it and free what it holds."""


Prepare = Callable[[ModelEntry], PreparedLoad]
"""Plans a load (runs on a worker thread: it may probe the machine and read the model's header)."""
Refresh = Callable[[str], Awaitable[list[ModelEntry]]]
"""Models an upstream lists now for a name this server does not know (server/upstreams/remotes.py)."""


class ModelPool:
    """Loaded models by name, with the rules above."""

    def __init__(
        self,
        names: ModelNames,
        prepare: Prepare,
        metrics: ServerMetrics,
        *,
        budget_bytes: int | None = None,
        max_models: int | None = None,
        rescan: Callable[[], list[ModelEntry]] | None = None,
        refresh: Refresh | None = None,
    ) -> None:
        self.names = names
        self.metrics = metrics
        self.budget_bytes = budget_bytes
        self.max_models = max_models
        self.slots: dict[str, ModelSlot] = {}
        self.children: dict[str, Closable] = {}  # the models child engines serve, running
        self.errors: dict[str, LauncherError] = {}  # the last failed load of each name, until one succeeds
        self.load_counts: Counter[str] = Counter()  # loads per name: a model reloaded often wants a longer TTL
        self._prepare = prepare
        self._rescan = rescan
        self._refresh = refresh
        self._rescanned_at = 0.0
        self._loading: dict[str, asyncio.Task[ModelSlot]] = {}
        self._memory_lock = asyncio.Lock()
        self._swapping_in: str | None = None  # the model whose load waits for busy models to make room
        self._swap_done = asyncio.Event()  # set when that wait ends, replaced when the next begins

    # -- which model --------------------------------------------------------------------------

    async def entry(self, requested: str) -> ModelEntry:
        """The entry a request's `model` names; a 404 listing what there is when none."""
        if self._refresh is not None and not self.names.knows(requested):
            for found in await self._refresh(requested):  # a remote's model listed since the start
                self.names.add(found)
        entry = self.names.resolve(requested)
        if entry is None and self._rescan is not None and time.monotonic() - self._rescanned_at > RESCAN_EVERY_S:
            self._rescanned_at = time.monotonic()  # pulled since the server started? (not on every typo)
            for found in await anyio.to_thread.run_sync(self._rescan):
                self.names.add(found)
            entry = self.names.resolve(requested)
        if entry is None:
            known = ", ".join(sorted(self.names.entries)) or "none"
            raise ApiError(
                404,
                f"The model {requested!r} is not served here. Models: {known}."
                + (f" Aliases: {', '.join(sorted(self.names.aliases))}." if self.names.aliases else "")
                + (
                    ""
                    if self.names.default
                    else " To answer every other name with one model, start the server with that MODEL, "
                    "or map names with --alias NAME=MODEL or a preset's aliases."
                ),
                param="model",
                code="model_not_found",
            )
        return entry

    def loaded_slot(self, requested: str) -> ModelSlot | None:
        """The loaded model `requested` names, if it is loaded."""
        entry = self.names.resolve(requested)
        return self.slots.get(entry.name) if entry is not None else None

    @property
    def used_bytes(self) -> int:
        """Memory the loaded models take, by the advisor's estimates."""
        return sum(slot.needed_bytes for slot in self.slots.values())

    # -- using a model ------------------------------------------------------------------------

    async def acquire(self, requested: str, *, ttl_s: float | None = None) -> ModelSlot:
        """The loaded model for `requested`, loading it first if needed; held until `release`."""
        entry = await self.entry(requested)
        if entry.remote is not None:
            raise remote_only_chat(entry)
        while True:
            if self._swapping_in is not None and self._swapping_in != entry.name and entry.name in self.slots:
                await self._swap_done.wait()  # no new request for a model the swap waits to drain
                continue
            slot = self.slots.get(entry.name)
            if slot is None:
                slot = await self._load_once(entry)
            if self.slots.get(entry.name) is slot:  # not unloaded between its load and now
                break
        slot.pending += 1  # no await since the check above: nothing can unload it in between
        slot.touch()
        if ttl_s is not None:
            slot.ttl_s = ttl_s
        return slot

    def release(self, slot: ModelSlot) -> None:
        """The request that acquired `slot` has started its generation (or ended)."""
        slot.pending = max(0, slot.pending - 1)
        slot.touch()

    @asynccontextmanager
    async def using(self, requested: str, *, ttl_s: float | None = None) -> AsyncIterator[ModelSlot]:
        """`acquire` ... `release`: start the generation inside; it keeps the model busy on its own."""
        slot = await self.acquire(requested, ttl_s=ttl_s)
        try:
            yield slot
        finally:
            self.release(slot)

    # -- loading ------------------------------------------------------------------------------

    async def _load_once(self, entry: ModelEntry) -> ModelSlot:
        """Load `entry`, or wait for the load already running (single-flight)."""
        task = self._loading.get(entry.name)
        if task is None:
            task = asyncio.ensure_future(self._load(entry))
            self._loading[entry.name] = task
            task.add_done_callback(lambda _: self._loading.pop(entry.name, None))
        return await asyncio.shield(task)  # a waiter that gives up does not cancel the others' load

    async def _load(self, entry: ModelEntry) -> ModelSlot:
        async with self._memory_lock:
            if entry.name in self.slots:
                return self.slots[entry.name]
            self.load_counts[entry.name] += 1
            try:
                prepared = await self._plan_beside_loaded(entry)
                started = time.monotonic()
                model = await anyio.to_thread.run_sync(prepared.load)
                try:
                    slot = self.attach(entry, model, prepared, load_seconds=time.monotonic() - started)
                except LauncherError:
                    await anyio.to_thread.run_sync(model.close)
                    raise
            except ApiError:
                raise
            except LauncherError as err:
                self.errors[entry.name] = err
                raise _load_error(entry.name, err) from err
            except Exception as err:  # an engine bug must still end in a clear error for every waiter
                log.exception("loading %s failed", entry.name)
                error = LauncherError(f"{type(err).__name__}: {err}")
                self.errors[entry.name] = error
                raise _load_error(entry.name, error) from err
        log.info("loaded %s with %s in %.1f s", entry.name, slot.engine_name, slot.load_seconds)
        return slot

    async def load_child(self, entry: ModelEntry, start: Callable[[], Closable]) -> None:
        """Load `entry`, a model a child engine serves: `start` starts the child and returns once it answers
        (on a thread: it blocks); a failure is kept as a failed load's is, and raised."""
        self.load_counts[entry.name] += 1
        started = time.monotonic()
        try:
            child = await anyio.to_thread.run_sync(start)
        except LauncherError as err:
            self.errors[entry.name] = err
            raise
        self.children[entry.name] = child
        self.errors.pop(entry.name, None)
        log.info("%s answers, served by its child engine (started in %.1f s)", entry.name, time.monotonic() - started)

    async def _plan_beside_loaded(self, entry: ModelEntry) -> PreparedLoad:
        """The plan for `entry`, after unloading idle models until it fits beside the rest."""
        try:
            return await self._plan_when_room(entry)
        finally:
            self._end_swap_wait()

    def _begin_swap_wait(self, name: str) -> None:
        """From now on the loaded models take no new requests (`acquire` waits), so they drain."""
        if self._swapping_in is None:
            self._swapping_in = name
            self._swap_done = asyncio.Event()

    def _end_swap_wait(self) -> None:
        if self._swapping_in is not None:
            self._swapping_in = None
            self._swap_done.set()

    async def _plan_when_room(self, entry: ModelEntry) -> PreparedLoad:
        wait_s = entry.config.swap_wait
        deadline = time.monotonic() + wait_s
        while True:
            try:
                prepared = await anyio.to_thread.run_sync(self._prepare, entry)
            except ModelDoesNotFitError:
                if not self.slots:
                    raise  # not even alone
                prepared = None  # the loaded models hold memory it needs: free some, plan again
            room = self._room_for(prepared)
            if prepared is not None and room is None:
                return prepared
            if not self.slots and prepared is not None:
                raise ApiError(
                    400, _too_big(entry.name, prepared, self.budget_bytes), param="model", code="model_too_large"
                )
            victim = self._least_recently_used_idle()
            if victim is not None:
                await self._unload(victim, f"to make room for {entry.name} ({room or 'memory'})")
                continue
            if time.monotonic() > deadline:
                log.warning("gave up loading %s after %d s waiting for %s to finish", entry.name, wait_s, room)
                raise ApiError(
                    503,
                    f"{entry.name} must replace a loaded model ({room}), and for {wait_s} s their requests kept "
                    f"them all busy ({', '.join(self.slots)}). Retry in a moment; --swap-wait sets how long a "
                    "request waits for a swap.",
                    headers={"Retry-After": str(SWAP_RETRY_AFTER_S)},
                    code="model_swap_timeout",
                )
            self._begin_swap_wait(entry.name)
            await asyncio.sleep(0.1)

    def _room_for(self, prepared: PreparedLoad | None) -> str | None:
        """Why `prepared` cannot load beside the loaded models now (None: it can)."""
        if prepared is None:
            return "the advisor's fit"
        if self.max_models is not None and len(self.slots) >= self.max_models:
            return f"--max-models {self.max_models}"
        if self.budget_bytes is not None and self.used_bytes + prepared.needed_bytes > self.budget_bytes:
            return (
                f"needs {format_bytes(prepared.needed_bytes)}, {format_bytes(self.used_bytes)} of the "
                f"{format_bytes(self.budget_bytes)} budget in use"
            )
        return None

    def _least_recently_used_idle(self) -> ModelSlot | None:
        idle = [slot for slot in self.slots.values() if not slot.busy]
        return min(idle, key=lambda slot: slot.last_used) if idle else None

    def attach(
        self, entry: ModelEntry, model: LoadedModel, prepared: PreparedLoad, *, load_seconds: float = 0.0
    ) -> ModelSlot:
        """Make a loaded model servable (compiles its chat template; a bad one fails the load)."""
        template = load_template(model.info)
        slot = ModelSlot(
            entry=entry,
            model=model,
            template=template,
            engine_name=prepared.engine or model.info.engine,
            engine_reason=prepared.engine_reason,
            config=prepared.config,
            needed_bytes=prepared.needed_bytes,
            metrics=self.metrics.for_model(entry.name, model.stats),
            load_seconds=load_seconds,
            ttl_s=entry.ttl_s,
        )
        self.slots[entry.name] = slot
        self.errors.pop(entry.name, None)
        return slot

    # -- unloading ----------------------------------------------------------------------------

    async def unload(self, requested: str) -> bool:
        """Unload a model now (the app's button, `launcher ps --unload`); a 409 while it is busy."""
        # By its name or an alias only: the default model answers any name, and `--unload typo` must
        # not unload it.
        target = requested if requested in self.slots else alias_target(self.names.aliases, requested)
        slot = self.slots.get(target or "")
        if slot is None:
            return False
        async with self._memory_lock:
            if slot.busy:
                raise ApiError(
                    409, f"{slot.id} is answering requests; unload it when they are done.", code="model_busy"
                )
            if self.slots.get(slot.id) is slot:
                await self._unload(slot, "on request")
        return True

    async def _unload(self, slot: ModelSlot, why: str) -> None:
        """Take `slot` out (nothing can acquire it after this line) and free its memory."""
        if self.slots.get(slot.id) is not slot or slot.busy:
            return
        del self.slots[slot.id]
        self.metrics.unloaded(slot.id)
        log.info("unloading %s %s", slot.id, why)
        await anyio.to_thread.run_sync(slot.model.close)

    async def reap_idle(self, now: float | None = None) -> list[str]:
        """Unload the models idle longer than their TTL; returns their names."""
        now = now if now is not None else time.monotonic()
        gone = []
        for slot in list(self.slots.values()):
            if slot.ttl_s is None or slot.busy:
                if slot.busy:
                    slot.touch()  # idle time counts from the end of the last request
                continue
            if slot.idle_seconds(now) >= slot.ttl_s:
                async with self._memory_lock:
                    if not slot.busy and self.slots.get(slot.id) is slot:
                        await self._unload(slot, f"after {slot.ttl_s:g} s idle")
                        gone.append(slot.id)
        return gone

    async def run_reaper(self) -> None:
        """Check TTLs until cancelled (the app's lifespan runs this)."""
        while True:
            await asyncio.sleep(REAP_INTERVAL_S)
            try:
                await self.reap_idle()
            except Exception:  # a failing close must not stop later unloads
                log.exception("idle unload failed")

    def close(self) -> None:
        """Free every model (server shutdown); loads still running end with the process."""
        for task in self._loading.values():
            task.cancel()
        slots, self.slots = list(self.slots.values()), {}
        for slot in slots:
            with suppress(Exception):
                slot.model.close()
        children, self.children = list(self.children.values()), {}
        for child in children:
            with suppress(Exception):
                child.close()


def remote_only_chat(entry: ModelEntry) -> ApiError:
    """The answer to what is not a chat request for a remote model: only chat is passed on."""
    upstream = entry.remote.upstream if entry.remote is not None else None
    where = f"the remote {upstream.name} ({upstream.base_url})" if upstream is not None else "a remote"
    return ApiError(
        400,
        f"{entry.name} is served by {where}; this server passes only chat requests to it (Chat Completions, "
        "Messages, Responses), not completions, embeddings, token counts or loads.",
        param="model",
        code="remote_model",
    )


def _load_error(name: str, err: LauncherError) -> ApiError:
    """The error every waiter of a failed load gets."""
    if isinstance(err, ModelNotFoundError):
        return ApiError(404, f"The model {name!r} cannot be loaded: {err}", param="model", code="model_not_found")
    if isinstance(err, ModelDoesNotFitError):
        return ApiError(400, str(err), param="model", code="model_too_large")
    return ApiError(503, f"The model {name!r} failed to load: {err}", code="model_load_failed")


def _too_big(name: str, prepared: PreparedLoad, budget: int | None) -> str:
    """Why a model cannot load even with nothing else loaded (only the budget can say no then)."""
    return (
        f"{name} needs {format_bytes(prepared.needed_bytes)} (the advisor's fit for context "
        f"{prepared.config.context}, {prepared.config.parallel} parallel), more than the memory budget of "
        f"{format_bytes(budget)}. Raise --memory-budget, or give it a smaller context or quant."
    )
