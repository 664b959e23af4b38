"""The upstream servers one server passes requests to: the registered remotes (`launcher remote add`)
and a child engine it started (launcher/engines/child/), with the models they list under this server's names.

The server does not wait for its remotes: their model lists are asked for in the background
(`keep_listing`, at the start and every LIST_EVERY_S; a remote that is down is warned about once,
not fatal), and again when a request names a model of theirs this server has not seen
(`NAME/new-model`, at most every REFRESH_EVERY_S), so models a remote loads later work without a
restart. A model a preset, an alias or MODEL names under a remote that has not listed it yet is
served all the same (its requests go up and the remote says), and /v1/models shows it as not
ready (`available`). A name under a remote's prefix that the remote does not list is a 404 naming
what it lists (`unknown_model`), never the default model's answer. A remote model needs no load
and takes none of this server's memory: it is a `ModelEntry` with `remote` set, and its chat
requests go through `remote_chat`.
"""

from __future__ import annotations

import asyncio
import logging
import time
import weakref
from collections.abc import Callable, Coroutine
from typing import Any

import httpx

from launcher.core.config import ServeConfig
from launcher.core.errors import ServerError
from launcher.server.core.chat import ChatOptions
from launcher.server.errors import ApiError
from launcher.server.metrics import ServerMetrics
from launcher.server.pool.model_slot import ModelEntry
from launcher.server.upstreams.remote_chat import RemoteChat, start_remote_chat
from launcher.server.upstreams.remote_metrics import RemoteGauges
from launcher.server.upstreams.upstream import RemoteModel, Upstream, fetch_models

log = logging.getLogger(__name__)

REFRESH_EVERY_S = 5.0
"""A remote's model list is asked again for an unknown name at most this often."""
LIST_EVERY_S = 60.0
"""The remotes' model lists are asked again this often, in the background."""


def registered_upstreams() -> tuple[list[Upstream], list[str]]:
    """The remotes `launcher remote add` registered, with their keys, and the warnings about them (plain
    HTTP across the network, a key that cannot be found)."""
    from launcher.core.remotes import find_key, load_remotes, plain_http_warning

    upstreams, warnings = [], []
    for remote in load_remotes().values():
        insecure = plain_http_warning(remote)
        if insecure:
            warnings.append(insecure)
        key = find_key(remote)
        if key.problem:
            warnings.append(key.problem)
        upstreams.append(Upstream(remote.name, remote.url, key.key, prefix=remote.name + "/"))
    return upstreams, warnings


def remote_entry(
    config: ServeConfig, model: RemoteModel, name: str | None = None, *, origin: str = "remote"
) -> ModelEntry:
    """The entry that serves `model` under `name` (default: the upstream's name for it) with `config`'s
    limits (its --max-output-tokens)."""
    name = name or model.upstream.local_name(model.model)
    settings = config.model_copy(update={"model": name, "presets": {}, "alias": []})
    return ModelEntry(name, settings, None, origin, remote=model)


class Remotes:
    """The upstreams, their models by this server's names, and what is under way with them."""

    def __init__(self, upstreams: list[Upstream] | None = None, models: list[RemoteModel] | None = None) -> None:
        self.upstreams = {upstream.name: upstream for upstream in upstreams or []}
        self.models: dict[str, RemoteModel] = {}
        self.runs: weakref.WeakSet[RemoteChat] = weakref.WeakSet()
        self.gauges = RemoteGauges()
        self._client: httpx.AsyncClient | None = None
        self._listed_at: dict[str, float] = {}
        self._listed: dict[str, set[str]] = {}  # upstream name -> the model ids its last answer listed
        self._failures: dict[str, str] = {}  # upstream name -> why its last listing failed
        self._starting: set[asyncio.Task[RemoteChat]] = set()  # chat requests waiting for their answer to start
        self._stopping = False
        self._background: set[asyncio.Task[None]] = set()
        self._learn(models or [])  # given: a child engine's model, known without asking

    def _learn(self, models: list[RemoteModel]) -> list[RemoteModel]:
        """Note `models` as listed by their upstreams; returns the ones not known before."""
        new = []
        for model in models:
            self._listed.setdefault(model.upstream.name, set()).add(model.model)
            self._failures.pop(model.upstream.name, None)
            name = model.upstream.local_name(model.model)
            if name not in self.models:
                self.models[name] = model
                new.append(model)
        return new

    def available(self, model: RemoteModel) -> bool:
        """True once `model`'s upstream has listed it (until then its requests go up all the same)."""
        return model.model in self._listed.get(model.upstream.name, ())

    def entries(self, config: ServeConfig) -> list[ModelEntry]:
        """An entry for every model the upstreams listed."""
        return [remote_entry(config, model) for model in self.models.values()]

    def named(self, name: str) -> RemoteModel | None:
        """The remote model `name` stands for: one a remote listed, or `NAME/model` of a registered remote
        that did not answer yet (so a preset or an alias may point at a remote that is down at the start)."""
        listed = self.models.get(name)
        if listed is not None:
            return listed
        upstream = self._upstream_for(name)
        return RemoteModel(upstream, name.removeprefix(upstream.prefix)) if upstream is not None else None

    def _upstream_for(self, name: str) -> Upstream | None:
        return next(
            (u for u in self.upstreams.values() if u.prefix and name.startswith(u.prefix) and name != u.prefix), None
        )

    def unknown_model(self, requested: str) -> ApiError | None:
        """The 404 for a name under a remote's prefix that it does not list (None for any other name): what
        it lists, or that it has not answered yet."""
        upstream = self._upstream_for(requested)
        if upstream is None:
            return None
        listed = self._listed.get(upstream.name)
        if listed:
            what = "its models: " + ", ".join(sorted(upstream.local_name(model) for model in listed)[:50])
        elif listed is not None:
            what = "it lists no models"
        else:
            failure = self._failures.get(upstream.name)
            what = f"it has not listed its models yet ({failure or 'not answered yet'})"
        return ApiError(
            404,
            f"The model {requested!r} is not served by the remote {upstream.name}: {what}.",
            param="model",
            code="model_not_found",
        )

    async def refresh(self, requested: str, config: ServeConfig) -> list[ModelEntry]:
        """The models a remote lists now that this server did not know, when `requested` is `NAME/...` of a
        registered remote (asked at most every REFRESH_EVERY_S); [] at once for any other name."""
        upstream = self._upstream_for(requested)
        if upstream is None or time.monotonic() - self._listed_at.get(upstream.name, 0.0) < REFRESH_EVERY_S:
            return []
        new = await self._list(upstream)
        return [remote_entry(config, model) for model in new or []]

    async def _list(self, upstream: Upstream) -> list[RemoteModel] | None:
        """Ask `upstream` for its models (bounded: upstream.LIST_TIMEOUT_S); the new ones, or None when it failed."""
        self._listed_at[upstream.name] = time.monotonic()
        try:
            listed = await fetch_models(self.client, upstream)
        except ServerError as err:
            self._failures[upstream.name] = str(err)
            return None
        self._listed[upstream.name] = set()  # what it lists now (a model it dropped stays served: it says)
        return self._learn(listed)

    async def keep_listing(
        self, config: ServeConfig, add: Callable[[ModelEntry], None], warn: Callable[[str], None]
    ) -> None:
        """Ask every registered remote for its models now and every LIST_EVERY_S, all at once, handing the
        new ones to `add`; `warn` hears once about a remote that does not answer or lists nothing."""
        warned: set[str] = set()

        async def one(upstream: Upstream) -> None:
            new = await self._list(upstream)
            for model in new or []:
                add(remote_entry(config, model))
            problem = self._failures.get(upstream.name) if new is None else None
            if problem is None and not self._listed.get(upstream.name):
                problem = f"the remote {upstream.name} lists no models"
            if problem is not None and upstream.name not in warned:
                warned.add(upstream.name)
                warn(f"{problem}; its models are asked for again in the background")
            elif problem is None:
                warned.discard(upstream.name)

        registered = [u for u in self.upstreams.values() if u.prefix]  # a child's model is known already
        while registered:
            await asyncio.gather(*(one(upstream) for upstream in registered))
            await asyncio.sleep(LIST_EVERY_S)

    def in_background(self, work: Coroutine[Any, Any, None]) -> None:
        """Run `work` as a background task of the remotes', until `aclose` (the listing, a metrics reading)."""
        task = asyncio.create_task(work)
        self._background.add(task)
        task.add_done_callback(self._background.discard)

    @property
    def client(self) -> httpx.AsyncClient:
        """The one HTTP client for every upstream (its connections are reused between requests)."""
        if self._client is None:
            # As many connections as this server accepts streams: a pool wait would stall a reply.
            limits = httpx.Limits(max_connections=1024, max_keepalive_connections=32)
            self._client = httpx.AsyncClient(limits=limits)
        return self._client

    async def start_chat(self, entry: ModelEntry, options: ChatOptions, metrics: ServerMetrics) -> RemoteChat:
        """Start `entry`'s reply upstream (errors are raised before any output; a 503 when the server stops
        while the remote has not started answering)."""
        assert entry.remote is not None
        if self._stopping:
            raise _shutting_down()
        starting = asyncio.ensure_future(
            start_remote_chat(self.client, entry.name, entry.remote, options, metrics, entry.config.max_output_tokens)
        )
        self._starting.add(starting)
        try:
            run = await starting
        except asyncio.CancelledError:
            current = asyncio.current_task()
            if self._stopping and current is not None and not current.cancelling():
                raise _shutting_down() from None  # `interrupt` cancelled the wait, not the client going away
            raise
        finally:
            self._starting.discard(starting)
        self.runs.add(run)
        return run

    async def refresh_metrics(self) -> None:
        """Start reading the upstreams' /metrics in the background, for this server's next scrapes (see
        remote_metrics); returns at once: this server's /metrics never waits on a remote."""
        by_upstream: dict[Upstream, list[str]] = {upstream: [] for upstream in self.upstreams.values()}
        for model in self.models.values():
            by_upstream.setdefault(model.upstream, []).append(model.model)
        if by_upstream and not self._stopping:
            reading = self.gauges.start_refresh(self.client, by_upstream)
            if reading is not None:
                self.in_background(reading)

    def interrupt(self, reason: str) -> list[RemoteChat]:
        """End every reply under way with a "cancelled" finish, and answer the requests still waiting for a
        remote to start answering with a 503 (the server is stopping); returns the replies."""
        self._stopping = True
        for starting in list(self._starting):
            starting.cancel()
        running = [run for run in list(self.runs) if not run.finished]
        for run in running:
            run.interrupt(reason)
        return running

    async def aclose(self) -> None:
        """Stop the background work and close the connections (server shutdown)."""
        self._stopping = True
        for task in list(self._background):
            task.cancel()
        if self._background:
            await asyncio.wait(set(self._background), timeout=5)
        if self._client is not None:
            client, self._client = self._client, None
            with_timeout = asyncio.wait_for(client.aclose(), timeout=5)
            try:
                await with_timeout
            except TimeoutError:
                log.debug("closing the upstream connections timed out")


def _shutting_down() -> ApiError:
    return ApiError(503, "The server is shutting down.", headers={"Retry-After": "2"})
