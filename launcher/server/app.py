"""The ASGI app factory: routes, error shapes, security, metrics and the model's lifecycle."""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager, suppress
from typing import cast

from starlette.applications import Starlette
from starlette.middleware import Middleware
from starlette.middleware.cors import CORSMiddleware
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

from launcher.core.config import ServeConfig
from launcher.engines.base import LoadedModel
from launcher.server import routes_models
from launcher.server.anthropic_api import routes_anthropic
from launcher.server.errors import ErrorBoundary, install_error_handlers
from launcher.server.metrics import CONTENT_TYPE, ServerMetrics
from launcher.server.openai_api import routes_openai
from launcher.server.pool.model_names import server_names
from launcher.server.pool.model_pool import ModelPool, PreparedLoad
from launcher.server.request_log import RequestObserver
from launcher.server.responses_api import routes_responses
from launcher.server.security import SecurityMiddleware, allowed_hosts_for, key_matches
from launcher.server.state import ServerState

ModelLoader = Callable[[], LoadedModel]


async def health(request: Request) -> Response:
    """GET /health: 503 while the startup model loads (or after it failed), 200 when ready.

    It stays open under --api-key (load balancers and the app poll it), so without the key it
    says only the status: which models and engines run here is the key holder's business.
    """
    state: ServerState = request.app.state.server
    key = state.config.api_key
    detailed = not key or key_matches(key, dict(request.scope["headers"]))
    if state.startup_error is not None:
        error = {"error": str(state.startup_error)} if detailed else {}
        return JSONResponse({"status": "error", **error}, status_code=503)
    if not state.started.is_set():
        return JSONResponse({"status": "loading"}, status_code=503, headers={"Retry-After": "2"})
    details: dict[str, object] = {}
    if detailed:
        slot = state.startup_slot
        if slot is not None:
            details = {"model": slot.id, "engine": slot.engine_name, "serving": slot.serving()}
        details["loaded"] = sorted(state.pool.slots)
    return JSONResponse({"status": "ok", **details})


async def metrics(request: Request) -> Response:
    """GET /metrics: Prometheus text (the remote models' numbers read from their servers first)."""
    state: ServerState = request.app.state.server
    await state.remotes.refresh_metrics()
    return Response(state.metrics.render(), media_type=CONTENT_TYPE)


def _unprefixed(routes: list[Route]) -> list[Route]:
    """The same routes without `/v1`: llama-server answers both, and a base URL missing its `/v1`
    is the most common misconfiguration of an agent."""
    return [
        Route(route.path.removeprefix("/v1"), route.endpoint, methods=sorted(route.methods or ()))
        for route in routes
        if route.path.startswith("/v1/")
    ]


def create_app(
    model: LoadedModel | ModelLoader,
    config: ServeConfig,
    *,
    engine_name: str = "",
    engine_reason: str = "",
    name: str | None = None,
) -> Starlette:
    """The app for one model: loaded already, or loaded by `model()` on a worker thread at startup
    (`name`: the id clients see; default: the --alias NAME, else the model's own id).

    While the loader runs, /health answers 503 and requests wait for the load.
    """
    loaded = cast(LoadedModel, model) if hasattr(model, "generate") else None
    name = name or config.served_name or (loaded.info.id if loaded is not None else "model")
    names = server_names(config, name, [], (loaded.info.id,) if loaded is not None else ())
    load = cast(ModelLoader, model) if loaded is None else (lambda: loaded)
    prepared = PreparedLoad(engine_name, engine_reason, config, 0, load)
    metrics = ServerMetrics()
    pool = ModelPool(names, lambda _: prepared, metrics, max_models=config.max_models)
    state = ServerState(config=config, pool=pool, metrics=metrics, startup=name)
    if loaded is not None:
        pool.attach(names.entries[name], loaded, prepared)
    return serving_app(state)


def serving_app(state: ServerState) -> Starlette:
    """The server app around `state`: routes, error shapes, security, metrics, and the models'
    lifecycle (the startup load, idle unloads, everything freed at shutdown)."""
    config = state.config
    state.metrics.remote_stats = state.remotes.gauges.latest

    @asynccontextmanager
    async def lifespan(app: Starlette) -> AsyncIterator[None]:
        startup = asyncio.ensure_future(state.load_startup())
        reaper = asyncio.ensure_future(state.pool.run_reaper())
        try:
            yield
        finally:
            reaper.cancel()
            startup.cancel()
            with suppress(asyncio.CancelledError):
                await reaper
            # A load still running cannot be interrupted; the process exit frees it.
            state.pool.close()
            await state.remotes.aclose()

    api_routes = [*routes_models.ROUTES, *routes_openai.ROUTES, *routes_responses.ROUTES, *routes_anthropic.ROUTES]
    routes = [
        Route("/health", health, methods=["GET"]),
        Route("/metrics", metrics, methods=["GET"]),
        *api_routes,
        *_unprefixed(api_routes),
    ]
    endpoints = {route.path: route.path for route in routes} | {
        route.path.removeprefix("/v1"): route.path for route in api_routes
    }

    def stopping() -> bool:
        return state.draining

    middleware = [
        # Outermost too: a failure in the middlewares below (the request log, CORS, the key check) is
        # still a JSON answer in the caller's shape, never Starlette's bare text/plain 500.
        Middleware(ErrorBoundary, stopping=stopping),
        Middleware(RequestObserver, metrics=state.metrics, endpoints=endpoints, mode=config.log_requests),
    ]
    if config.cors_origins:
        middleware.append(
            Middleware(
                CORSMiddleware,
                allow_origins=config.cors_origins,
                allow_methods=["GET", "POST", "OPTIONS"],
                allow_headers=["*"],
                max_age=600,
            )
        )
    middleware.append(
        Middleware(
            SecurityMiddleware,
            api_key=config.api_key,
            allowed_hosts=allowed_hosts_for(config.host, config.is_loopback),
            cors_origins=config.cors_origins,
        )
    )
    middleware.append(Middleware(ErrorBoundary, stopping=stopping))  # inside the request log: it logs the 500
    app = Starlette(routes=routes, middleware=middleware, lifespan=lifespan)
    app.state.server = state
    app.state.started_at = time.time()
    install_error_handlers(app)
    return app
