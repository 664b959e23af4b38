"""From `launcher serve MODEL [flags]` to a model on disk, an engine and the numbers to load it with.

Resolution goes through `launcher.catalog.resolve` (paths, catalog ids, library names, the
starter model); `--engine auto`, a missing `--gpu-layers` or `--context` are filled in by the
advisor's serve plan for this machine. A plan whose fit verdict is "wont_fit" stops the start
with the advisor's numbers.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, replace
from pathlib import Path
from typing import TYPE_CHECKING

from launcher.core.config import ServeConfig
from launcher.core.errors import ModelDoesNotFitError
from launcher.core.model_types import LocalModel
from launcher.core.units import GIB

if TYPE_CHECKING:
    from launcher.advisor.fit import FitResult
    from launcher.core.model_types import Architecture
    from launcher.hardware.machine import Machine

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class ServeSetup:
    """The resolved model, the engine to run it, and the config with the advisor's numbers filled in."""

    model: LocalModel
    engine: str
    engine_reason: str
    config: ServeConfig


def resolve(spec: str) -> LocalModel:
    """The model a user named (path, catalog id, library name, "" or "starter")."""
    from launcher.catalog.resolve import resolve_model

    return resolve_model(spec)


def _fit_message(model: LocalModel, fit: FitResult) -> str:
    pools = ", ".join(f"{d.device} needs {d.used / GIB:.2f} GiB, has {d.free / GIB:.2f} GiB free" for d in fit.devices)
    text = (
        f"{model.name} does not fit on this machine: weights {fit.weights_bytes / GIB:.2f} GiB + KV cache "
        f"{fit.kv_bytes / GIB:.2f} GiB (context {fit.context} x {fit.parallel}, {fit.kv_type}) + overhead "
        f"{fit.overhead_bytes / GIB:.2f} GiB"
    )
    if fit.checkpoint_bytes:
        text += f" + KV checkpoints {fit.checkpoint_bytes / GIB:.2f} GiB"
    text += f" = {fit.needed_bytes / GIB:.2f} GiB"
    if pools:
        text += f" ({pools})"
    advice = " ".join(fit.advice) or "Try a smaller quant, a smaller --context or fewer --parallel sequences."
    return f"{text}. {advice}"


def _directory_facts(path: Path) -> tuple[Architecture | None, int]:
    """Architecture numbers and weight bytes of a safetensors model directory (MLX, EXL2/EXL3, plain)."""
    from launcher.catalog.local_formats import detect_directory

    weights = sum(f.stat().st_size for f in path.glob("*.safetensors"))
    detected = detect_directory(path, weights)
    return (detected.architecture if detected else None), weights


def _engine_status(machine: Machine, fmt: str) -> dict[str, str | None]:
    """Which of the engines for this format can run here, so `auto` explains an engine that is
    missing instead of failing later (only those: asking an engine imports its runtime)."""
    from launcher.advisor.plan import ENGINES_FOR_FORMAT
    from launcher.engines.registry import status_map

    return status_map(machine, only=ENGINES_FOR_FORMAT.get(fmt, ()))


def plan(config: ServeConfig, machine: Machine | None = None) -> ServeSetup:
    """Resolve the model and let the advisor choose what the user left open (`machine`: probed if None)."""
    model = resolve(config.model)
    if config.served_name:
        model = replace(model, name=config.served_name)
    from launcher.advisor import plan_local
    from launcher.catalog.gguf_meta import read_gguf_metadata
    from launcher.hardware.probe import probe_machine

    arch: Architecture | None
    if model.format == "gguf":
        meta = read_gguf_metadata(model.path)
        arch, weights = meta.to_architecture(), meta.file_bytes
    else:
        arch, weights = _directory_facts(model.path)
        if arch is None:  # config.json without the numbers the advisor needs: the format decides alone
            by_format = {"mlx": "mlx", "exl3": "exllamav3", "exl2": "exllamav2", "safetensors": "mlx"}
            chosen = by_format.get(model.format, "llamacpp") if config.engine == "auto" else config.engine
            config = config.model_copy(update={"kv_cache_type": "f16"}) if config.kv_cache_type == "auto" else config
            return ServeSetup(model, chosen, f"{chosen} runs {model.format.upper()} models", config)
    machine = machine or probe_machine()
    serve_plan = plan_local(
        machine,
        model.format,
        arch,
        weights,
        context=config.context,
        parallel=config.parallel,
        engine=None if config.engine == "auto" else config.engine,
        status=_engine_status(machine, model.format) if config.engine == "auto" else None,
        kv_type=None if config.kv_cache_type == "auto" else config.kv_cache_type,
    )
    if not serve_plan.fit.fits:
        raise ModelDoesNotFitError(_fit_message(model, serve_plan.fit))
    updates: dict[str, object] = {}
    if config.context is None:
        updates["context"] = serve_plan.context
    if config.gpu_layers is None:
        updates["gpu_layers"] = serve_plan.gpu_layers
    if config.kv_cache_type == "auto":
        updates["kv_cache_type"] = serve_plan.kv_type
    filled = config.model_copy(update=updates) if updates else config
    return ServeSetup(model, serve_plan.engine, serve_plan.reason, filled)
