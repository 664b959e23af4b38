"""Server-sent events with prompt cleanup when the client goes away.

`EventStream` sends the body of an async iterator and, at the same time, listens for the
client's disconnect; on disconnect (or any send failure) it cancels the sender and calls
`on_close`, which closes the engine generator so the sequence is freed within one decode step.
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any

import anyio
from starlette.types import Receive, Scope, Send


def data_event(payload: Any) -> bytes:
    """`data: {json}` (OpenAI style)."""
    return b"data: " + json.dumps(payload, ensure_ascii=False, separators=(",", ":")).encode() + b"\n\n"


def named_event(name: str, payload: Any) -> bytes:
    """`event: name` + `data: {json}` (Anthropic and Responses style)."""
    body = json.dumps(payload, ensure_ascii=False, separators=(",", ":"))
    return f"event: {name}\ndata: {body}\n\n".encode()


DONE = b"data: [DONE]\n\n"


class EventStream:
    """An ASGI response streaming SSE bytes; `on_close` always runs exactly once."""

    def __init__(
        self,
        body: AsyncIterator[bytes],
        on_close: Callable[[], Awaitable[None]],
        headers: dict[str, str] | None = None,
    ) -> None:
        self.body = body
        self.on_close = on_close
        self.headers = {"cache-control": "no-cache", "x-accel-buffering": "no", **(headers or {})}

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        """Stream until the body ends or the client disconnects."""
        raw_headers = [(b"content-type", b"text/event-stream; charset=utf-8")]
        raw_headers += [(k.encode(), v.encode()) for k, v in self.headers.items()]
        try:
            async with anyio.create_task_group() as group:

                async def watch_disconnect() -> None:
                    while True:
                        message = await receive()
                        if message["type"] == "http.disconnect":
                            group.cancel_scope.cancel()
                            return

                async def stream() -> None:
                    try:
                        await send({"type": "http.response.start", "status": 200, "headers": raw_headers})
                        async for chunk in self.body:
                            await send({"type": "http.response.body", "body": chunk, "more_body": True})
                        await send({"type": "http.response.body", "body": b"", "more_body": False})
                    except OSError:
                        pass  # the client went away while we were sending
                    group.cancel_scope.cancel()

                group.start_soon(watch_disconnect)
                group.start_soon(stream)
        finally:
            with anyio.CancelScope(shield=True):
                closer = getattr(self.body, "aclose", None)
                if closer is not None:
                    await closer()
                await self.on_close()
