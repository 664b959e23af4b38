"""One line per request in the server's log, and the per-endpoint request counter.

    POST /v1/messages 200 claude-code/2.1.332 model=gemma-3-270m asked=claude-sonnet-4-5 prompt=12,410
        cached=12,288 generated=64 ttft=0.41s total=2.93s

When some of the cached tokens were put back from the prompt cache on disk, the line says how many:
`cached=12,288 (disk 12,000)`.
When the engine drafted tokens (speculative decoding), the line says how many of its drafts were
accepted: `generated=640 (draft 412/480)`, accepted/drafted.

The app's Server page shows these lines, so a user sees at once which agent called, whether the
prefix cache worked and where time went. Routes and the generation driver fill the request's
`RequestRecord` (found through a context variable, so nothing has to be threaded through every
call); the middleware writes the line when the response has been sent, streams included.
Status and endpoint labels are bounded: an unknown path counts as "other".
"""

from __future__ import annotations

import contextvars
import json
import logging
import re
import time
from dataclasses import dataclass, field
from typing import Literal

from starlette.types import ASGIApp, Message, Receive, Scope, Send

from launcher.server.metrics import ServerMetrics

log = logging.getLogger("launcher.requests")

LogMode = Literal["off", "on", "replies"]
REPLY_PREVIEW_CHARS = 1000

# Quiet endpoints the app polls every second: counted, never logged.
_UNLOGGED = frozenset({"/health", "/metrics", "/launcher/models"})  # polled by the app and monitors

# (User-Agent pattern, client name): the version, when the pattern captures one, is appended.
_CLIENTS: tuple[tuple[re.Pattern[str], str], ...] = (
    (re.compile(r"claude-cli/([\w.\-]+)"), "claude-code"),
    (re.compile(r"codex_\w+/([\w.\-]+)"), "codex"),
    (re.compile(r"opencode/([\w.\-]+)", re.I), "opencode"),
    (re.compile(r"aider/v?([\w.\-]+)", re.I), "aider"),
    (re.compile(r"litellm/([\w.\-]+)", re.I), "litellm"),
    (re.compile(r"cline/([\w.\-]+)", re.I), "cline"),
    (re.compile(r"continue/([\w.\-]+)", re.I), "continue"),
    (re.compile(r"ai-sdk/openai-compatible/([\w.\-]+)"), "ai-sdk"),
    (re.compile(r"Anthropic/(?:Python|JS) ([\w.\-]+)"), "anthropic-sdk"),
    (re.compile(r"OpenAI/(?:Python|JS) ([\w.\-]+)"), "openai-sdk"),
)


def client_name(user_agent: str) -> str:
    """A short name for the client behind a User-Agent ("claude-code/2.1.332"); else its first word.

    Aider cannot be told apart: it calls through litellm and the OpenAI SDK, whose User-Agent it keeps.
    """
    for pattern, name in _CLIENTS:
        match = pattern.search(user_agent)
        if match:
            return f"{name}/{match.group(1)}" if match.groups() else name
    first = user_agent.split(" ", 1)[0]
    return "".join(c for c in first[:40] if c.isprintable())


@dataclass
class RequestRecord:
    """What one request did, filled in while it runs."""

    method: str
    path: str
    client: str = ""
    status: int = 0
    client_left: bool = False  # a stream whose client went away before its end (its status was sent: 200)
    model: str = ""
    asked: str = ""  # the model name the client sent, when it differs
    prompt_tokens: int | None = None
    cached_tokens: int = 0
    disk_tokens: int = 0  # of the cached tokens, those restored from the prompt cache on disk
    generated_tokens: int = 0
    draft_tokens: int = 0  # speculative decoding: draft tokens the engine verified for this request
    accepted_draft_tokens: int = 0  # ... and accepted (each one a generated token without a step of its own)
    tool_calls: int = 0  # calls parsed out of the reply (repaired ones included)
    calls_repaired: int = 0  # of those, calls that parsed once a slip was fixed (server/core/call_repair.py)
    calls_as_text: int = 0  # calls started that did not parse (left as text for the client)
    tool_grammar: str = ""  # "lazy" or "required" when a call grammar constrained the reply
    ttft_s: float | None = None
    keep_reply: bool = False
    reply: list[str] = field(default_factory=list)  # the start of the generated text (`replies` mode)
    reply_chars: int = 0

    def add_reply_text(self, text: str) -> None:
        """Keep the first REPLY_PREVIEW_CHARS of what the model writes (when asked to)."""
        if self.keep_reply and self.reply_chars < REPLY_PREVIEW_CHARS and text:
            piece = text[: REPLY_PREVIEW_CHARS - self.reply_chars]
            self.reply.append(piece)
            self.reply_chars += len(piece)

    def line(self, total_s: float) -> str:
        """The log line."""
        parts = [self.method, self.path, str(self.status)]
        if self.client_left:
            parts.append("client-left")
        if self.client:
            parts.append(self.client)
        if self.model:
            parts.append(f"model={self.model}")
        if self.asked and self.asked != self.model:
            parts.append(f"asked={self.asked}")
        if self.prompt_tokens is not None:
            parts += [
                f"prompt={self.prompt_tokens:,}",
                f"cached={self.cached_tokens:,}",
                *([f"(disk {self.disk_tokens:,})"] if self.disk_tokens else []),
                f"generated={self.generated_tokens:,}",
                *([f"(draft {self.accepted_draft_tokens:,}/{self.draft_tokens:,})"] if self.draft_tokens else []),
            ]
        if self.tool_calls or self.calls_as_text:
            parts.append(f"calls={self.tool_calls}" + (f" ({self.tool_grammar} grammar)" if self.tool_grammar else ""))
            if self.calls_repaired:
                parts.append(f"repaired={self.calls_repaired}")
            if self.calls_as_text:
                parts.append(f"left-as-text={self.calls_as_text}")
        if self.ttft_s is not None:
            parts.append(f"ttft={self.ttft_s:.2f}s")
        parts.append(f"total={total_s:.2f}s")
        return " ".join(parts)

    def reply_line(self) -> str:
        """The reply preview, JSON-quoted so it stays on one line."""
        return f"{self.method} {self.path} reply={json.dumps(''.join(self.reply), ensure_ascii=False)}"


_current: contextvars.ContextVar[RequestRecord | None] = contextvars.ContextVar("launcher_request", default=None)


def current_request() -> RequestRecord | None:
    """The record of the request being served on this task, if any."""
    return _current.get()


class RequestObserver:
    """ASGI middleware: counts every request by endpoint and status, and logs one line per request."""

    def __init__(
        self, app: ASGIApp, *, metrics: ServerMetrics, endpoints: dict[str, str], mode: LogMode = "on"
    ) -> None:
        self.app = app
        self.metrics = metrics
        self.endpoints = endpoints  # path -> the endpoint label it counts under
        self.mode = mode

    def endpoint_of(self, path: str) -> str:
        """The bounded label for `path`: its route, or "other"."""
        if path in self.endpoints:
            return self.endpoints[path]
        if path.startswith(("/v1/models/", "/models/")):
            return "/v1/models/{id}"
        return "other"

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        """Pass through, noting the status; count and log when the response is done."""
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        headers = dict(scope.get("headers") or [])
        record = RequestRecord(
            method=scope.get("method", ""),
            path=scope.get("path", ""),
            client=client_name(headers.get(b"user-agent", b"").decode("latin-1")),
            status=500,
            keep_reply=self.mode == "replies",
        )
        token = _current.set(record)
        started = time.monotonic()

        async def noting_send(message: Message) -> None:
            if message["type"] == "http.response.start":
                record.status = int(message["status"])
            await send(message)

        try:
            await self.app(scope, receive, noting_send)
        finally:
            _current.reset(token)
            endpoint = self.endpoint_of(record.path)
            self.metrics.requests.labels(endpoint=endpoint, status=str(record.status)).inc()
            if self.mode != "off" and record.path not in _UNLOGGED:
                log.info("%s", record.line(time.monotonic() - started))
                if record.keep_reply and record.prompt_tokens is not None:
                    log.info("%s", record.reply_line())
