"""How a vLLM or SGLang deployment uses each GPU: the nodes, the parallel split, the memory and the context.

The engines' memory model: each GPU gives a fraction of its memory to the engine; the weights split
over tensor-parallel ranks inside a node and over pipeline stages across nodes; after a fixed
per-GPU overhead the rest is KV cache, and the context is the longest at which that cache holds
`sequences` requests of full length.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace

from launcher.advisor.fit import kv_cache_bytes
from launcher.core.errors import ConfigError
from launcher.core.model_types import Architecture
from launcher.core.units import GIB, MIB, format_bytes
from launcher.hardware.machine import GpuInfo, Machine
from launcher.hardware.tables import gpu_table, match_gpu, normalize_gpu_name

MEMORY_FRACTION = 0.90
"""Of each GPU's memory, what the engine may take: vLLM's own default moved between 0.90 and 0.92 across
releases; 0.90 leaves room for CUDA's and NCCL's allocations outside the engine's accounting."""
IN_USE_RESERVE = 256 * MIB  # on a probed desktop, memory the display may still take after the probe
ENGINE_OVERHEAD = int(2.5 * GIB)
"""Per GPU, outside weights and KV cache: the CUDA context, NCCL buffers, the activations of the start-up
profiling batch (8192 tokens) and CUDA graphs. An estimate for 8B-70B models, not a measurement."""
MIN_CONTEXT = 4096
MAX_NODES = 8


@dataclass(frozen=True)
class Node:
    """One machine of the deployment, as the engines see it; every node of a deployment is alike."""

    label: str
    gpus: tuple[GpuInfo, ...]  # the NVIDIA GPUs
    apple_chip: str | None = None
    other_gpus: tuple[str, ...] = ()  # GPUs the engines' CUDA builds cannot use

    @classmethod
    def of(cls, machine: Machine) -> Node:
        """A probed or recorded machine."""
        return cls(
            label=machine.name or "this machine",
            gpus=machine.nvidia_gpus,
            apple_chip=machine.apple.chip if machine.apple else None,
            other_gpus=tuple(g.name for g in machine.gpus if g.vendor != "nvidia"),
        )

    @property
    def gpu_summary(self) -> str:
        """'8 x NVIDIA H100 80GB HBM3 (79.6 GiB)'."""
        first = self.gpus[0]
        return f"{len(self.gpus)} x {first.name} ({format_bytes(first.memory_total)})"

    @property
    def smallest_gpu(self) -> int:
        """Bytes of the smallest GPU: every rank gets the same share."""
        return min(g.memory_total for g in self.gpus)


def described_node(gpu: str, count: int, memory: int | None = None) -> Node:
    """A node of `count` GPUs named like 'H100' or 'RTX 4090', looked up in the GPU table for its
    compute capability (and its memory, unless given)."""
    if count < 1:
        raise ConfigError("--gpus must be at least 1")
    exact = match_gpu(gpu, memory, vendor="nvidia")  # a driver's name: "NVIDIA H100 80GB HBM3"
    wanted = normalize_gpu_name(gpu).removeprefix("nvidia ")  # or a short one: "H100", "RTX 4090"
    rows = (
        [exact] if exact else [r for r in gpu_table() if r.vendor == "nvidia" and wanted in normalize_gpu_name(r.name)]
    )
    if memory is not None:
        near = [r for r in rows if r.memory_gb is not None and abs(r.memory_gb * GIB - memory) <= 0.15 * memory]
        rows = near or rows
    capabilities = {r.compute_capability for r in rows}
    if not rows or len(capabilities) != 1 or None in capabilities:
        known = ", ".join(sorted({r.name for r in gpu_table() if r.vendor == "nvidia"}))
        raise ConfigError(f"--gpu {gpu!r} does not name one NVIDIA GPU in the table; known: {known}")
    sizes = {r.memory_gb for r in rows}
    documented = next(iter(sizes)) if len(sizes) == 1 else None
    if memory is None and documented is None:
        raise ConfigError(f"--gpu {gpu!r} comes in several memory sizes: add --gpu-memory (80GiB, 24GiB, ...)")
    total = memory if memory is not None else int((documented or 0) * GIB)
    row = rows[0]
    card = GpuInfo(
        index=0,
        vendor="nvidia",
        name=f"NVIDIA {row.name if len(rows) == 1 else gpu.strip()}",  # "H100": PCIe and SXM alike here
        memory_total=total,
        memory_free=total,
        compute_capability=row.compute_capability,
        memory_bandwidth=row.bandwidth,
        fp16_tflops=row.fp16_tflops,
    )
    return Node(label=f"{count} x {card.name}", gpus=tuple(replace(card, index=i) for i in range(count)))


@dataclass(frozen=True)
class Sizing:
    """One GPU's share at the chosen context."""

    context: int
    fp8_kv: bool
    budget: int  # fraction x memory
    weights: int
    kv: int  # KV cache for `sequences` full-length requests
    room: int  # what the KV cache may take
    full_sequences: int  # full-length requests the room holds


def tensor_parallel_size(arch: Architecture, gpus: int) -> int:
    """The largest power of two up to `gpus` that splits the attention heads evenly, and the KV heads
    evenly or into whole copies (both engines refuse other splits)."""
    size = 1
    while size * 2 <= gpus:
        nxt = size * 2
        if arch.attention_heads % nxt or (arch.kv_heads % nxt and nxt % arch.kv_heads):
            break
        size = nxt
    return size


def context_ladder(max_context: int) -> list[int]:
    """The model's full context, then powers of two below it down to MIN_CONTEXT."""
    ladder = [max_context]
    step = 1 << ((max_context - 1).bit_length() - 1)
    while step >= MIN_CONTEXT:
        if step < max_context:
            ladder.append(step)
        step //= 2
    return ladder


def kv_per_gpu(arch: Architecture, context: int, sequences: int, tp: int, pp: int, fp8: bool) -> int:
    """One GPU's share of the KV cache. Past `kv_heads` ranks each rank keeps a copy of one KV head."""
    total = kv_cache_bytes(arch, context, sequences, "f16", "window") // (2 if fp8 else 1)
    copies = max(1, tp // arch.kv_heads)
    return math.ceil(total * copies / (tp * pp))


def size_on(
    arch: Architecture,
    weights: int,
    node: Node,
    tp: int,
    pp: int,
    fraction: float,
    sequences: int,
    *,
    fp8_kv: bool,
) -> Sizing | None:
    """The longest context at which `sequences` full-length requests fit next to the weights (a 16-bit
    KV cache unless `fp8_kv` allows FP8 and it buys a longer one), or None when not even MIN_CONTEXT fits."""
    budget = int(fraction * node.smallest_gpu)
    share = math.ceil(weights / (tp * pp))
    room = budget - share - ENGINE_OVERHEAD
    ladder = context_ladder(arch.max_context)

    def longest(fp8: bool) -> int | None:
        return next((c for c in ladder if kv_per_gpu(arch, c, sequences, tp, pp, fp8) <= room), None)

    f16 = longest(False)
    fp8 = longest(True) if fp8_kv and f16 != arch.max_context else None
    use_fp8 = fp8 is not None and (f16 is None or fp8 > f16)
    context = fp8 if use_fp8 else f16
    if context is None:
        return None
    return Sizing(
        context=context,
        fp8_kv=use_fp8,
        budget=budget,
        weights=share,
        kv=kv_per_gpu(arch, context, sequences, tp, pp, use_fp8),
        room=room,
        full_sequences=room // kv_per_gpu(arch, context, 1, tp, pp, use_fp8),
    )


def memory_fraction(node: Node) -> tuple[float, str | None]:
    """MEMORY_FRACTION, or less when a probed GPU already has memory in use (a desktop's display): the
    engines refuse to start when asked for more than is free. The note says why it is lower."""
    worst = min(node.gpus, key=lambda g: (g.memory_free - IN_USE_RESERVE) / g.memory_total)
    free_share = math.floor((worst.memory_free - IN_USE_RESERVE) / worst.memory_total * 100) / 100
    if free_share >= MEMORY_FRACTION:
        return MEMORY_FRACTION, None
    in_use = format_bytes(worst.memory_total - worst.memory_free)
    return free_share, f"{in_use} of GPU {worst.index} is already in use, so the engine may take {free_share:.2f}"
