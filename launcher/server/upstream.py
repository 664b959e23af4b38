"""Another OpenAI-compatible server whose models this one serves: a registered remote, or a vLLM or
SGLang child this server started (`launcher serve MODEL --engine vllm`).

What travels to it is its own key, never the key of the client that called this server: the
local key guards this machine, and a remote that logs or leaks what it receives must not learn it.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import httpx

from launcher.core.errors import ServerError
from launcher.core.model_cards import context_length_of_card

LIST_TIMEOUT_S = 5.0
"""How long listing a remote's models may take at the server's start (a remote that is down must not hold it)."""


@dataclass(frozen=True)
class Upstream:
    """Where an upstream server is and how to call it."""

    name: str  # the remote's registered name, or the child engine's ("vllm")
    base_url: str  # the OpenAI base URL, ending in /v1
    api_key: str | None = field(default=None, repr=False)
    prefix: str = ""  # put before its model ids to make this server's names ("gpu/"; "" for a child)
    engine: str = "remote"  # what /v1/models and /launcher/models say runs it

    @property
    def root_url(self) -> str:
        """The server's root, where /health and /metrics are (the base URL without its /v1)."""
        return self.base_url.removesuffix("/v1")

    def headers(self) -> dict[str, str]:
        """The headers every request to it carries: its own key, as OpenAI-compatible servers read it."""
        return {"Authorization": f"Bearer {self.api_key}"} if self.api_key else {}

    def local_name(self, model: str) -> str:
        """This server's name for the upstream's model `model`."""
        return self.prefix + model


@dataclass(frozen=True)
class RemoteModel:
    """A model an upstream serves, as this server passes requests to it."""

    upstream: Upstream
    model: str  # the id the upstream knows it by
    context_length: int | None = None  # when its /v1/models says


def unreachable(upstream: Upstream, err: Exception) -> str:
    """One line saying that `upstream` did not answer, and why."""
    detail = str(err) or type(err).__name__
    return f"the remote {upstream.name} ({upstream.base_url}) cannot be reached: {detail}"


def list_models(upstream: Upstream, timeout_s: float = LIST_TIMEOUT_S) -> list[RemoteModel]:
    """The models `upstream` lists at /v1/models (aliases a launcher lists are left out: the names
    its models go by are enough). Raises ServerError saying what went wrong."""
    try:
        with httpx.Client(timeout=timeout_s, headers=upstream.headers()) as client:
            reply = client.get(upstream.base_url + "/models")
    except httpx.HTTPError as err:
        raise ServerError(unreachable(upstream, err)) from err
    if reply.status_code in (401, 403):
        raise ServerError(
            f"the remote {upstream.name} refused the key ({reply.status_code}): add it again with its key "
            f"(`launcher remote add {upstream.name} URL --api-key-stdin`)"
        )
    if reply.status_code != 200:
        raise ServerError(f"the remote {upstream.name} answered /v1/models with HTTP {reply.status_code}")
    try:
        cards = reply.json().get("data", [])
    except (ValueError, AttributeError) as err:
        raise ServerError(f"the remote {upstream.name} answered /v1/models with something else than a list") from err
    models = []
    for card in cards:
        if isinstance(card, dict) and isinstance(card.get("id"), str) and not card.get("alias_for"):
            models.append(RemoteModel(upstream, card["id"], context_length_of_card(card)))
    return models
