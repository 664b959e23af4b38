"""The upstream servers one server passes requests to: the registered remotes (`launcher remote add`)
and a vLLM or SGLang child it started, with the models they list under this server's names.

Each remote's models are listed when the server starts (a remote that is down then is warned
about, not fatal) and again when a request names one of its models this server has not seen
(`NAME/new-model`, at most every REFRESH_EVERY_S), so models a remote loads later work without a
restart. A remote model needs no load and takes none of this server's memory: it is a `ModelEntry`
with `remote` set, and its chat requests go through `remote_chat`.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import logging
import time
import weakref

import anyio
import httpx

from launcher.core.config import ServeConfig
from launcher.core.errors import ServerError
from launcher.server.chat import ChatOptions
from launcher.server.metrics import ServerMetrics
from launcher.server.model_slot import ModelEntry
from launcher.server.remote_chat import RemoteChat, start_remote_chat
from launcher.server.remote_metrics import RemoteGauges
from launcher.server.upstream import RemoteModel, Upstream, list_models

log = logging.getLogger(__name__)

REFRESH_EVERY_S = 5.0
"""A remote's model list is asked again for an unknown name at most this often."""


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


def list_all(upstreams: list[Upstream]) -> tuple[list[RemoteModel], list[str]]:
    """Every upstream's models, asked at once; a remote that does not answer is a warning and lists none."""
    models: list[RemoteModel] = []
    warnings: list[str] = []
    if not upstreams:
        return models, warnings
    with concurrent.futures.ThreadPoolExecutor(max_workers=min(8, len(upstreams))) as pool:
        for upstream, listed in zip(upstreams, pool.map(_try_list, upstreams), strict=True):
            if isinstance(listed, str):
                warnings.append(f"{listed}; its models are asked for again when a request names one")
            else:
                models += listed
                if not listed:
                    warnings.append(f"the remote {upstream.name} lists no models")
    return models, warnings


def _try_list(upstream: Upstream) -> list[RemoteModel] | str:
    try:
        return list_models(upstream)
    except ServerError as err:
        return str(err)


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
        self.models = {model.upstream.local_name(model.model): model for model in models or []}
        self.runs: weakref.WeakSet[RemoteChat] = weakref.WeakSet()
        self.gauges = RemoteGauges()
        self._client: httpx.AsyncClient | None = None
        self._listed_at: dict[str, float] = {}

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

    async def refresh(self, requested: str, config: ServeConfig) -> list[ModelEntry]:
        """The models a remote lists now that this server did not know, when `requested` is `NAME/...` of a
        registered remote (asked at most every REFRESH_EVERY_S); [] at once for any other name."""
        upstream = self._upstream_for(requested)
        if upstream is None or time.monotonic() - self._listed_at.get(upstream.name, 0.0) < REFRESH_EVERY_S:
            return []
        self._listed_at[upstream.name] = time.monotonic()
        try:
            listed = await anyio.to_thread.run_sync(list_models, upstream)
        except ServerError as err:
            log.warning("%s", err)
            return []
        new = [model for model in listed if upstream.local_name(model.model) not in self.models]
        for model in new:
            self.models[upstream.local_name(model.model)] = model
        return [remote_entry(config, model) for model in new]

    @property
    def client(self) -> httpx.AsyncClient:
        """The one HTTP client for every upstream (its connections are reused between requests)."""
        if self._client is None:
            # As many connections as this server accepts streams: a pool wait would stall a reply.
            limits = httpx.Limits(max_connections=1024, max_keepalive_connections=32)
            self._client = httpx.AsyncClient(limits=limits)
        return self._client

    async def start_chat(self, entry: ModelEntry, options: ChatOptions, metrics: ServerMetrics) -> RemoteChat:
        """Start `entry`'s reply upstream (errors are raised before any output)."""
        assert entry.remote is not None
        run = await start_remote_chat(
            self.client, entry.name, entry.remote, options, metrics, entry.config.max_output_tokens
        )
        self.runs.add(run)
        return run

    async def refresh_metrics(self) -> None:
        """Read the upstreams' /metrics for this server's (see remote_metrics)."""
        by_upstream: dict[Upstream, list[str]] = {upstream: [] for upstream in self.upstreams.values()}
        for model in self.models.values():
            by_upstream.setdefault(model.upstream, []).append(model.model)
        if by_upstream:
            await self.gauges.refresh(self.client, by_upstream)

    def interrupt(self, reason: str) -> list[RemoteChat]:
        """End every reply under way with a "cancelled" finish (the server is stopping); returns them."""
        running = [run for run in list(self.runs) if not run.finished]
        for run in running:
            run.interrupt(reason)
        return running

    async def aclose(self) -> None:
        """Close the connections (server shutdown)."""
        if self._client is not None:
            client, self._client = self._client, None
            with_timeout = asyncio.wait_for(client.aclose(), timeout=5)
            try:
                await with_timeout
            except TimeoutError:
                log.debug("closing the upstream connections timed out")
