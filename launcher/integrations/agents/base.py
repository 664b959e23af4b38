"""The `Agent` description every integration module provides."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from launcher.integrations.endpoint import Endpoint
from launcher.integrations.setup import AgentSetup, WireApi


@dataclass(frozen=True)
class Agent:
    """A coding agent the launcher knows how to connect.

    `wire_api` is the API the agent speaks (and so the one the live test exercises);
    `needs_tools` is False for agents that edit through plain text (Aider), whose live test
    reports a failed tool call as a warning rather than a failure.
    """

    id: str
    name: str
    docs_url: str
    wire_api: WireApi
    min_context: int
    needs_tools: bool
    summary: str
    config_file: str | None  # relative to home; None when the agent has no file we can write
    build: Callable[[Endpoint], AgentSetup]

    def setup_for(self, endpoint: Endpoint) -> AgentSetup:
        """The env vars, config edits, fields and warnings for this endpoint."""
        return self.build(endpoint)
