"""Qt-free reading of the server's `GET /launcher/models` and the words the Server page's
"Loaded models" rows show; `unload_model` asks the server to free one.

The server lists what it has loaded now, with memory and activity (`server/pool/model_slot.py`
`describe`); the app polls it beside /metrics and shows one row per model. Parsing and wording
live here so they are tested without widgets.
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass, field
from typing import Any

import httpx

from launcher.core.errors import ServerError
from launcher.core.units import format_bytes

UNLOAD_TIMEOUT_S = 60.0
"""Freeing a big model's memory can take a few seconds; a server that needs longer is stuck."""


@dataclass(frozen=True)
class LoadedModelInfo:
    """One loaded model as the server describes it."""

    id: str
    engine: str
    format: str = ""
    quant: str | None = None
    context_length: int = 0
    parallel: int = 1
    memory_bytes: int = 0  # what the engine allocated (the advisor's estimate until it says)
    estimated_bytes: int = 0
    requests_running: int = 0
    requests_waiting: int = 0
    busy: bool = False  # a request holds it: the server refuses to unload it
    idle_seconds: float = 0.0
    ttl_seconds: float | None = None  # unloaded after this many idle seconds (None: kept)
    load_seconds: float = 0.0
    loaded_at: float = 0.0

    @property
    def engine_text(self) -> str:
        """The engine and the quant, as "llamacpp · Q4_K_M"."""
        return f"{self.engine} · {self.quant}" if self.quant else self.engine

    @property
    def memory_text(self) -> str:
        """The memory it takes ("–" when neither the engine nor the advisor knows)."""
        return format_bytes(self.memory_bytes) if self.memory_bytes else "–"

    @property
    def context_text(self) -> str:
        """Tokens of context per sequence, and how many sequences share the KV cache."""
        if not self.context_length:
            return "–"
        return f"{self.context_length:,}" + (f" × {self.parallel}" if self.parallel > 1 else "")

    @property
    def activity_text(self) -> str:
        """What it does now: "2 running · 1 waiting", or "idle 40 s · unloads in 9 min" with a TTL."""
        if self.busy or self.requests_running or self.requests_waiting:
            parts = [f"{self.requests_running} running"] if self.requests_running else []
            parts += [f"{self.requests_waiting} waiting"] if self.requests_waiting else []
            return " · ".join(parts) or "busy"  # held by a request that has not started generating yet
        idle = f"idle {duration_text(self.idle_seconds)}"
        if self.ttl_seconds is None:
            return idle
        left = max(0.0, self.ttl_seconds - self.idle_seconds)
        return f"{idle} · unloads in {duration_text(left, round_up=True)}"


@dataclass(frozen=True)
class LoadedModels:
    """One answer of `GET /launcher/models`."""

    models: tuple[LoadedModelInfo, ...] = ()
    available: tuple[str, ...] = ()  # every name the server would load on request, loaded or not
    memory_budget_bytes: int | None = None
    memory_used_bytes: int = 0
    max_models: int | None = None
    loads: dict[str, int] = field(default_factory=dict)
    remote: dict[str, str] = field(default_factory=dict)  # NAME/model -> the remote server's URL
    fetched_at: float = 0.0  # monotonic time the request was sent (an answer older than an unload is stale)

    @property
    def on_request(self) -> tuple[str, ...]:
        """The models not loaded now that a request would load."""
        here = {model.id for model in self.models} | set(self.remote)
        return tuple(name for name in self.available if name not in here)

    @property
    def summary_text(self) -> str:
        """One line under the rows: memory against the budget, and what else loads on request."""
        count = len(self.models)
        head = f"{count} model{'' if count == 1 else 's'} loaded" if count else "No model is loaded"
        used = format_bytes(self.memory_used_bytes)
        if self.memory_budget_bytes:
            head += f" · {used} of the {format_bytes(self.memory_budget_bytes)} memory budget"
        elif count:
            head += f" · {used} estimated"
        if self.max_models is not None:
            head += f" · at most {self.max_models} at once"
        others = len(self.on_request)
        if others:
            head += f" · {others} more load on request"
        if self.remote:  # answered by other servers through this one: nothing of theirs is loaded here
            hosts = sorted(set(self.remote.values()))
            head += f" · {len(self.remote)} remote ({', '.join(hosts)})"
        return head + "."


def parse_loaded_models(data: Any, *, fetched_at: float | None = None) -> LoadedModels:
    """Read a `/launcher/models` answer asked for at `fetched_at` (monotonic; default: now); a ValueError
    says what is missing or malformed."""
    if not isinstance(data, dict) or not isinstance(data.get("models"), list):
        raise ValueError("the answer has no list of models")
    try:
        models = tuple(_model(item) for item in data["models"])
        budget = data.get("memory_budget_bytes")
        max_models = data.get("max_models")
        return LoadedModels(
            models=models,
            available=tuple(str(name) for name in data.get("available") or ()),
            memory_budget_bytes=int(budget) if budget is not None else None,
            memory_used_bytes=int(data.get("memory_used_bytes") or 0),
            max_models=int(max_models) if max_models is not None else None,
            loads={str(name): int(count) for name, count in (data.get("loads") or {}).items()},
            remote={str(name): str(where["url"]) for name, where in (data.get("remote_models") or {}).items()},
            fetched_at=time.monotonic() if fetched_at is None else fetched_at,
        )
    except (KeyError, TypeError, AttributeError) as err:
        raise ValueError(f"malformed model listing: {err!r}") from err


def _model(item: dict[str, Any]) -> LoadedModelInfo:
    ttl = item.get("ttl_seconds")
    return LoadedModelInfo(
        id=str(item["id"]),
        engine=str(item.get("engine") or ""),
        format=str(item.get("format") or ""),
        quant=str(item["quant"]) if item.get("quant") else None,
        context_length=int(item.get("context_length") or 0),
        parallel=int(item.get("parallel") or 1),
        memory_bytes=int(item.get("memory_bytes") or 0),
        estimated_bytes=int(item.get("estimated_bytes") or 0),
        requests_running=int(item.get("requests_running") or 0),
        requests_waiting=int(item.get("requests_waiting") or 0),
        busy=bool(item.get("busy")),
        idle_seconds=float(item.get("idle_seconds") or 0.0),
        ttl_seconds=float(ttl) if ttl is not None else None,
        load_seconds=float(item.get("load_seconds") or 0.0),
        loaded_at=float(item.get("loaded_at") or 0.0),
    )


def duration_text(seconds: float, *, round_up: bool = False) -> str:
    """12 -> "12 s", 150 -> "2 min", 4000 -> "1 h 6 min" (whole units: the rows update every second).

    `round_up` for a countdown: 9 min 59 s left reads "10 min", as a timer shows it.
    """
    whole = math.ceil(seconds) if round_up else int(seconds)
    if round_up and whole >= 60:
        whole = math.ceil(whole / 60) * 60
    if whole < 60:
        return f"{whole} s"
    if whole < 3600:
        return f"{whole // 60} min"
    hours, minutes = divmod(whole // 60, 60)
    return f"{hours} h {minutes} min" if minutes else f"{hours} h"


def decode_text(tokens_per_second: float | None) -> str:
    """A model's live decode rate ("–" before /metrics has a series for it)."""
    if tokens_per_second is None:
        return "–"
    shown = f"{tokens_per_second:.1f}" if tokens_per_second < 100 else f"{tokens_per_second:.0f}"
    return f"{shown} tok/s"


def unload_model(
    url: str, name: str, *, api_key: str | None = None, transport: httpx.BaseTransport | None = None
) -> str:
    """Ask the server at `url` (its root, not /v1) to unload `name`; a ServerError carries its reason."""
    headers = {"Authorization": f"Bearer {api_key}"} if api_key else {}
    try:
        with httpx.Client(transport=transport, headers=headers, timeout=UNLOAD_TIMEOUT_S) as client:
            reply = client.post(url.rstrip("/") + "/launcher/models/unload", json={"model": name})
    except httpx.HTTPError as err:
        raise ServerError(f"The server did not answer: {err}") from err
    if reply.status_code >= 400:
        raise ServerError(f"{name} was not unloaded: {error_message(reply)}")
    return name


def error_message(reply: httpx.Response) -> str:
    """The message of the server's error body (OpenAI shape), else the start of its text."""
    try:
        message = reply.json()["error"]["message"]
    except (ValueError, KeyError, TypeError):
        message = reply.text[:300] or reply.reason_phrase
    return str(message)
