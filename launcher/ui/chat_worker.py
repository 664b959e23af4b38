"""`ChatWorker`: one streaming /v1/chat/completions request in a QThread, emitting text as it arrives.

Plain httpx + server-sent events (the app does not need the openai SDK for this); `stop()` closes
the stream, which the server sees as a client disconnect and frees the sequence.
"""

from __future__ import annotations

import json
import threading
import time
from dataclasses import dataclass
from typing import Any

import httpx
from PySide6.QtCore import QObject, QThread, Signal

from launcher.ui import workers


@dataclass(frozen=True)
class ChatResult:
    """How a reply went."""

    text: str
    completion_tokens: int | None
    seconds: float
    time_to_first_token: float | None
    stopped: bool = False

    @property
    def tokens_per_second(self) -> float | None:
        """Decode speed seen by the client (tokens after the first / time after the first)."""
        if not self.completion_tokens or self.time_to_first_token is None:
            return None
        decode_time = self.seconds - self.time_to_first_token
        return (self.completion_tokens - 1) / decode_time if decode_time > 0 and self.completion_tokens > 1 else None


class ChatWorker(QThread):
    """Streams one reply; `delta(str)` per chunk, then `completed(ChatResult)` or `failed(str)`."""

    delta = Signal(str)
    completed = Signal(object)
    failed = Signal(str)

    def __init__(
        self,
        base_url: str,
        model: str,
        messages: list[dict[str, Any]],
        *,
        api_key: str | None = None,
        max_tokens: int = 512,
        transport: httpx.BaseTransport | None = None,
        parent: QObject | None = None,
    ) -> None:
        super().__init__(parent)
        self.url = base_url.rstrip("/") + "/chat/completions"
        self.body = {
            "model": model,
            "messages": messages,
            "stream": True,
            "stream_options": {"include_usage": True},
            "max_tokens": max_tokens,
        }
        self.headers = {"Authorization": f"Bearer {api_key}"} if api_key else {}
        self._transport = transport
        self._stop = threading.Event()
        workers.track_thread(self)

    def run(self) -> None:
        """Send the request and read the stream (worker thread)."""
        began = time.monotonic()
        first: float | None = None
        parts: list[str] = []
        tokens: int | None = None
        try:
            with (
                httpx.Client(transport=self._transport, timeout=httpx.Timeout(300.0, connect=5.0)) as client,
                client.stream("POST", self.url, json=self.body, headers=self.headers) as response,
            ):
                if response.status_code >= 400:
                    response.read()
                    self.failed.emit(_error_message(response))
                    return
                for line in response.iter_lines():
                    if self._stop.is_set():
                        break
                    if not line.startswith("data:"):
                        continue
                    payload = line[5:].strip()
                    if payload == "[DONE]":
                        break
                    chunk = json.loads(payload)
                    if chunk.get("usage"):
                        tokens = chunk["usage"].get("completion_tokens")
                    for choice in chunk.get("choices") or []:
                        text = (choice.get("delta") or {}).get("content") or ""
                        if text:
                            if first is None:
                                first = time.monotonic() - began
                            parts.append(text)
                            self.delta.emit(text)
        except (httpx.HTTPError, ValueError) as err:
            self.failed.emit(f"The request failed: {err}")
            return
        self.completed.emit(
            ChatResult("".join(parts), tokens, time.monotonic() - began, first, stopped=self._stop.is_set())
        )

    def stop(self) -> None:
        """Stop reading; the connection closes and the server cancels the generation."""
        self._stop.set()


def _error_message(response: httpx.Response) -> str:
    try:
        error = response.json().get("error", {})
        message = error.get("message") if isinstance(error, dict) else str(error)
    except ValueError:
        message = response.text[:300]
    return f"The server answered {response.status_code}: {message}"
