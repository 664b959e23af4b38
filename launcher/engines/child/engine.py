"""What the registry builds for an engine that runs as a child: its availability, its launch and its start.

`plan` is the child's whole decision, made once before the server binds: a free loopback port, a new
random key and the command (the catalog's hand-off plan for vLLM and SGLang), so a missing engine or a
model that cannot be planned stops the start at once. `start` is its load, run by the model pool: the
child starts, and the load ends when its /health answers; closing what it returns stops the child.
"""

from __future__ import annotations

import logging
import secrets
from collections.abc import Callable
from dataclasses import dataclass

from launcher.core.config import ServeConfig
from launcher.core.errors import ConfigError
from launcher.core.net import free_port
from launcher.engine_specs import Availability, EngineSpec
from launcher.engine_specs.child import ChildRequest
from launcher.engines.child.command import build_command, launch_of
from launcher.engines.child.process import ChildServer
from launcher.hardware.machine import Machine

log = logging.getLogger(__name__)

LOOPBACK = "127.0.0.1"


@dataclass(frozen=True)
class ChildPlan:
    """A child ready to start: its command, where it will listen and the key it will want."""

    child: ChildServer
    context: int | None  # the context length it was given (None: the engine's own)

    @property
    def served_name(self) -> str:
        """The model's id at the child."""
        return self.child.served_name


class ChildEngine:
    """An engine that runs as a child server, as its spec describes it."""

    def __init__(self, spec: EngineSpec) -> None:
        self.spec = spec
        self.launch = launch_of(spec)
        self.name = spec.name

    def availability(self, machine: Machine) -> Availability:
        """Usable where its program is found here (its hardware needs are the spec's `runs_on`)."""
        return self.spec.availability(machine)

    def plan(self, config: ServeConfig, machine: Machine | None = None) -> ChildPlan:
        """The child that serves `config.model` (raises at once when the engine is not installed or the
        model cannot be planned)."""
        if not config.model:
            raise ConfigError(f"--engine {self.name} needs the model to serve: a catalog id, a Hub repo or a folder.")
        request = ChildRequest(
            config.model,
            free_port(LOOPBACK),
            secrets.token_urlsafe(24),
            served_name=config.served_name,
            context=config.context,
            host=LOOPBACK,
            machine=machine,
        )
        command = build_command(self.spec, request)
        child = ChildServer(self.name, command, request.port, request.api_key, LOOPBACK, self.launch.health_path)
        return ChildPlan(child, config.context)

    def start(self, plan: ChildPlan, cancelled: Callable[[], bool] = lambda: False) -> ChildServer:
        """Start the planned child and wait for its /health (the load: blocks, run it on a thread) until
        `cancelled` says the server stops; a child that fails is stopped, and its error says why with its
        last output."""
        child = plan.child
        log.info("starting %s: %s", self.name, " ".join(child.command.argv))
        child.start()
        try:
            child.wait_ready(self.launch.ready_timeout_s, cancelled)
        except BaseException:
            child.stop()
            raise
        return child
