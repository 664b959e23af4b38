"""Run the app under uvicorn on a socket we bind ourselves (so `--port 0` reports the real port)."""

from __future__ import annotations

import asyncio
import errno
import ipaddress
import json
import logging
import os
import secrets
import signal
import socket
import sys
import threading
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

from launcher.core.config import ServeConfig
from launcher.core.errors import ConfigError, LauncherError, ServerError
from launcher.core.server_records import ERROR_PREFIX, READY_PREFIX, record_server, remove_record
from launcher.engine_specs import runs_as_child
from launcher.server.metrics import ServerMetrics
from launcher.server.pool.library_models import LibraryModels, file_key, library_models
from launcher.server.pool.model_names import library_entry, server_names
from launcher.server.pool.model_pool import ModelPool, PreparedLoad
from launcher.server.pool.model_slot import ModelEntry
from launcher.server.pool.planning import ServeSetup, plan, resolve
from launcher.server.upstreams.remotes import Remotes, registered_upstreams
from launcher.server.upstreams.upstream import RemoteModel, Upstream

if TYPE_CHECKING:
    import uvicorn
    from starlette.applications import Starlette

    from launcher.catalog.library import LibraryEntry
    from launcher.engines.child.engine import ChildPlan
    from launcher.hardware.machine import Machine
    from launcher.server.state import ServerState

log = logging.getLogger(__name__)


def bind_socket(host: str, port: int) -> socket.socket:
    """A listening socket on host:port; a taken port is a clear ServerError."""
    try:
        family = socket.AF_INET6 if isinstance(ipaddress.ip_address(host), ipaddress.IPv6Address) else socket.AF_INET
    except ValueError:
        family = socket.AF_INET  # a host name such as "localhost"
    sock = socket.socket(family, socket.SOCK_STREAM)
    if sys.platform != "win32":
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        sock.bind((host, port))
        sock.listen(2048)
    except OSError as err:
        sock.close()
        if err.errno == errno.EADDRINUSE:
            raise ServerError(
                f"Port {port} on {host} is already in use (another server, or launcher serve already running). "
                "Choose another with --port N, or --port 0 to pick a free one."
            ) from err
        if err.errno == errno.EADDRNOTAVAIL:
            raise ServerError(f"Cannot bind {host}: this machine has no such address. Check --host.") from err
        raise ServerError(f"Cannot listen on {host}:{port}: {err.strerror or err}") from err
    sock.setblocking(False)
    return sock


def public_url(host: str, port: int) -> str:
    """The URL clients on this machine use for a server bound to host:port."""
    if host in ("0.0.0.0", ""):
        host = "127.0.0.1"
    elif host == "::":
        host = "::1"
    if ":" in host:
        host = f"[{host}]"
    return f"http://{host}:{port}"


def uvicorn_server(app: Starlette, config: ServeConfig, **overrides: Any) -> uvicorn.Server:
    """The uvicorn server for `app` with the launcher's connection limits and a graceful stop."""
    import uvicorn

    from launcher.server.connections import KEEPALIVE_S, guarded_protocol, raise_file_limit

    state = app.state.server

    class DrainingServer(uvicorn.Server):
        """On a stop signal, running streams get their proper end before connections close."""

        async def shutdown(self, sockets: list[socket.socket] | None = None) -> None:
            await state.drain()
            await super().shutdown(sockets)

    settings: dict[str, Any] = {
        # uvicorn follows `launcher --log-level` (its startup chatter only from INFO down)
        "log_level": "info" if logging.getLogger().isEnabledFor(logging.INFO) else "warning",
        "access_log": False,  # the request log (server/request_log.py) says more, in one line per request
        # uvicorn's records go to the process's handlers (core/logging.py), which escape what clients
        # sent, rather than to handlers of uvicorn's own that would print it raw
        "log_config": None,
        "lifespan": "on",
        "timeout_graceful_shutdown": 3,
        "timeout_keep_alive": KEEPALIVE_S,
        "http": guarded_protocol(raise_file_limit(config.max_connections)),
    }
    return DrainingServer(uvicorn.Config(app, **(settings | overrides)))


def serves_library(config: ServeConfig) -> bool:
    """True when the local library's models load by name on request: `library`, beside an engine that runs
    in this process (one that runs as a child server serves its one model; the library's would need another)."""
    return config.library and not runs_as_child(config.engine)


def serves_many(config: ServeConfig) -> bool:
    """True when models may load by name on request (the library or presets), not one model alone."""
    return serves_library(config) or bool(config.presets)


def _free_memory(machine: Machine) -> int:
    """What the machine has free for models now: RAM, plus the discrete GPUs' free memory (a Mac's
    GPU shares the RAM). The default memory budget, taken once at the start, before any load."""
    gpus = 0 if machine.apple is not None else sum(gpu.memory_free for gpu in machine.gpus)
    return machine.memory.available + gpus


def _pool_for(
    config: ServeConfig,
    first: ServeSetup | None,
    metrics: ServerMetrics,
    remotes: Remotes,
    served_remote: str | None,
    scanned: list[LibraryEntry] | None = None,
) -> ModelPool:
    """The pool of a real server: loads planned by the advisor on the machine as it is at each load,
    the MODEL argument's (already planned by `serve`) first; `served_remote` is the MODEL argument
    when an upstream serves it (a remote's `NAME/model`, a child engine's model)."""
    from launcher.engines import registry
    from launcher.hardware.probe import probe_machine

    served_files = {file_key(first.model.path): first.model.name} if first is not None else {}
    for name, preset in config.presets.items():  # a typo in a preset stops the start, not its first request
        if remotes.named(preset.model) is not None:
            continue
        try:
            served_files.setdefault(file_key(resolve(preset.model, scanned).path), name)
        except LauncherError as err:
            raise ConfigError(f"[models.{name}] model = {preset.model!r}: {err}") from err

    def rescan_library() -> list[ModelEntry]:  # a model pulled since the start
        return [library_entry(config, name) for name in library_models(served_files).names]

    startup = first.model.name if first is not None else served_remote
    library = library_models(served_files, scanned) if serves_library(config) else LibraryModels()
    served_as = (config.model,) if config.model else ()
    names = server_names(config, startup, library.names, served_as, remotes, library.same_files)
    planned = {startup: first} if first is not None and startup is not None else {}

    def prepare(entry: ModelEntry) -> PreparedLoad:
        setup = planned.pop(entry.name, None) or plan(entry.config)  # plan() probes the machine now
        engine = registry.get(setup.engine)
        return PreparedLoad(
            setup.engine,
            setup.engine_reason,
            setup.config,
            setup.needed_bytes,
            lambda: engine.load(setup.model, setup.config),
        )

    budget = config.memory_budget_bytes
    if budget is None and serves_many(config):
        budget = _free_memory(probe_machine())
    return ModelPool(
        names,
        prepare,
        metrics,
        budget_bytes=budget,
        max_models=config.max_models,
        rescan=rescan_library if serves_library(config) else None,
        refresh=lambda requested: remotes.refresh(requested, config),
    )


def _remotes(config: ServeConfig, planned: ChildPlan | None) -> tuple[Remotes, str | None]:
    """The registered remotes (their models are listed in the background once the server runs: a
    remote never holds the start; warnings go to stderr), the child engine's model, and which of
    them the MODEL argument names (None: a local model, or none)."""
    upstreams, warnings = registered_upstreams()
    for warning in warnings:
        _warn(warning)
    models: list[RemoteModel] = []
    served: str | None = None
    if planned is not None:  # the child engine: an upstream whose model is known before it answers
        child = planned.child
        upstream = Upstream(child.engine, child.base_url, child.api_key, engine=child.engine)
        upstreams.append(upstream)
        models.append(RemoteModel(upstream, child.served_name, planned.context))
        served = child.served_name
    remotes = Remotes(upstreams, models)
    if served is None and config.model and remotes.named(config.model) is not None:
        served = config.model  # `launcher serve gpu/qwen3`: a remote model answers every other name
    return remotes, served


def _warn(warning: str) -> None:
    print(f"warning: {warning}", file=sys.stderr, flush=True)


def _plan_child(config: ServeConfig) -> ChildPlan | None:
    """An engine that runs as a child server (`--engine vllm`, a plug-in's): its port, key and command,
    decided before the server binds (None for an engine that runs in this process). The model pool
    starts it (its load)."""
    if not runs_as_child(config.engine):
        return None
    from launcher.engines.registry import child

    return child(config.engine).plan(config)


def serve(config: ServeConfig) -> int:
    """Plan, bind, load (in the background, /health says 503 meanwhile), announce, serve until a signal.

    MODEL (the starter when neither it nor a preset is given) is loaded at the start and answers the
    names nothing else matches; the library's other models (unless `--no-library`) and the presets
    load by name on request. The registered remotes' models are
    served as `NAME/model` (server/upstreams/remotes.py); an engine that runs as a child server (`--engine vllm`)
    is loaded by the pool as the child's start and served through it (engines/child/), and every child
    is stopped on the way out.
    """
    if not config.is_loopback and not config.api_key:
        config = config.model_copy(update={"api_key": secrets.token_urlsafe(24)})
        print(
            f"Binding {config.host} exposes the server to the network; API key required: {config.api_key}",
            file=sys.stderr,
            flush=True,
        )
    if config.log_requests != "off":  # the request log shows at the default WARNING level too, as llama-server's
        logging.getLogger("launcher.requests").setLevel(logging.INFO)
    child = _plan_child(config)  # a missing engine or a model it cannot plan stops the start here
    if child is None:
        return _serve(config, None)
    return _serve_with_child(config, child)


class _Terminated(BaseException):
    """SIGTERM arrived: the child is stopped before the server goes as the signal says."""


def _serve_with_child(config: ServeConfig, child: ChildPlan) -> int:
    """`_serve`, stopping the child on every way out (the pool stops it as it closes; this also stops one
    still starting). uvicorn answers SIGTERM with a graceful stop and then
    raises the signal again with the handler it found, which by default ends the process at once: this
    handler turns that into an exception, so the child is stopped first and the signal then ends us."""

    def terminated(signum: int, frame: object) -> None:
        raise _Terminated(signum)

    main_thread = threading.current_thread() is threading.main_thread()
    previous = signal.signal(signal.SIGTERM, terminated) if main_thread else None
    ended_by: int | None = None
    try:
        return _serve(config, child)
    except _Terminated as stop:
        ended_by = int(stop.args[0])
        return 128 + ended_by
    finally:
        from launcher.engines.child.process import stop_children

        stop_children()
        if main_thread:
            signal.signal(signal.SIGTERM, previous)
        if ended_by is not None:
            signal.raise_signal(ended_by)


def _serve(config: ServeConfig, planned: ChildPlan | None) -> int:
    from launcher.catalog.library import scan_library
    from launcher.server.app import serving_app
    from launcher.server.state import ServerState

    remotes, served_remote = _remotes(config, planned)
    # MODEL, or the starter when neither MODEL nor a preset says what to serve (the library, on by
    # default, only adds models loaded on request); presets alone load everything on request.
    has_startup_model = (bool(config.model) or not config.presets) and served_remote is None
    # One scan of the local library for the start (each reads every model's header): it finds MODEL
    # and the presets' models, and lists the library's models the server loads by name.
    scanned = scan_library() if serves_library(config) else None
    first = plan(config, library=scanned) if has_startup_model else None
    # Other models are planned from the settings as given, not from the startup model's decision
    # (its context and GPU layers would not suit a model of another size).
    asked = config
    if first is not None:
        config = first.config
    metrics = ServerMetrics()
    pool = _pool_for(asked, first, metrics, remotes, served_remote, scanned)
    state = ServerState(
        config=config,
        pool=pool,
        metrics=metrics,
        startup=first.model.name if first else None,
        remotes=remotes,
    )
    sock = bind_socket(config.host, config.port)
    port = sock.getsockname()[1]
    app = serving_app(state)
    server = uvicorn_server(app, config)
    if first is not None:
        print(f"Loading {first.model.name} with {first.engine} ({first.engine_reason})...", file=sys.stderr, flush=True)
    if planned is not None and served_remote is not None:
        state.prepare = _child_load(config, pool, pool.names.entries[served_remote], planned, server)
    exit_code = 0

    async def watch_child() -> None:
        """A child that dies leaves nothing to serve: the server stops with its error."""
        nonlocal exit_code
        assert planned is not None
        child = planned.child
        while not server.should_exit:
            code = child.exited()
            if code is not None and not child.stopping:
                print(f"error: {child.failure(f'{child.engine} exited with code {code}')}", file=sys.stderr, flush=True)
                exit_code = 1
                server.should_exit = True
                return
            await asyncio.sleep(1.0)

    async def forget_when_stopping() -> None:
        """Remove the run file as soon as the server starts to stop: uvicorn ends a SIGTERM'd process
        by raising the signal again once it has stopped, which skips any `finally` of ours."""
        while not server.should_exit:
            await asyncio.sleep(0.1)
        for path in record:
            remove_record(path)

    async def main() -> int:
        serving = asyncio.create_task(server.serve(sockets=[sock]))
        remotes.in_background(remotes.keep_listing(asked, pool.names.add, _warn))  # never waited for
        while not server.started and not serving.done():
            await asyncio.sleep(0.02)
        while not state.started.is_set() and not serving.done():
            await asyncio.sleep(0.05)
        if serving.done():
            return 1
        if state.startup_error is not None:
            error = state.startup_error
            print(ERROR_PREFIX + json.dumps({"kind": type(error).__name__, "message": str(error)}), flush=True)
            print(f"error: {error}", file=sys.stderr, flush=True)
            server.should_exit = True
            await serving
            return int(getattr(error, "exit_code", 1))
        url = public_url(config.host, port)
        ready = _ready(state, url, config)
        try:  # `launch`, `connect` and `ps` find us on any port (written before READY: whoever saw it finds us)
            record.append(record_server(ready))
        except OSError as err:  # a read-only state folder costs the finding, not the server
            print(f"warning: could not write the run file ({err}); give --url to find this server", file=sys.stderr)
        print(READY_PREFIX + json.dumps(ready), flush=True)
        forgetting = asyncio.create_task(forget_when_stopping())
        count = len(pool.names.entries)
        served = state.startup or served_remote
        what = served or f"{count} model{'' if count == 1 else 's'} on request"
        if served and count > 1:
            what += f" (and {count - 1} more by name on request)"
        print(f"Serving {what} on {url}/v1 (Ctrl+C to stop)", file=sys.stderr, flush=True)
        watcher = asyncio.create_task(watch_child()) if planned is not None else None
        await serving
        forgetting.cancel()
        if watcher is not None:
            watcher.cancel()
        return exit_code

    record: list[Path] = []
    try:
        return asyncio.run(main())
    finally:
        for path in record:
            remove_record(path)
        sock.close()


def _child_load(
    config: ServeConfig, pool: ModelPool, entry: ModelEntry, planned: ChildPlan, server: uvicorn.Server
) -> Callable[[], Awaitable[None]]:
    """The child engine's load by the pool, as the server's `prepare`: the child starts, and the load ends
    when it answers /health (or the server stops)."""
    from launcher.engines.registry import child

    engine = child(config.engine)
    print(
        f"Starting {engine.name} for {planned.served_name} on {planned.child.base_url} "
        "(its output follows, prefixed)...",
        file=sys.stderr,
        flush=True,
    )

    async def load() -> None:
        await pool.load_child(entry, lambda: engine.start(planned, cancelled=lambda: bool(server.should_exit)))

    return load


def _ready(state: ServerState, url: str, config: ServeConfig) -> dict[str, object]:
    """The LAUNCHER_READY line: where to connect, and what is loaded."""
    ready: dict[str, object] = {
        "url": url,
        "base_url": f"{url}/v1",
        "api_key_required": bool(config.api_key),
        "pid": os.getpid(),
        "models": sorted(state.pool.names.entries),
    }
    default = state.pool.names.entries.get(state.pool.names.default or "")
    if default is not None and default.remote is not None:  # a remote model or a child engine answers
        ready |= {"model": default.name, "engine": default.remote.upstream.engine}
    slot = state.startup_slot
    if slot is not None:
        info = slot.model.info
        ready |= {
            "model": slot.id,
            "engine": slot.engine_name,
            "engine_reason": slot.engine_reason,
            "context_length": info.context_length,
            "parallel": info.parallel,
            "serving": slot.serving(),
        }
    return ready
