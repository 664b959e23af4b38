"""Serve plans for a model already on disk: which engine, how many GPU layers, what context.

`launcher serve` calls this when the user did not pin the engine, layers or context. It works
for any model, catalog or not, from the architecture numbers read out of the file.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from launcher.advisor.fit import VERDICT_RANK, FitResult, KvType, fit_model
from launcher.advisor.options import (
    ENGINE_LABELS,
    KV_LEVER,
    EngineStatus,
    kv_lever_applies,
    kv_lever_cost,
    sliding_cache,
)
from launcher.core.model_types import Architecture
from launcher.hardware.machine import Machine

ENGINES_FOR_FORMAT: dict[str, tuple[str, ...]] = {
    "gguf": ("llamacpp",),
    "mlx": ("mlx",),
    "exl3": ("exllamav3",),
    "exl2": ("exllamav2",),
    # Unquantized Hugging Face safetensors: mlx-lm loads them directly (bf16).
    "safetensors": ("mlx",),
}
DEFAULT_SERVE_CONTEXT = 32768
MIN_SERVE_CONTEXT = 2048


@dataclass(frozen=True)
class ServePlan:
    """What `launcher serve` will do, and why."""

    engine: str
    reason: str
    gpu_layers: int  # -1 = all
    context: int
    fit: FitResult

    @property
    def kv_type(self) -> KvType:
        """The KV cache type the plan was fitted with (what `launcher serve --kv-cache-type` must get)."""
        return self.fit.kv_type


def plan_local(
    machine: Machine,
    fmt: str,
    arch: Architecture,
    weights: int,
    *,
    context: int | None = None,
    parallel: int = 1,
    engine: str | None = None,
    status: EngineStatus | None = None,
    kv_type: KvType | None = None,
) -> ServePlan:
    """Plan a serve of a local model in format `fmt` with architecture `arch` and `weights` bytes on disk.

    The engine follows the format (quant formats need the engine with kernels for them); the
    context is the asked one, or the largest of 32k/16k/8k/... (up to the model's own limit) whose
    KV cache fits; GPU layers come from the fit. `kv_type=None` lets the advisor choose: f16, or
    for llama.cpp a q8_0 KV cache where f16 would not fit (or only with a partial offload) at a
    context, before a smaller context is tried.
    """
    candidates = ENGINES_FOR_FORMAT.get(fmt, ())
    if engine is None:
        usable = [e for e in candidates if status is None or status.get(e) is None]
        engine = (usable or list(candidates) or ["llamacpp"])[0]
        why = f"{ENGINE_LABELS.get(engine, engine)} runs {fmt.upper()} files"
        if machine.apple is not None and fmt == "gguf":
            why += " (Metal on Apple Silicon; MLX needs MLX-format weights)"
        elif machine.nvidia_gpus and fmt == "gguf":
            why += " (CUDA with CPU offload when needed)"
        elif not machine.gpus and machine.apple is None:
            why += " on the CPU"
    else:
        why = f"{ENGINE_LABELS.get(engine, engine)} chosen with --engine"
    if status is not None and status.get(engine):
        why += f"; but it is not usable here: {status[engine]}"

    use_gpu = bool(machine.gpus) or machine.apple is not None
    allow_offload = engine == "llamacpp"
    if context is not None:
        contexts = [context]
    else:
        limit = min(arch.max_context, DEFAULT_SERVE_CONTEXT)
        contexts = [c for c in (limit, 16384, 8192, 4096, MIN_SERVE_CONTEXT) if c <= limit] or [limit]
    lever = kv_type is None and kv_lever_applies(engine)
    fit: FitResult | None = None
    f16_fit: FitResult | None = None  # set when the q8_0 KV cache replaced an f16 fit
    for ctx in contexts:
        fit = fit_model(
            machine,
            arch,
            weights,
            context=ctx,
            parallel=parallel,
            kv_type=kv_type or "f16",
            use_gpu=use_gpu,
            allow_offload=allow_offload,
            sliding=sliding_cache(engine),
        )
        if lever and VERDICT_RANK[fit.verdict] > VERDICT_RANK["cpu"]:  # partial offload or no fit at all
            smaller_kv = fit_model(
                machine,
                arch,
                weights,
                context=ctx,
                parallel=parallel,
                kv_type=KV_LEVER,
                use_gpu=use_gpu,
                allow_offload=allow_offload,
                sliding=sliding_cache(engine),
            )
            if VERDICT_RANK[smaller_kv.verdict] < VERDICT_RANK[fit.verdict]:
                f16_fit, fit = fit, smaller_kv
        if fit.fits:
            break
    assert fit is not None
    if fmt in ("exl2", "exl3") and not machine.nvidia_gpus:
        # ExLlama has CUDA kernels only: without an NVIDIA card the weights cannot run anywhere here.
        fit = replace(fit, verdict="wont_fit", advice=(f"{fmt.upper()} needs an NVIDIA GPU: use a GGUF of this model",))
        why += f"; {fmt.upper()} needs an NVIDIA GPU and none was found"
    gpu_layers = -1 if fit.verdict in ("full_gpu", "unified") else fit.gpu_layers
    if context is None and fit.context < contexts[0]:
        why += f"; context {fit.context} so the KV cache fits"
    if f16_fit is not None:
        without = "it would need a partial offload" if f16_fit.fits else "it would not fit"
        why += f"; with an f16 KV cache {without}, so {kv_lever_cost(f16_fit.kv_bytes, fit.kv_bytes, fit.context)}"
    return ServePlan(engine=engine, reason=why, gpu_layers=gpu_layers, context=fit.context, fit=fit)
