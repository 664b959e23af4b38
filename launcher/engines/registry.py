"""Engine registry. Built-in engines register through the same path a third-party one would.

Engines are registered as factories so that importing the registry never imports a runtime.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from importlib import import_module

from launcher.core.errors import EngineUnavailableError
from launcher.engines.base import Engine
from launcher.hardware.machine import Machine

EngineFactory = Callable[[], Engine]

_factories: dict[str, EngineFactory] = {}


def register(name: str, factory: EngineFactory) -> None:
    """Add (or replace) an engine factory under `name`."""
    _factories[name] = factory


def unregister(name: str) -> None:
    """Remove an engine (tests that register fakes always unregister them)."""
    _factories.pop(name, None)


def names() -> list[str]:
    """Registered engine names, in registration order."""
    return list(_factories)


def get(name: str) -> Engine:
    """Instantiate the engine called `name`."""
    try:
        factory = _factories[name]
    except KeyError:
        known = ", ".join(_factories) or "none"
        raise EngineUnavailableError(f"Unknown engine {name!r}. Known engines: {known}.") from None
    return factory()


def _builtin(module: str, attr: str) -> EngineFactory:
    def factory() -> Engine:
        engine: Engine = getattr(import_module(module), attr)()
        return engine

    return factory


# Each adapter module imports its runtime lazily inside `load`/`availability`.
register("llamacpp", _builtin("launcher.engines.llamacpp.engine", "LlamaCppEngine"))
register("mlx", _builtin("launcher.engines.mlx.engine", "MlxEngine"))
register("exllamav3", _builtin("launcher.engines.exllamav3.engine", "ExLlamaV3Engine"))
register("exllamav2", _builtin("launcher.engines.exllamav2.engine", "ExLlamaV2Engine"))


def status_map(machine: Machine, only: Iterable[str] | None = None) -> dict[str, str | None]:
    """Engine name -> None when usable on `machine`, else the reason it is not (never raises).

    `only` limits the check to those engines: asking an engine imports its runtime (MLX alone
    adds ~28 MB to a process), which a server that will never run it should not carry.
    """
    wanted = set(only) if only is not None else None
    out: dict[str, str | None] = {}
    for name in names():
        if wanted is not None and name not in wanted:
            continue
        try:
            availability = get(name).availability(machine)
        except Exception as err:  # an adapter that fails to import is reported, not fatal
            out[name] = f"not available: {err}"
            continue
        out[name] = None if availability.usable else availability.reason
    return out
