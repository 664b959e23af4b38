"""An ASGI wrapper that keeps every JSON request body an agent sends, for replay and inspection."""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any

from starlette.types import ASGIApp, Message, Receive, Scope, Send


@dataclass
class CapturedRequest:
    """One request as the agent sent it, and the status it got."""

    method: str
    path: str
    headers: dict[str, str]
    body: Any  # the decoded JSON body (None for a GET)
    status: int = 0


@dataclass
class RequestCapture:
    """Wraps an app; `requests` grows with every request it passes on, unchanged."""

    app: ASGIApp
    requests: list[CapturedRequest] = field(default_factory=list)

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        """Read the whole body, note it, then hand the app the same bytes."""
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        chunks: list[bytes] = []
        more = True
        while more:
            message = await receive()
            chunks.append(message.get("body", b""))
            more = message.get("more_body", False) and message["type"] == "http.request"
        raw = b"".join(chunks)
        try:
            body = json.loads(raw) if raw else None
        except ValueError:
            body = raw.decode("utf-8", "replace")
        headers = {k.decode("latin-1"): v.decode("latin-1") for k, v in scope.get("headers", [])}
        captured = CapturedRequest(scope.get("method", ""), scope.get("path", ""), headers, body)
        self.requests.append(captured)
        replayed = False

        async def noting_send(message: Message) -> None:
            if message["type"] == "http.response.start":
                captured.status = int(message["status"])
            await send(message)

        async def replay() -> Message:
            nonlocal replayed
            if not replayed:
                replayed = True
                return {"type": "http.request", "body": raw, "more_body": False}
            return await receive()

        await self.app(scope, replay, noting_send)
