"""Replay an agent's captured request against a server and time it the way the agent sees it.

Used by the prefix-reuse test (turn 2 of a real session must come from the cache) and by
`scripts/replay-agent-turns` (the figures and the keep-alive timeline in the docs). The request
goes out as the agent sent it, streaming, with the agent's own User-Agent and beta headers.
"""

from __future__ import annotations

import json
import time
from dataclasses import dataclass, field
from typing import Any

import httpx

from tests.agents.capture import CapturedRequest

_KEPT_HEADERS = ("user-agent", "anthropic-version", "anthropic-beta", "content-type", "accept")


@dataclass
class Replayed:
    """What the client saw."""

    status: int
    prompt_tokens: int = 0
    cached_tokens: int = 0
    ttft_s: float | None = None  # to the first generated content
    total_s: float = 0.0
    headers_s: float | None = None  # to the response headers
    keepalives_s: list[float] = field(default_factory=list)  # when each keep-alive arrived

    @property
    def cached_share(self) -> float:
        """The part of the prompt read from the cache."""
        return self.cached_tokens / self.prompt_tokens if self.prompt_tokens else 0.0


def _is_content(event: dict[str, Any]) -> bool:
    kind = event.get("type", "")
    if kind in ("content_block_start", "content_block_delta", "response.output_item.added"):
        return True
    choices = event.get("choices") or []
    return bool(choices) and any(
        c.get("delta", {}).get("content") or c.get("delta", {}).get("tool_calls") for c in choices
    )


def _note_usage(result: Replayed, event: dict[str, Any]) -> None:
    kind = event.get("type", "")
    if kind == "message_delta":  # Anthropic: input_tokens excludes the cache reads
        usage = event.get("usage") or {}
        cached = int(usage.get("cache_read_input_tokens") or 0)
        result.cached_tokens = cached
        result.prompt_tokens = int(usage.get("input_tokens") or 0) + cached
    elif kind in ("response.completed", "response.incomplete"):
        usage = (event.get("response") or {}).get("usage") or {}
        result.prompt_tokens = int(usage.get("input_tokens") or 0)
        result.cached_tokens = int((usage.get("input_tokens_details") or {}).get("cached_tokens") or 0)
    elif event.get("usage") and "choices" in event:  # chat completions with include_usage
        usage = event["usage"]
        result.prompt_tokens = int(usage.get("prompt_tokens") or 0)
        result.cached_tokens = int((usage.get("prompt_tokens_details") or {}).get("cached_tokens") or 0)


def replay(base_url: str, request: CapturedRequest, *, timeout: float = 900.0) -> Replayed:
    """Send `request` again (streamed) to `base_url` (the server root) and time what comes back."""
    body = dict(request.body)
    body["stream"] = True
    if request.path.endswith("/chat/completions"):
        body["stream_options"] = {"include_usage": True}
    headers = {k: v for k, v in request.headers.items() if k.lower() in _KEPT_HEADERS}
    started = time.monotonic()
    path = request.path if request.path.startswith("/v1/") else "/v1" + request.path
    with httpx.stream("POST", base_url + path, json=body, headers=headers, timeout=timeout) as response:
        result = Replayed(status=response.status_code, headers_s=time.monotonic() - started)
        for line in response.iter_lines():
            now = time.monotonic() - started
            if line.startswith(":") or '"type":"ping"' in line or '"type":"keepalive"' in line:
                if result.ttft_s is None:
                    result.keepalives_s.append(now)
                continue
            if not line.startswith("data: ") or line == "data: [DONE]":
                continue
            event = json.loads(line[6:])
            if result.ttft_s is None and _is_content(event):
                result.ttft_s = now
            _note_usage(result, event)
    result.total_s = time.monotonic() - started
    return result
