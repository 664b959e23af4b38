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

from launcher.core.config import AUTO_ENGINE, ServeConfig
from launcher.core.errors import ModelDoesNotFitError, ModelFormatError, in_context
from launcher.core.model_types import LocalModel
from launcher.core.units import GIB

if TYPE_CHECKING:
    from launcher.advisor.fit import FitResult
    from launcher.catalog.library import LibraryEntry
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
    needed_bytes: int  # what the advisor's fit says the load takes, all devices together


def resolve(spec: str, library: list[LibraryEntry] | None = None) -> LocalModel:
    """The model a user named (path, catalog id, library name, "" or "starter"); `library`: the local
    library as a scan already made (None: scanned when the name needs it)."""
    from launcher.catalog.resolve import resolve_model

    return resolve_model(spec, library)


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


def plan(config: ServeConfig, machine: Machine | None = None, library: list[LibraryEntry] | None = None) -> ServeSetup:
    """Resolve the model and let the advisor fill what the config left open (`machine`: probed if None;
    `library`: the local library as a scan the caller already made, so it is not scanned again here).

    What is set stays: the app sends the decision its model list showed (engine, context, GPU
    layers, KV cache type), so this only checks that it fits; `launcher serve MODEL` alone gets
    the same decision made here, by the same function.
    """
    model = resolve(config.model, library)
    if config.served_name:
        model = replace(model, name=config.served_name)
    from launcher.advisor import plan_for_config
    from launcher.advisor.plan import resolve_kv_type
    from launcher.catalog.gguf_meta import read_gguf_metadata
    from launcher.engine_specs import engine_status, engines_for_format, get_spec
    from launcher.hardware.probe import probe_machine

    if config.engine != AUTO_ENGINE:
        pinned = get_spec(config.engine)  # an unknown name stops here, with the known ones
        if model.format not in pinned.formats:
            runs = engines_for_format(model.format).all
            instead = f"; {', '.join(e.name for e in runs)} does" if runs else ""
            raise ModelFormatError(
                f"{pinned.label} (--engine {pinned.name}) does not load {model.format.upper()} models{instead}."
            )
    arch: Architecture | None
    if model.format == "gguf":
        meta = read_gguf_metadata(model.path)
        arch, weights = meta.to_architecture(), meta.file_bytes
    else:
        arch, weights = _directory_facts(model.path)
    machine = machine or probe_machine()
    if arch is None:  # config.json without the numbers the advisor needs: the format decides alone
        engines = engines_for_format(model.format, machine, in_process=True)
        chosen = engines.first or (engines.all[0] if engines.all else None)
        if config.engine == AUTO_ENGINE and chosen is None:
            raise ModelFormatError(in_context(f"No engine runs {model.name} ({model.format})", engines.why_none()))
        engine = chosen.name if config.engine == AUTO_ENGINE and chosen else config.engine
        filled = config.model_copy(update={"engine": engine, "kv_cache_type": resolve_kv_type(config.kv_cache_type)})
        # No numbers to fit with: the weights and a tenth for the cache and buffers are the best guess.
        needed = int(weights * 1.1)
        return ServeSetup(model, engine, f"{engine} runs {model.format.upper()} models", filled, needed)
    # Cheap engine checks only (hardware, installed): asking a runtime imports it, and MLX alone
    # costs a server ~28 MB that will never run it.
    # The library, for the catalog's draft model when a copy is downloaded (never fetched from here).
    drafts = _library_for_draft(model, config, library)
    serve_plan = plan_for_config(
        machine,
        model.format,
        arch,
        weights,
        config,
        engine_status(machine),
        catalog_id=model.catalog_id,
        library=drafts,
    )
    if not serve_plan.fit.fits:
        raise ModelDoesNotFitError(_fit_message(model, serve_plan.fit))
    filled = serve_plan.fill(config)
    return ServeSetup(model, serve_plan.engine, serve_plan.reason, filled, serve_plan.fit.with_draft_bytes)


def _library_for_draft(
    model: LocalModel, config: ServeConfig, library: list[LibraryEntry] | None
) -> list[LibraryEntry] | None:
    """The local library when the advisor may pick a draft model for `model` (one of the catalog's with
    a draft, no --draft given, speculation that uses one): `library` when the caller scanned it, else a
    scan now; None otherwise, sparing the scan."""
    from launcher.catalog.catalog import default_catalog
    from launcher.catalog.library import scan_library

    if model.catalog_id is None or config.draft is not None or config.speculative in ("off", "ngram"):
        return None
    if default_catalog().draft_for(model.catalog_id) is None:
        return None
    if library is not None:
        return [entry for entry in library if entry.source != "starter"]
    return scan_library(include_starter=False)
