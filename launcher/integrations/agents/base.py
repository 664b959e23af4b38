"""The `Agent` description every integration module provides."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from launcher.integrations.endpoint import Endpoint
from launcher.integrations.setup import AgentSetup, WireApi


@dataclass(frozen=True)
class RunConfig:
    """How to point one run of an agent at an endpoint without touching the agent's own config files.

    `env` is added to the user's environment for the agent's process only (`unset` names variables
    taken out of it); `args` go before the
    user's own arguments; `files` are run-only files (paths inside the run folder `launcher launch`
    creates, and removes when the agent exits) with their text, for agents whose settings cannot
    be given on the command line or in the environment.
    """

    env: dict[str, str]
    args: tuple[str, ...] = ()
    files: dict[Path, str] = field(default_factory=dict)
    unset: tuple[str, ...] = ()  # variables of the user's environment the agent must not see for this run


@dataclass(frozen=True)
class Install:
    """How a user gets the agent's command-line program: the package, and the registry it comes from."""

    registry: str  # "npm" or "pypi"
    package: str

    @property
    def command(self) -> str:
        """The install command to show."""
        if self.registry == "npm":
            return f"npm install -g {self.package}"
        return f"pipx install {self.package}"


@dataclass(frozen=True)
class Agent:
    """A coding agent the launcher knows how to connect.

    `wire_api` is the API the agent speaks (and so the one the live test exercises);
    `needs_tools` is False for agents that edit through plain text (Aider), whose live test
    reports a failed tool call as a warning rather than a failure. `binary` is the command a
    user runs (None for an agent without one: it lives in an editor), `install` where it comes
    from, and `run_config` how `launcher launch` points one run at a server (None: it cannot).
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
    binary: str | None = None
    install: Install | None = None
    run_config: Callable[[Endpoint, Path], RunConfig] | None = None

    def setup_for(self, endpoint: Endpoint) -> AgentSetup:
        """The env vars, config edits, fields and warnings for this endpoint."""
        return self.build(endpoint)

    def run_config_for(self, endpoint: Endpoint, run_dir: Path) -> RunConfig:
        """The environment, arguments and run-only files of one `launcher launch` run."""
        if self.run_config is None:
            raise ValueError(f"{self.name} has no command-line program that `launcher launch` can start")
        return self.run_config(endpoint, run_dir)
