"""How big the paged KV cache is, and how the model is spread over the GPUs.

The dynamic generators share one paged cache between all jobs (pages of 256 tokens:
exllamav3/constants.py PAGE_SIZE, exllamav2/generator/dynamic.py PAGED_PAGE_SIZE), so the cache
holds `context * parallel` tokens rounded up to whole pages. The context and KV type come decided:
the server's plan (`launcher.server.pool.planning`) fills them with the largest context whose KV cache
fits next to the weights, and stops a load that would not fit in VRAM (ExLlama cannot offload
layers to the CPU) with the advisor's numbers, before any weights are read. The engine does not
plan again; what a direct load leaves open is the advisor's too (`unplanned_context`,
`resolve_kv_type`).
"""

from __future__ import annotations

import logging
from dataclasses import dataclass

from launcher.advisor.fit import KvType
from launcher.advisor.plan import resolve_kv_type, unplanned_context
from launcher.core.config import ServeConfig
from launcher.engines.exllama_common._hf_files import HfModelFiles
from launcher.hardware.machine import Machine

log = logging.getLogger("launcher.engines.exllama")

PAGE_SIZE = 256


@dataclass(frozen=True)
class CachePlan:
    """Cache size and GPU layout for one load."""

    context: int  # tokens per request
    parallel: int  # jobs the generator runs at once
    cache_tokens: int  # tokens in the shared paged cache (a multiple of PAGE_SIZE)
    kv_type: KvType  # the cache's element type
    tensor_parallel: bool
    gpu_count: int


def round_to_pages(tokens: int) -> int:
    """`tokens` rounded up to whole cache pages."""
    return max(PAGE_SIZE, -(-tokens // PAGE_SIZE) * PAGE_SIZE)


def plan_cache(
    machine: Machine,
    files: HfModelFiles,
    config: ServeConfig,
    *,
    tensor_parallel_capable: bool,
    parallel: int | None = None,
) -> CachePlan:
    """The cache for `config`'s context and KV type (the advisor's fallbacks where a direct load left
    them open) and the GPU split. `parallel` overrides config.parallel (ExLlamaV2 without
    flash-attn runs one job at a time)."""
    parallel = parallel or config.parallel
    gpus = len(machine.nvidia_gpus)
    context = config.context or unplanned_context(files.train_context, reserves_cache=True)
    if context > files.train_context:
        log.warning("context %d is beyond the %d tokens this model was trained on", context, files.train_context)
    return CachePlan(
        context=context,
        parallel=parallel,
        cache_tokens=round_to_pages(context * parallel),
        kv_type=resolve_kv_type(config.kv_cache_type),
        tensor_parallel=tensor_parallel_capable and gpus >= 2,
        gpu_count=gpus,
    )
