"""Serve plans for a model already on disk: which engine, how many GPU layers, what context.

`launcher serve` calls this when the user did not pin the engine, layers or context. It works
for any model, catalog or not, from the architecture numbers read out of the file.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Literal

from launcher.advisor.draft import local_draft
from launcher.advisor.fit import VERDICT_RANK, FitResult, KvType, fit_model
from launcher.advisor.options import (
    KV_LEVER,
    can_offload,
    engine_label,
    kv_lever_applies,
    kv_lever_cost,
    sliding_cache,
)
from launcher.core.config import AUTO_ENGINE, ServeConfig
from launcher.core.errors import ModelFormatError, in_context
from launcher.core.model_types import Architecture
from launcher.core.units import format_bytes
from launcher.engine_specs import EngineStatus, engines_for_format
from launcher.hardware.machine import Machine

if TYPE_CHECKING:
    from launcher.catalog.library import LibraryEntry
    from launcher.catalog.schema import Catalog

NO_DRAFT_MODES = ("off", "ngram")
"""`ServeConfig.speculative` modes in which no draft model is loaded, so none is filled in."""

SERVE_CONTEXTS = (32768, 16384, 8192, 4096, 2048)
"""The contexts a serve plan tries, largest first, when none is asked: 32k is what coding agents
need; 2k is the least worth serving. The catalog advisor tries the same ladder."""


def context_ladder(max_context: int, ladder: tuple[int, ...]) -> list[int]:
    """The contexts to try, largest first: the model's own limit when it is below the ladder's top,
    then the rungs below it."""
    limit = min(max_context, ladder[0])
    return [limit, *(c for c in ladder if c < limit)]


UNPLANNED_RESERVED_CONTEXT = 8192
"""The rung an engine that reserves its whole KV cache at load takes when no plan sized it."""


def unplanned_context(train_context: int, *, reserves_cache: bool) -> int:
    """The context a load takes when its config leaves it open because no plan sized it (a direct
    engine load; a model whose files lack the numbers to plan). An engine whose KV cache grows with
    its sequences (MLX) takes the ladder's top: only long prompts pay for it. One that reserves
    `context x parallel` cells up front (llama.cpp, ExLlama) takes UNPLANNED_RESERVED_CONTEXT, which
    fits beside a small model on most machines. Never more than the model was trained on."""
    return min(train_context, UNPLANNED_RESERVED_CONTEXT if reserves_cache else SERVE_CONTEXTS[0])


def resolve_kv_type(setting: KvType | Literal["auto"] | None) -> KvType:
    """The KV cache type a cache is sized and allocated with: the one `setting` names, else f16. The
    one place "auto" becomes a type: `plan_local` (where None means "auto") takes f16 unless the q8_0
    lever makes the model fit, and an "auto" that no plan resolved (a direct engine load, a model whose
    files lack the numbers to plan) loads f16."""
    return "f16" if setting is None or setting == "auto" else setting


@dataclass(frozen=True)
class ServePlan:
    """What `launcher serve` will do, and why."""

    engine: str
    reason: str
    gpu_layers: int  # -1 = all
    context: int
    fit: FitResult  # its `draft` is the draft model's memory line when `draft` is set
    draft: str | None = None  # path of a downloaded draft model that fits beside it (ServeConfig.draft)

    @property
    def kv_type(self) -> KvType:
        """The KV cache type the plan was fitted with (what `launcher serve --kv-cache-type` must get)."""
        return self.fit.kv_type

    def fill(self, config: ServeConfig) -> ServeConfig:
        """`config` with this plan's engine, context, GPU layers and KV cache type where it left them
        open: what the user set stays, and the server, the app and the engines all run this decision.
        The draft model is filled only where the config names none and its speculative mode uses one."""
        updates: dict[str, object] = {}
        if config.engine == "auto":
            updates["engine"] = self.engine
        if config.context is None:
            updates["context"] = self.context
        if config.gpu_layers is None:
            updates["gpu_layers"] = self.gpu_layers
        if config.kv_cache_type == "auto":
            updates["kv_cache_type"] = self.kv_type
        if self.draft is not None and config.draft is None and config.speculative not in NO_DRAFT_MODES:
            updates["draft"] = self.draft
        return config.model_copy(update=updates) if updates else config


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
    if engine is None:
        engines = engines_for_format(fmt, status=status, in_process=True)
        candidates = engines.usable or engines.all
        if not candidates:
            raise ModelFormatError(in_context(f"No engine runs {fmt} models", engines.why_none()))
        engine = candidates[0].name
        why = f"{engine_label(engine)} runs {fmt.upper()} files"
        if machine.apple is not None and fmt == "gguf":
            why += " (Metal on Apple Silicon; MLX needs MLX-format weights)"
        elif machine.nvidia_gpus and fmt == "gguf":
            why += " (CUDA with CPU offload when needed)"
        elif not machine.gpus and machine.apple is None:
            why += " on the CPU"
    else:
        why = f"{engine_label(engine)} chosen with --engine"
    if status is not None and status.get(engine):
        why += f"; but it is not usable here: {status[engine]}"

    use_gpu = bool(machine.gpus) or machine.apple is not None
    allow_offload = can_offload(engine)
    contexts = [context] if context is not None else context_ladder(arch.max_context, SERVE_CONTEXTS)
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
            kv_type=resolve_kv_type(kv_type),
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


def plan_for_config(
    machine: Machine,
    fmt: str,
    arch: Architecture,
    weights: int,
    config: ServeConfig,
    status: EngineStatus | None,
    *,
    catalog_id: str | None = None,
    library: Iterable[LibraryEntry] | None = None,
    catalog: Catalog | None = None,
) -> ServePlan:
    """The serve plan for `config`: what it pins stays pinned, the rest is the advisor's. The server
    and the app both plan through here, so the app's model list and `launcher serve` agree.

    With the served model's `catalog_id` and the local `library` (`catalog.library.scan_library()`),
    a config that names no draft model and whose speculative mode uses one gets the catalog's draft
    for it when a copy is in the library and fits beside the model (`ServePlan.draft`, its memory in
    `fit.draft`). Nothing is downloaded; without a library no draft is planned."""
    plan = plan_local(
        machine,
        fmt,
        arch,
        weights,
        context=config.context,
        parallel=config.parallel,
        engine=None if config.engine == AUTO_ENGINE else config.engine,
        status=status,
        kv_type=None if config.kv_cache_type == "auto" else config.kv_cache_type,
    )
    if library is None or config.draft is not None or config.speculative in NO_DRAFT_MODES:
        return plan
    pick = local_draft(catalog_id, plan.engine, fmt, plan.fit, library, catalog=catalog)
    if pick is None or pick.path is None:
        return plan
    return replace(
        plan,
        draft=str(pick.path),
        fit=replace(plan.fit, draft=pick.memory),
        reason=f"{plan.reason}; draft model {pick.label} ({format_bytes(pick.memory.used)} beside it)",
    )
