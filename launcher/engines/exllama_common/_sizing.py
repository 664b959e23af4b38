"""How big the paged KV cache is, and how the model is spread over the GPUs, from the advisor's fit.

The dynamic generators share one paged cache between all jobs (pages of 256 tokens:
exllamav3/constants.py PAGE_SIZE, exllamav2/generator/dynamic.py PAGED_PAGE_SIZE), so the cache
holds `context * parallel` tokens rounded up to whole pages. The context is the user's, or the
largest one whose KV cache fits next to the weights (launcher.advisor.plan_local).
ExLlama cannot offload layers to the CPU, so a plan that does not fit in VRAM stops the load with
the advisor's numbers instead of failing later with a CUDA out-of-memory error.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass

from launcher.advisor import FitResult, plan_local
from launcher.core.config import ServeConfig
from launcher.core.errors import ModelDoesNotFitError
from launcher.engines.exllama_common._hf_files import HfModelFiles
from launcher.hardware.machine import Machine

log = logging.getLogger("launcher.engines.exllama")

PAGE_SIZE = 256
DEFAULT_CONTEXT = 8192  # when config.json lacks the numbers the fit needs


@dataclass(frozen=True)
class CachePlan:
    """Cache size and GPU layout for one load."""

    context: int  # tokens per request
    parallel: int  # jobs the generator runs at once
    cache_tokens: int  # tokens in the shared paged cache (a multiple of PAGE_SIZE)
    tensor_parallel: bool
    gpu_count: int
    fit: FitResult | None


def round_to_pages(tokens: int) -> int:
    """`tokens` rounded up to whole cache pages."""
    return max(PAGE_SIZE, -(-tokens // PAGE_SIZE) * PAGE_SIZE)


def plan_cache(
    machine: Machine,
    files: HfModelFiles,
    config: ServeConfig,
    engine: str,
    *,
    tensor_parallel_capable: bool,
    parallel: int | None = None,
) -> CachePlan:
    """Context, cache tokens and split for this machine; raises ModelDoesNotFitError with the breakdown.

    `parallel` overrides config.parallel (ExLlamaV2 without flash-attn runs one job at a time).
    """
    parallel = parallel or config.parallel
    gpus = len(machine.nvidia_gpus)
    fit: FitResult | None = None
    if files.architecture is None:
        context = config.context or min(files.train_context, DEFAULT_CONTEXT)
    else:
        plan = plan_local(
            machine,
            files.format,
            files.architecture,
            files.weights_bytes,
            context=config.context,
            parallel=parallel,
            engine=engine,
            kv_type="f16" if config.kv_cache_type == "auto" else config.kv_cache_type,
        )
        fit = plan.fit
        if gpus and not fit.fits:
            raise ModelDoesNotFitError(
                f"{files.directory.name} ({files.quant_label or files.format.upper()}) with a {fit.context}-token "
                f"context x {parallel} parallel requests needs about {fit.needed_bytes / 1024**3:.1f} GiB of VRAM, "
                f"and {engine} cannot offload to system RAM:\n{fit.breakdown()}\n"
                "Lower --context or --parallel, use --kv-cache-type q4_0, choose a smaller bpw, "
                "or use a GGUF with llama.cpp (partial offload)."
            )
        context = plan.context
    if context > files.train_context:
        log.warning("context %d is beyond the %d tokens this model was trained on", context, files.train_context)
    return CachePlan(
        context=context,
        parallel=parallel,
        cache_tokens=round_to_pages(context * parallel),
        tensor_parallel=tensor_parallel_capable and gpus >= 2,
        gpu_count=gpus,
        fit=fit,
    )
