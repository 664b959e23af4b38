"""Which engines can run here, asked of the engine registry without importing any runtime.

Each engine's `availability` imports its runtime lazily (and only to check a version), so
this stays cheap; an engine whose adapter is not built in this checkout is reported as such.
"""

from __future__ import annotations

from launcher.core.errors import LauncherError
from launcher.hardware.machine import Machine

FORMAT_ENGINES: dict[str, tuple[str, ...]] = {
    "gguf": ("llamacpp",),
    "mlx": ("mlx",),
    "exl3": ("exllamav3",),
    "exl2": ("exllamav2",),
    "safetensors": (),
}


def engine_status(machine: Machine) -> dict[str, str | None]:
    """Engine name -> None when usable here, else the reason it is not (the advisor's EngineStatus)."""
    from launcher.engines import registry

    status: dict[str, str | None] = {}
    for name in registry.names():
        try:
            availability = registry.get(name).availability(machine)
        except (ImportError, LauncherError) as err:
            status[name] = f"not available in this build ({err})"
            continue
        status[name] = None if availability.usable else availability.reason
    return status


def runnable_by(fmt: str, status: dict[str, str | None]) -> tuple[str | None, str]:
    """(engine that can run `fmt` here, or None; a short explanation)."""
    engines = FORMAT_ENGINES.get(fmt, ())
    if not engines:
        return None, "no launcher engine runs plain safetensors (use a GGUF/MLX/EXL quant)"
    for engine in engines:
        if engine in status and status[engine] is None:
            return engine, engine
    reasons = [f"{engine}: {status.get(engine) or 'not registered'}" for engine in engines]
    return None, "; ".join(reasons)
