"""Builds engines from their specs (`launcher.engine_specs`), importing a runtime only when asked.

The spec registry says which engines exist and what they run; this module is the only place
that turns a spec's `factory` into an `Engine` object, and the only one that asks an engine's
runtime whether it works here (`probe`), past the spec's cheap checks. An engine that runs as a
child process (`runs_as="child"`) is built as a `ChildEngine` of its spec (`child`): it has no runtime
in this process, and its availability is the spec's (its program is found here).
"""

from __future__ import annotations

from collections.abc import Iterable
from importlib import import_module

from launcher.core.errors import EngineUnavailableError
from launcher.engine_specs import Availability, get_spec, specs
from launcher.engines.base import Engine
from launcher.engines.child.engine import ChildEngine
from launcher.hardware.machine import Machine


def child(name: str) -> ChildEngine:
    """The engine called `name`, which runs as a child server."""
    spec = get_spec(name)
    if spec.runs_as != "child":
        raise EngineUnavailableError(f"{spec.label} runs in the launcher's process, not as a child server")
    return ChildEngine(spec)


def get(name: str) -> Engine:
    """Instantiate the engine called `name` (raises EngineUnavailableError for an unknown name, and for
    one that runs as a child server: see `child`)."""
    spec = get_spec(name)
    if spec.runs_as == "child":
        raise EngineUnavailableError(f"{spec.label} runs as a child server; the launcher does not load it itself")
    module_name, _, attribute = spec.factory.partition(":")
    try:
        engine_class = getattr(import_module(module_name), attribute)
    except (ImportError, AttributeError) as err:
        raise EngineUnavailableError(f"{spec.label} is not built into this launcher ({err})") from err
    engine: Engine = engine_class()
    return engine


def probe(name: str, machine: Machine) -> Availability:
    """Can engine `name` run on `machine`? The spec's checks first (hardware, installed), then the
    runtime's own (build, backend). Never raises: an adapter that fails is reported."""
    spec = get_spec(name)
    cheap = spec.availability(machine)
    if not cheap.usable or spec.runs_as == "child":
        return cheap
    try:
        return get(name).availability(machine)
    except Exception as err:
        return Availability(usable=False, reason=f"not available: {err}")


def status_map(machine: Machine, only: Iterable[str] | None = None) -> dict[str, str | None]:
    """Engine name -> None when usable on `machine`, else the reason it is not, from `probe`.

    `only` limits the check to those engines: asking an engine imports its runtime (MLX alone
    adds ~28 MB to a process), which a server that will never run it should not carry.
    """
    wanted = set(only) if only is not None else None
    out: dict[str, str | None] = {}
    for spec in specs():
        if wanted is not None and spec.name not in wanted:
            continue
        availability = probe(spec.name, machine)
        out[spec.name] = None if availability.usable else availability.reason
    return out
