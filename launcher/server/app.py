"""The ASGI app factory: routes, error shapes, security, metrics and the model's lifecycle."""

from __future__ import annotations

import threading
import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import cast

from starlette.applications import Starlette
from starlette.middleware import Middleware
from starlette.middleware.cors import CORSMiddleware
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

from launcher.core.config import ServeConfig
from launcher.engines.base import LoadedModel
from launcher.server import routes_anthropic, routes_openai, routes_responses
from launcher.server.errors import ErrorBoundary, install_error_handlers
from launcher.server.metrics import CONTENT_TYPE
from launcher.server.request_log import RequestObserver
from launcher.server.security import SecurityMiddleware, allowed_hosts_for, key_matches
from launcher.server.state import ModelLoader, ServerState


async def health(request: Request) -> Response:
    """GET /health: 503 while loading (or after a failed load), 200 when ready.

    It stays open under --api-key (load balancers and the app poll it), so without the key it
    says only the status: which model and engine run here is the key holder's business.
    """
    state: ServerState = request.app.state.server
    key = state.config.api_key
    detailed = not key or key_matches(key, dict(request.scope["headers"]))
    if state.model is not None:
        details = {"model": state.model_id, "engine": state.engine_name, "serving": state.serving()} if detailed else {}
        return JSONResponse({"status": "ok", **details})
    if state.load_error is not None:
        details = {"error": str(state.load_error)} if detailed else {}
        return JSONResponse({"status": "error", **details}, status_code=503)
    return JSONResponse({"status": "loading"}, status_code=503, headers={"Retry-After": "2"})


async def metrics(request: Request) -> Response:
    """GET /metrics: Prometheus text."""
    state: ServerState = request.app.state.server
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
) -> Starlette:
    """The server app for a loaded model, or for a loader run on a background thread at startup.

    While a loader runs, /health answers 503 and model routes answer 503 with Retry-After.
    The model is closed when the app shuts down.
    """
    state = ServerState(config=config, engine_name=engine_name, engine_reason=engine_reason)
    loader: ModelLoader | None = None
    if hasattr(model, "generate"):  # already loaded
        state.attach(cast(LoadedModel, model))
    else:
        loader = model

    @asynccontextmanager
    async def lifespan(app: Starlette) -> AsyncIterator[None]:
        if loader is not None:
            threading.Thread(target=state.load_with, args=(loader,), name="model-load", daemon=True).start()
        try:
            yield
        finally:
            # A load still running cannot be interrupted; the process exit frees it.
            if state.loaded.is_set():
                state.close()

    api_routes = [*routes_openai.ROUTES, *routes_responses.ROUTES, *routes_anthropic.ROUTES]
    routes = [
        Route("/health", health, methods=["GET"]),
        Route("/metrics", metrics, methods=["GET"]),
        *api_routes,
        *_unprefixed(api_routes),
    ]
    endpoints = {route.path: route.path for route in routes} | {
        route.path.removeprefix("/v1"): route.path for route in api_routes
    }
    middleware = [Middleware(RequestObserver, metrics=state.metrics, endpoints=endpoints, mode=config.log_requests)]
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
    middleware.append(Middleware(ErrorBoundary))
    app = Starlette(routes=routes, middleware=middleware, lifespan=lifespan)
    app.state.server = state
    app.state.started_at = time.time()
    install_error_handlers(app)
    return app
