"""API errors and their wire shapes.

Routes raise `ApiError` (or let a `LauncherError` escape); the handlers installed by
`install_error_handlers` turn them into the body shape of the API the client called:
OpenAI `{"error": {message, type, param, code}}` or Anthropic `{"type": "error", "error": {...}}`.
Anything unexpected becomes a 500 in the same shape (`ErrorBoundary`), logged once, never a
traceback on the wire.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from typing import Any

from pydantic import ValidationError
from starlette.applications import Starlette
from starlette.exceptions import HTTPException
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from launcher.core.errors import LauncherError

log = logging.getLogger(__name__)

_OPENAI_TYPES = {
    400: "invalid_request_error",
    401: "authentication_error",
    403: "permission_error",
    404: "not_found_error",
    405: "invalid_request_error",
    408: "invalid_request_error",
    413: "invalid_request_error",
    415: "invalid_request_error",
    429: "rate_limit_error",
    503: "server_unavailable",
}
_ANTHROPIC_TYPES = {
    400: "invalid_request_error",
    401: "authentication_error",
    403: "permission_error",
    404: "not_found_error",
    405: "invalid_request_error",
    408: "invalid_request_error",
    413: "request_too_large",
    415: "invalid_request_error",
    429: "rate_limit_error",
    503: "overloaded_error",
}


class ApiError(Exception):
    """An error with an HTTP status, shaped per API by the handlers."""

    def __init__(
        self,
        status: int,
        message: str,
        *,
        param: str | None = None,
        code: str | None = None,
        headers: dict[str, str] | None = None,
    ) -> None:
        super().__init__(message)
        self.status = status
        self.message = message
        self.param = param
        self.code = code
        self.headers = headers or {}


class ClientDisconnected(Exception):
    """The client went away before a non-streaming reply was ready."""


def shutting_down() -> ApiError:
    """The 503 for a request the stopping server will not answer; retried, it reaches the next start."""
    return ApiError(503, "The server is shutting down.", code="server_shutting_down", headers={"Retry-After": "2"})


def bad_request(message: str, *, param: str | None = None, code: str | None = None) -> ApiError:
    """A 400 with a message saying what to change."""
    return ApiError(400, message, param=param, code=code)


def is_anthropic_path(path: str) -> bool:
    """Routes that speak the Anthropic API (and so its error shape)."""
    return path.startswith("/v1/messages") or path.startswith("/messages")


def openai_type(status: int) -> str:
    """The OpenAI `error.type` of an HTTP status."""
    return _OPENAI_TYPES.get(status, "server_error")


def anthropic_type(status: int) -> str:
    """The Anthropic `error.type` of an HTTP status (a 503 is `overloaded_error`, which clients retry)."""
    return _ANTHROPIC_TYPES.get(status, "api_error")


def error_body(
    path: str, status: int, message: str, *, param: str | None = None, code: str | None = None
) -> dict[str, Any]:
    """The JSON error body the client of `path` expects."""
    if is_anthropic_path(path):
        return {"type": "error", "error": {"type": anthropic_type(status), "message": message}}
    return {"error": {"message": message, "type": openai_type(status), "param": param, "code": code}}


def error_response(path: str, err: ApiError) -> JSONResponse:
    """An ApiError as a JSON response in the right shape."""
    body = error_body(path, err.status, err.message, param=err.param, code=err.code)
    return JSONResponse(body, status_code=err.status, headers=err.headers)


def validation_message(err: ValidationError) -> tuple[str, str | None]:
    """A one-line message and the offending parameter from a pydantic error."""
    first = err.errors()[0]
    loc = ".".join(str(part) for part in first.get("loc", ()))
    detail = first.get("msg", "invalid value")
    message = f"Invalid request: {loc}: {detail}" if loc else f"Invalid request: {detail}"
    extra = len(err.errors()) - 1
    if extra > 0:
        message += f" (and {extra} more problem{'s' if extra > 1 else ''})"
    return message, loc or None


async def _api_error(request: Request, exc: Exception) -> Response:
    assert isinstance(exc, ApiError)
    return error_response(request.url.path, exc)


async def _validation_error(request: Request, exc: Exception) -> Response:
    assert isinstance(exc, ValidationError)
    message, param = validation_message(exc)
    return error_response(request.url.path, ApiError(400, message, param=param))


async def _launcher_error(request: Request, exc: Exception) -> Response:
    # Typed launcher errors carry user-facing text; still a server-side failure.
    return error_response(request.url.path, ApiError(500, str(exc), code=type(exc).__name__))


async def _http_error(request: Request, exc: Exception) -> Response:
    assert isinstance(exc, HTTPException)
    return error_response(request.url.path, ApiError(exc.status_code, str(exc.detail)))


async def _client_gone(request: Request, exc: Exception) -> Response:
    # Nobody is listening; 499 (client closed request) only shows in logs and metrics.
    return Response(status_code=499)


class ErrorBoundary:
    """ASGI middleware: an unexpected exception becomes one log entry and a 500 in the caller's shape.

    Starlette's own handler for `Exception` re-raises after answering, so uvicorn logged every
    failure a second time; this boundary sits inside it and ends the exception here. An error
    after the response has started (mid-stream) is logged and the connection closed.

    A stopping server cancels the requests still running after its grace period; uvicorn would
    answer those with a bare text/plain 500. While `stopping()` says so, such a request gets a 503
    in its API's shape with Retry-After instead: the same request will work once the server is back.
    """

    def __init__(self, app: ASGIApp, stopping: Callable[[], bool] = lambda: False) -> None:
        self.app = app
        self.stopping = stopping

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        """Pass through; answer a 500 for what escapes."""
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        started = False

        async def noting_send(message: Message) -> None:
            nonlocal started
            if message["type"] == "http.response.start":
                started = True
            await send(message)

        try:
            await self.app(scope, receive, noting_send)
        except asyncio.CancelledError:
            if started or not self.stopping():
                raise
            response = error_response(scope.get("path", ""), shutting_down())
            await response(scope, receive, send)  # answered: the task ends, as the cancel asked
        except Exception as exc:
            path = scope.get("path", "")
            log.error("unexpected error on %s", path, exc_info=exc)
            if started:
                return
            message = f"Internal server error ({type(exc).__name__}). See the server log for details."
            response = error_response(path, ApiError(500, message))
            await response(scope, receive, send)


def install_error_handlers(app: Starlette) -> None:
    """Register the handlers that shape every expected error by API (ErrorBoundary takes the rest)."""
    app.add_exception_handler(ApiError, _api_error)
    app.add_exception_handler(ValidationError, _validation_error)
    app.add_exception_handler(LauncherError, _launcher_error)
    app.add_exception_handler(HTTPException, _http_error)
    app.add_exception_handler(ClientDisconnected, _client_gone)
