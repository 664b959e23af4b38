"""Candidate (engine, format, quant) options for a catalog model, each fitted and timed."""

from __future__ import annotations

from dataclasses import dataclass
from typing import get_args

from launcher.advisor.calibration import MemoryEstimate, calibrated_memory
from launcher.advisor.calibration_store import CalibrationChoice, resolve_calibration
from launcher.advisor.fit import FitResult, KvType, fit_model, weights_bytes
from launcher.advisor.speed import SpeedEstimate, estimate_speed
from launcher.advisor.tables import bits_per_weight
from launcher.catalog.schema import CatalogModel, ExlVariant, FormatName, MlxVariant
from launcher.core.units import format_bytes
from launcher.engine_specs import EngineStatus, SlidingCache, get_spec, label
from launcher.engine_specs import specs as engine_specs
from launcher.hardware.machine import Machine

CATALOG_FORMATS: tuple[str, ...] = get_args(FormatName)
"""The formats catalog entries list quants in."""

HANDOFF = "vllm"
"""The datacenter engines (vLLM, SGLang) the advisor names for teams and big GPU nodes. The launcher
hands the model to them instead of running them, so they are not in the engine registry."""
FORMAT_LABELS = {"gguf": "GGUF", "mlx": "MLX", "exl3": "EXL3", "exl2": "EXL2", "fp8": "FP8", "awq": "AWQ"}


def engine_label(engine: str) -> str:
    """An engine's readable name, from the registry ("llama.cpp"), or the hand-off's."""
    return "vLLM / SGLang" if engine == HANDOFF else label(engine)


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
    launchable: bool = True  # False for hand-offs (vLLM) the launcher does not run itself
    unavailable_reason: str | None = None  # engine not installed / not usable here
    memory: MemoryEstimate | None = None  # the fit's needed bytes as this machine's runs correct them

    @property
    def kv_type(self) -> KvType:
        """The KV cache element type this option was fitted with (`launcher serve --kv-cache-type`)."""
        return self.fit.kv_type

    @property
    def label(self) -> str:
        """'llama.cpp + GGUF Q4_K_M', with ' + q8_0 KV cache' when the KV cache is not f16."""
        engine = engine_label(self.engine)
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
    return "window" if engine == HANDOFF else get_spec(engine).sliding_cache


KV_LEVER: KvType = "q8_0"
"""The KV cache type the advisor may offer llama.cpp when f16 does not fit (`--kv-cache-type q8_0`)."""


def kv_lever_applies(engine: str) -> bool:
    """Whether the advisor may pick a q8_0 KV cache for this engine (its spec says; llama.cpp's does)."""
    return engine != HANDOFF and get_spec(engine).quantized_kv


def splits_over_gpus(engine: str, machine: Machine) -> bool:
    """Whether the engine runs one model tensor-parallel over this machine's NVIDIA GPUs."""
    splits = engine == HANDOFF or get_spec(engine).tensor_parallel
    return splits and len(machine.nvidia_gpus) > 1


def can_offload(engine: str) -> bool:
    """Whether the engine can keep some layers in CPU RAM when the GPU is too small (llama.cpp)."""
    return engine != HANDOFF and get_spec(engine).can_offload


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
) -> Option:
    """Fit and time one (engine, format, quant) for `model` on `machine`.

    The speed (and a corrected memory figure, not the verdict) follow this machine's calibration
    runs when `calibration` has some for the engine; None gives the model's raw prediction.
    """
    table_format = "vllm" if engine == HANDOFF else fmt
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
    reason = None
    if engine != HANDOFF and status is not None:
        reason = status.get(engine, "not registered")
    return Option(
        engine=engine,
        format=fmt,
        quant=quant,
        bits_per_weight=bpw,
        weights_bytes=weights,
        fit=fit,
        speed=speed,
        source=_source(model, fmt, quant),
        launchable=engine != HANDOFF,
        unavailable_reason=reason,
        memory=calibrated_memory(fit, applicable),
    )


def is_datacenter(machine: Machine) -> bool:
    """A server node (HBM datacenter GPUs, or many big cards) rather than a desktop."""
    datacenter_names = ("H100", "H200", "H20", "A100", "B100", "B200", "GB200", "L40", "MI300", "MI250")
    big_cards = [g for g in machine.gpus if g.memory_total >= 40 * 1024**3]
    return any(n in g.name for g in machine.gpus for n in datacenter_names) or len(big_cards) >= 4


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
    hardware and suits it, with each quant the catalog has in the engine's formats (plus the vLLM
    hand-off for teams and datacenter nodes)."""
    specs: list[tuple[str, str, str]] = []
    for spec in engine_specs():
        if spec.runs_on(machine) is not None or not spec.suits(machine):
            continue
        for fmt in spec.formats:
            if fmt in CATALOG_FORMATS:
                specs += [(spec.name, fmt, q) for q in model.quants(fmt)]  # type: ignore[arg-type]
    nvidia = machine.nvidia_gpus
    if nvidia and (team or is_datacenter(machine)):
        min_cc = min(g.compute_capability or (0, 0) for g in nvidia)
        fp8 = min_cc >= (8, 9)
        specs += [(HANDOFF, "fp8" if fp8 else "awq", "FP8" if fp8 else "AWQ"), (HANDOFF, "bf16", "BF16")]
    runs = resolve_calibration(machine, calibration)  # once, not once per option
    return [
        build_option(
            machine, model, engine, fmt, quant, context=context, parallel=parallel, status=status, calibration=runs
        )
        for engine, fmt, quant in specs
    ]
