"""Candidate (engine, format, quant) options for a catalog model, each fitted and timed."""

from __future__ import annotations

from dataclasses import dataclass
from typing import get_args

from launcher.advisor.calibration import MemoryEstimate, calibrated_memory
from launcher.advisor.calibration_store import CalibrationChoice, resolve_calibration
from launcher.advisor.fit import FitResult, KvType, fit_model, weights_bytes
from launcher.advisor.speed import SpeedEstimate, estimate_speed
from launcher.advisor.tables import SAFETENSORS_TABLE, bits_per_weight
from launcher.catalog.schema import CatalogModel, ExlVariant, FormatName, MlxVariant
from launcher.core.units import format_bytes
from launcher.engine_specs import EngineSpec, EngineStatus, SlidingCache, get_spec, label
from launcher.engine_specs import specs as engine_specs
from launcher.engine_specs.preference import Preference, Situation
from launcher.hardware.machine import Machine

CATALOG_FORMATS: tuple[str, ...] = get_args(FormatName)
"""The formats catalog entries list quants in."""

FORMAT_LABELS = {"gguf": "GGUF", "mlx": "MLX", "exl3": "EXL3", "exl2": "EXL2", "fp8": "FP8", "awq": "AWQ"}


def engine_label(engine: str) -> str:
    """An engine's readable name, from the registry ("llama.cpp")."""
    return label(engine)


@dataclass(frozen=True)
class Option:
    """One way to run the model here, with its fit and speed."""

    engine: str
    format: str
    quant: str
    bits_per_weight: float
    weights_bytes: int
    fit: FitResult
    speed: SpeedEstimate
    source: str  # "unsloth/Qwen3-8B-GGUF:Qwen3-8B-Q4_K_M.gguf", "turboderp/Qwen3-8B-exl3@4.0bpw"
    launchable: bool = True  # False for a hand-off: a child engine not installed here (`launcher handoff`)
    unavailable_reason: str | None = None  # engine not installed / not usable here
    memory: MemoryEstimate | None = None  # the fit's needed bytes as this machine's runs correct them
    shown_as: str = ""  # how the advice names the engine, when not by its spec's label (`Preference.label`)

    @property
    def engine_label(self) -> str:
        """The engine as the advice names it: "llama.cpp", or "vLLM / SGLang" for the hand-off."""
        return self.shown_as or engine_label(self.engine)

    @property
    def kv_type(self) -> KvType:
        """The KV cache element type this option was fitted with (`launcher serve --kv-cache-type`)."""
        return self.fit.kv_type

    @property
    def label(self) -> str:
        """'llama.cpp + GGUF Q4_K_M', with ' + q8_0 KV cache' when the KV cache is not f16."""
        engine = self.engine_label
        kv = "" if self.kv_type == "f16" else f" + {self.kv_type} KV cache"
        return f"{engine} + {FORMAT_LABELS.get(self.format, self.format)} {self.quant}{kv}"

    @property
    def runnable_here(self) -> bool:
        """The launcher can serve this option on this machine right now."""
        return self.launchable and self.unavailable_reason is None and self.fit.fits


def _source(model: CatalogModel, fmt: str, quant: str) -> str:
    if fmt == "gguf" and model.gguf:
        return f"{model.gguf.repo}:{model.gguf.quants[quant].files[0]}"
    if fmt == "mlx":
        return model.mlx[quant].repo
    if fmt in ("exl3", "exl2"):
        variant = (model.exl3 if fmt == "exl3" else model.exl2)[quant]
        return f"{variant.repo}@{variant.revision}"
    if fmt in model.safetensors:  # the hand-off's pre-quantized repo (FP8, AWQ), as `launcher handoff` picks
        return model.safetensors[fmt].repo  # type: ignore[index]
    return model.upstream_repo


def _recorded_size(model: CatalogModel, fmt: str, quant: str) -> int | None:
    if fmt == "gguf" and model.gguf:
        return model.gguf.quants[quant].size_bytes
    variants: dict[str, MlxVariant] | dict[str, ExlVariant]
    if fmt == "mlx":
        variants = model.mlx
    elif fmt in ("exl3", "exl2"):
        variants = model.exl3 if fmt == "exl3" else model.exl2
    else:
        return None
    return variants[quant].size_bytes if quant in variants else None


def sliding_cache(engine: str) -> SlidingCache:
    """How the engine sizes sliding-window layers: its spec says (vLLM keeps each sequence's window)."""
    return get_spec(engine).sliding_cache


KV_LEVER: KvType = "q8_0"
"""The KV cache type the advisor may offer an engine whose spec has `quantized_kv` (llama.cpp) when f16
does not fit (`--kv-cache-type q8_0`)."""


def kv_lever_applies(engine: str) -> bool:
    """Whether the advisor may pick a q8_0 KV cache for this engine (its spec says; llama.cpp's does)."""
    return get_spec(engine).quantized_kv


def splits_over_gpus(engine: str, machine: Machine) -> bool:
    """Whether the engine runs one model tensor-parallel over this machine's NVIDIA GPUs."""
    return get_spec(engine).tensor_parallel and len(machine.nvidia_gpus) > 1


def can_offload(engine: str) -> bool:
    """Whether the engine can keep some layers in CPU RAM when the GPU is too small (llama.cpp)."""
    return get_spec(engine).can_offload


def _usable(spec: EngineSpec, status: EngineStatus | None) -> tuple[bool, str | None]:
    """(launchable, unavailable reason) of an option for the engine `spec`.

    An engine in this process is launchable; `status` says whether it is usable here. An engine that
    runs as a child server is launched only when `status` says it is installed and usable here: else
    its option is a hand-off (`launcher handoff` writes the deployment for the machine), not a fault
    to report, and without `status` (advice about another machine) it is a hand-off too."""
    reason = status.get(spec.name, "not registered") if status is not None else None
    if spec.runs_as == "child":
        return status is not None and reason is None, None
    return True, reason


def kv_lever_cost(f16_bytes: int, lever_bytes: int, context: int) -> str:
    """'a q8_0 KV cache (...): 1.6 GiB instead of 3.1 GiB at f16 for the 32k context; the cost is ...'."""
    tokens = f"{context // 1024}k" if context % 1024 == 0 else f"{context:,}-token"
    return (
        f"a {KV_LEVER} KV cache (--kv-cache-type {KV_LEVER}, which turns on flash attention): "
        f"{format_bytes(lever_bytes)} instead of {format_bytes(f16_bytes)} at f16 for the {tokens} context; "
        f"the cost is a small quality loss ({KV_LEVER} K/V are near-lossless in llama.cpp's perplexity tests) "
        "and somewhat slower attention on the CPU"
    )


def build_option(
    machine: Machine,
    model: CatalogModel,
    engine: str,
    fmt: str,
    quant: str,
    *,
    context: int,
    parallel: int,
    kv_type: KvType = "f16",
    status: EngineStatus | None = None,
    calibration: CalibrationChoice = "stored",
    shown_as: str = "",
) -> Option:
    """Fit and time one (engine, format, quant) for `model` on `machine`.

    The speed (and a corrected memory figure, not the verdict) follow this machine's calibration
    runs when `calibration` has some for the engine; None gives the model's raw prediction.
    `shown_as` names the engine in the advice when its spec's label does not (`Preference.label`).
    """
    # Formats outside the catalog's quant formats are the safetensors checkpoints an engine offers.
    table_format = fmt if fmt in CATALOG_FORMATS else SAFETENSORS_TABLE
    bpw = bits_per_weight(table_format, quant)
    weights = _recorded_size(model, fmt, quant) or weights_bytes(model.architecture, bpw)
    # An engine that cannot offload runs on its GPU (or Apple's unified memory) or not at all.
    on_gpu = not can_offload(engine) or bool(machine.gpus) or machine.apple is not None
    fit = fit_model(
        machine,
        model.architecture,
        weights,
        context=context,
        parallel=parallel,
        kv_type=kv_type,
        use_gpu=on_gpu,
        allow_offload=can_offload(engine),
        sliding=sliding_cache(engine),
    )
    tensor_parallel = splits_over_gpus(engine, machine)
    runs = resolve_calibration(machine, calibration)
    applicable = runs.for_model(engine, model.architecture.params_active_b) if runs is not None else None
    speed = estimate_speed(
        machine, model.architecture, bpw, fit, tensor_parallel=tensor_parallel, calibration=applicable
    )
    launchable, reason = _usable(get_spec(engine), status)
    return Option(
        engine=engine,
        format=fmt,
        quant=quant,
        bits_per_weight=bpw,
        weights_bytes=weights,
        fit=fit,
        speed=speed,
        source=_source(model, fmt, quant),
        launchable=launchable,
        unavailable_reason=reason,
        memory=calibrated_memory(fit, applicable),
        shown_as=shown_as,
    )


def ranked_engines(situation: Situation) -> list[tuple[EngineSpec, Preference]]:
    """The engines that want to be recommended in `situation`, in the order they are tried: by the rank
    their spec's `prefer` gives, ties in registry order. The advisor names no engine itself."""
    wanting = [(spec, preference) for spec in engine_specs() if (preference := spec.prefer(situation)) is not None]
    return sorted(wanting, key=lambda entry: entry[1].rank)


def candidate_options(
    machine: Machine,
    model: CatalogModel,
    *,
    context: int,
    parallel: int,
    status: EngineStatus | None = None,
    team: bool = False,
    calibration: CalibrationChoice = "stored",
) -> list[Option]:
    """Every option worth considering for this machine: each registered engine that can run on this
    hardware and suits it (or ranks itself for this situation: the hand-off for a team), with each quant
    the catalog has in the engine's formats and the weights its `Preference` offers besides."""
    situation = Situation.of(machine, model.id, team=team)
    picks: list[tuple[str, str, str, str]] = []  # engine, format, quant, the engine as the advice names it
    for spec in engine_specs():
        preference = spec.prefer(situation)
        if spec.runs_on(machine) is not None or not (spec.suits(machine) or preference is not None):
            continue
        shown_as = preference.label if preference is not None else ""
        for fmt in spec.formats:
            if fmt in CATALOG_FORMATS:
                picks += [(spec.name, fmt, q, shown_as) for q in model.quants(fmt)]  # type: ignore[arg-type]
        if preference is not None:
            picks += [(spec.name, offer.format, offer.quant, shown_as) for offer in preference.offers]
    runs = resolve_calibration(machine, calibration)  # once, not once per option
    return [
        build_option(
            machine,
            model,
            engine,
            fmt,
            quant,
            context=context,
            parallel=parallel,
            status=status,
            calibration=runs,
            shown_as=shown_as,
        )
        for engine, fmt, quant, shown_as in picks
    ]
