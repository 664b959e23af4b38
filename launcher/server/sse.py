"""Server-sent events with prompt cleanup when the client goes away, and keep-alives while it waits.

`EventStream` sends the body of an async iterator and, at the same time, listens for the
client's disconnect; on disconnect (or any send failure) it cancels the sender and calls
`on_close`, which closes the engine generator so the sequence is freed within one decode step.

`with_keepalives` marks the silences: agents drop a stream that says nothing for a while
(Codex after 300 s, Cline after 30 s), and reading a 20k-token prompt on a CPU, or holding
back text that may be a tool call, can take longer than that. Each protocol turns the
`KEEPALIVE` marker into its own form: an SSE comment (OpenAI chat and completions), a `ping`
event (Anthropic), a `keepalive` event (Responses; Codex's idle timer counts only events).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any, Final, TypeVar

import anyio
from pydantic import BaseModel
from starlette.types import Receive, Scope, Send

from launcher.server.request_log import current_request

ItemT = TypeVar("ItemT")

KEEPALIVE_INTERVAL_S = 10.0
"""Seconds of silence before a keep-alive goes out."""


class KeepAlive:
    """The marker `with_keepalives` yields after a silence."""


KEEPALIVE: Final = KeepAlive()

COMMENT_KEEPALIVE = b": keep-alive\n\n"
"""An SSE comment: clients ignore it, but the bytes reset their read timeouts."""


# Characters that some clients' line splitters (JavaScript's, Python's str.splitlines) take for a
# line break although SSE does not: raw in an event's JSON, they would cut the event in two. JSON
# allows their escaped form anywhere a string holds them.
_UNICODE_LINE_BREAKS = str.maketrans({"\u0085": "\\u0085", "\u2028": "\\u2028", "\u2029": "\\u2029"})


def _json(payload: Any) -> str:
    """The payload as one-line JSON: UTF-8 text as is, but no character any client splits lines at."""
    if isinstance(payload, BaseModel):  # a response model (schemas_*): its wire form
        payload = payload.model_dump()
    return json.dumps(payload, ensure_ascii=False, separators=(",", ":")).translate(_UNICODE_LINE_BREAKS)


def data_event(payload: Any) -> bytes:
    """`data: {json}` (OpenAI style)."""
    return f"data: {_json(payload)}\n\n".encode()


def named_event(name: str, payload: Any) -> bytes:
    """`event: name` + `data: {json}` (Anthropic and Responses style)."""
    return f"event: {name}\ndata: {_json(payload)}\n\n".encode()


DONE = b"data: [DONE]\n\n"


async def with_keepalives(events: AsyncIterator[ItemT], interval: float) -> AsyncIterator[ItemT | KeepAlive]:
    """`events`, with `KEEPALIVE` yielded whenever `interval` seconds pass without one.

    The next item is awaited in a task so that waiting can time out without cancelling it;
    closing this iterator cancels that task, which closes the engine's request.
    """
    iterator = aiter(events)
    pending: asyncio.Future[ItemT] | None = None
    try:
        while True:
            if pending is None:
                pending = asyncio.ensure_future(anext(iterator))
            done, _ = await asyncio.wait({pending}, timeout=interval)
            if not done:
                yield KEEPALIVE
                continue
            finished, pending = pending, None
            try:
                item = finished.result()
            except StopAsyncIteration:
                return
            yield item
    finally:
        if pending is not None:
            pending.cancel()
            with contextlib.suppress(asyncio.CancelledError, StopAsyncIteration):
                await pending


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
        record = current_request()
        ended = False  # the body's last event is out: a disconnect after it is a client done reading

        def client_left() -> None:
            if record is not None and not ended:
                record.client_left = True  # the log says so: the 200 it shows was sent before

        try:
            async with anyio.create_task_group() as group:

                async def watch_disconnect() -> None:
                    while True:
                        message = await receive()
                        if message["type"] == "http.disconnect":
                            client_left()
                            group.cancel_scope.cancel()
                            return

                async def stream() -> None:
                    nonlocal ended
                    try:
                        await send({"type": "http.response.start", "status": 200, "headers": raw_headers})
                        async for chunk in self.body:
                            await send({"type": "http.response.body", "body": chunk, "more_body": True})
                        ended = True
                        await send({"type": "http.response.body", "body": b"", "more_body": False})
                    except OSError:
                        client_left()  # it went away while we were sending
                    group.cancel_scope.cancel()

                group.start_soon(watch_disconnect)
                group.start_soon(stream)
        finally:
            with anyio.CancelScope(shield=True):
                closer = getattr(self.body, "aclose", None)
                if closer is not None:
                    await closer()
                await self.on_close()
