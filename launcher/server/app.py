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
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from launcher.core.config import ServeConfig
from launcher.engines.base import LoadedModel
from launcher.server import routes_anthropic, routes_openai, routes_responses
from launcher.server.errors import install_error_handlers
from launcher.server.metrics import CONTENT_TYPE
from launcher.server.security import SecurityMiddleware, allowed_hosts_for
from launcher.server.state import ModelLoader, ServerState

_COUNTED_PREFIXES = ("/v1/", "/health", "/metrics")


async def health(request: Request) -> Response:
    """GET /health: 503 while loading (or after a failed load), 200 when ready."""
    state: ServerState = request.app.state.server
    if state.model is not None:
        return JSONResponse({"status": "ok", "model": state.model_id, "engine": state.engine_name})
    if state.load_error is not None:
        return JSONResponse({"status": "error", "error": str(state.load_error)}, status_code=503)
    return JSONResponse({"status": "loading"}, status_code=503, headers={"Retry-After": "2"})


async def metrics(request: Request) -> Response:
    """GET /metrics: Prometheus text."""
    state: ServerState = request.app.state.server
    return Response(state.metrics.render(), media_type=CONTENT_TYPE)


class RequestCounter:
    """Counts requests by endpoint and status for launcher_requests_total."""

    def __init__(self, app: ASGIApp, state: ServerState) -> None:
        self.app = app
        self.state = state

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        """Pass through, noting the response status."""
        path = scope.get("path", "")
        if scope["type"] != "http" or not path.startswith(_COUNTED_PREFIXES):
            await self.app(scope, receive, send)
            return
        status = 500

        async def noting_send(message: Message) -> None:
            nonlocal status
            if message["type"] == "http.response.start":
                status = int(message["status"])
            await send(message)

        try:
            await self.app(scope, receive, noting_send)
        finally:
            endpoint = path if not path.startswith("/v1/models/") else "/v1/models/{id}"
            self.state.metrics.requests.labels(endpoint=endpoint, status=str(status)).inc()


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

    routes = [
        Route("/health", health, methods=["GET"]),
        Route("/metrics", metrics, methods=["GET"]),
        *routes_openai.ROUTES,
        *routes_responses.ROUTES,
        *routes_anthropic.ROUTES,
    ]
    middleware = [Middleware(RequestCounter, state=state)]
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
            SecurityMiddleware, api_key=config.api_key, allowed_hosts=allowed_hosts_for(config.host, config.is_loopback)
        )
    )
    app = Starlette(routes=routes, middleware=middleware, lifespan=lifespan)
    app.state.server = state
    app.state.started_at = time.time()
    install_error_handlers(app)
    return app
