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
from pathlib import Path

from launcher.core.config import ServeConfig
from launcher.core.errors import CatalogError, ConfigError, ModelFormatError
from launcher.core.net import free_port
from launcher.engine_specs import EngineSpec
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

    def plan(self, config: ServeConfig, machine: Machine | None = None) -> ChildPlan:
        """The child that serves `config.model` (raises at once when the engine is not installed or the
        model cannot be planned)."""
        if not config.model:
            raise ConfigError(f"--engine {self.name} needs the model to serve: a catalog id, a Hub repo or a folder.")
        model, library_name = self._model_for_child(config.model)
        request = ChildRequest(
            model,
            free_port(LOOPBACK),
            secrets.token_urlsafe(24),
            served_name=config.served_name or library_name,
            context=config.context,
            host=LOOPBACK,
            machine=machine,
        )
        command = build_command(self.spec, request)
        child = ChildServer(self.name, command, request.port, request.api_key, LOOPBACK, self.launch.health_path)
        return ChildPlan(child, config.context)

    def _model_for_child(self, model: str) -> tuple[str, str | None]:
        """`model` as the child is given it, and the library name to serve it under (None: its own).

        A path, a catalog id (the hand-off plans it) or a Hub repo goes as it is. A name of the local
        library (what the app's rows are) goes as its folder, which the child can read, where a name it
        has never heard of would be looked up on the Hub; one in a format the engine does not load is
        refused here, before a child is started with it.
        """
        from launcher.catalog import library
        from launcher.catalog.catalog import find

        if Path(model).expanduser().exists():
            return model, None
        try:
            find(model)
            return model, None
        except CatalogError:
            pass
        entry = library.find_entry(model)
        if entry is None or entry.source == "starter" or entry.problem:
            return model, None
        if entry.model.format not in self.spec.formats:
            raise ModelFormatError(
                f"{self.spec.label} (--engine {self.name}) does not load {entry.model.format.upper()} models, "
                f"and {model} is one: serve it with --engine auto."
            )
        return str(entry.model.path), model

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
