"""The endpoint an agent connects to, and how to find the one a local `launcher serve` is running.

`Endpoint` is a plain value: the OpenAI-style base URL (ending in `/v1`), the key (None when the
server needs none), the model id clients send, the context length when it is known, and the
small model when the server sends an agent's small-model names (Claude Code's `claude-haiku-*`)
to another model than the main one.
`discover_endpoint` asks a running server (`GET /v1/models`; without a URL, the one the run files
name on the default port, else the newest, else the default port) for the missing pieces, so
`launcher connect` and the app's "Connect an agent" panel never make the user type what the
server already knows.
"""

from __future__ import annotations

import fnmatch
from dataclasses import dataclass, replace
from typing import Any

from launcher.core.config import DEFAULT_PORT
from launcher.core.errors import ConfigError, ServerError
from launcher.core.model_cards import context_length_of_card
from launcher.core.server_records import preferred_server, running_servers

DEFAULT_BASE_URL = f"http://127.0.0.1:{DEFAULT_PORT}/v1"

# A placeholder token for agents that refuse to start without one, when the server needs no key.
NO_KEY_PLACEHOLDER = "launcher-local"

RUN_KEY_ENV = "LAUNCHER_AGENT_API_KEY"
"""The variable an agent's run-only config (or its own settings' env block) names for the server's key.
Never LAUNCHER_API_KEY: `launcher serve` reads that one, so a placeholder in it would lock out a server
the agent's shell tool starts, and a user's own value would be overridden in the agent's whole tree."""


@dataclass(frozen=True)
class Endpoint:
    """Where an agent sends requests and with which model."""

    base_url: str
    api_key: str | None
    model_id: str
    context_length: int | None = None
    small_model_id: str | None = None  # for titles, summaries, sub-agents; None: the main model

    def __post_init__(self) -> None:
        object.__setattr__(self, "base_url", normalize_base_url(self.base_url))
        if not self.model_id.strip():
            raise ConfigError("the model id is empty: pass --model or start a server with a model loaded")

    @property
    def root_url(self) -> str:
        """The server root without the trailing `/v1` (Anthropic clients append `/v1/messages` themselves)."""
        return self.base_url[: -len("/v1")] if self.base_url.endswith("/v1") else self.base_url

    @property
    def key_or_placeholder(self) -> str:
        """The key, or a harmless placeholder for agents that insist on a non-empty one."""
        return self.api_key or NO_KEY_PLACEHOLDER

    @classmethod
    def from_ready_line(cls, info: dict[str, Any], api_key: str | None = None) -> Endpoint:
        """Build from the JSON of the server's `LAUNCHER_READY` line (see launcher/cli/serve.py)."""
        return cls(
            base_url=str(info["base_url"]),
            api_key=api_key,
            model_id=str(info["model"]),
            context_length=int(info["context_length"]) if info.get("context_length") else None,
        )


def normalize_base_url(url: str) -> str:
    """`http://host:port`, `.../v1/` or `host:port` all become `http://host:port/v1`."""
    text = url.strip().rstrip("/")
    if not text:
        raise ConfigError("the base URL is empty")
    if "://" not in text:
        text = "http://" + text
    if not text.endswith("/v1"):
        text += "/v1"
    return text


def running_base_url() -> str | None:
    """The base URL of the running `launcher serve` to connect to (its run file): the one on the default
    port, else the newest on whatever port; None if none runs."""
    chosen = preferred_server(running_servers(), DEFAULT_PORT)
    return chosen.base_url if chosen else None


def discover_endpoint(
    base_url: str | None = None,
    api_key: str | None = None,
    model_id: str | None = None,
    context_length: int | None = None,
    *,
    timeout: float = 5.0,
) -> Endpoint:
    """Fill in what is missing by asking the server's `/v1/models` (default: `running_base_url()`, else the
    default port).

    Raises ServerError with what to do when no server answers, or the key is refused.
    """
    import httpx

    url = normalize_base_url(base_url or running_base_url() or DEFAULT_BASE_URL)
    headers = {"Authorization": f"Bearer {api_key}"} if api_key else {}
    try:
        response = httpx.get(f"{url}/models", headers=headers, timeout=timeout)
    except httpx.HTTPError as err:
        hint = (
            "start one with `launcher serve` (or open the app), or pass --base-url"
            if base_url is None
            else "check the URL and that the server is running"
        )
        raise ServerError(f"no server answered at {url} ({type(err).__name__}): {hint}") from err
    if response.status_code in (401, 403):
        raise ServerError(f"the server at {url} refused the API key (HTTP {response.status_code}): pass --api-key")
    if response.status_code != 200:
        raise ServerError(
            f"GET {url}/models returned HTTP {response.status_code}; is this an OpenAI-compatible server?"
        )
    try:
        entries = [e for e in response.json().get("data", []) if isinstance(e, dict) and e.get("id")]
    except ValueError as err:
        raise ServerError(f"GET {url}/models did not return JSON; is this an OpenAI-compatible server?") from err
    if not entries:
        raise ServerError(f"the server at {url} lists no models")
    chosen = entries[0]
    if model_id:
        chosen = next((e for e in entries if e["id"] == model_id), {"id": model_id})
    small = small_model_in(entries)
    endpoint = Endpoint(url, api_key, str(chosen["id"]), context_length, small if small != chosen["id"] else None)
    if context_length is None:
        endpoint = replace(endpoint, context_length=context_length_of_card(chosen))
    return endpoint


SMALL_MODEL_NAME = "claude-haiku-4-5"
"""The name an agent sends for its small model (Claude Code's Haiku slot)."""


def small_model_in(entries: list[dict[str, Any]]) -> str | None:
    """The model a server's aliases send small-model names to (`[models.X] aliases =
    ["claude-haiku-*"]`, `--alias claude-haiku-*=X`), as its /v1/models lists them (`alias_for`)."""
    for entry in entries:
        target = entry.get("alias_for")
        if isinstance(target, str) and fnmatch.fnmatchcase(SMALL_MODEL_NAME, str(entry["id"])):
            return target
    return None
