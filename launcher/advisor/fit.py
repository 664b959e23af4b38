"""Memory fit: will this model, at this context and concurrency, load on this machine, and where?

The memory math:
    weights  = total_params * bits_per_weight / 8          (all experts for MoE)
    kv_cache = 2 * layers * kv_heads * head_dim * context * bytes_per_elem * parallel
               (sliding-window layers keep less: how much depends on the engine, see `SlidingCache`)
    overhead = runtime + compute buffers + a safety margin
A discrete GPU must hold its share within its *free* VRAM; Apple GPUs may only wire part of
unified memory; what does not fit on GPUs goes to system RAM layer by layer (llama.cpp offload).
llama.cpp's sliding-window checkpoints live in host RAM, next to (not on) the GPU.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace
from typing import Literal

from launcher.core.config import DEFAULT_SWA_CHECKPOINT_MB, DEFAULT_SWA_CHECKPOINTS
from launcher.core.model_types import Architecture
from launcher.core.units import GIB, MIB, format_bytes
from launcher.engine_specs import SlidingCache
from launcher.hardware.machine import Machine

Verdict = Literal["full_gpu", "unified", "partial", "cpu", "wont_fit"]
KvType = Literal["f16", "q8_0", "q4_0"]

VERDICT_LABELS: dict[str, str] = {
    "full_gpu": "full GPU",
    "unified": "fits in unified memory",
    "partial": "partial offload",
    "cpu": "CPU only",
    "wont_fit": "will not fit",
}

KV_BYTES_PER_ELEMENT: dict[str, float] = {"f16": 2.0, "q8_0": 34 / 32, "q4_0": 18 / 32}

CUDA_RUNTIME_BYTES = 400 * MIB  # CUDA context + cuBLAS workspaces per card
METAL_RUNTIME_BYTES = 256 * MIB
CPU_RESERVE_BYTES = 1 * GIB  # keep this much RAM for the OS, the app and the desktop
SAFETY_MARGIN = 0.05  # of weights + KV: allocator fragmentation, graph growth
UBATCH_TOKENS = 512  # llama.cpp's n_ubatch in our engine
KV_CELL_PAD = 256  # llama.cpp rounds the sliding-window cache up to a multiple of this many cells

VERDICT_RANK: dict[str, int] = {"full_gpu": 0, "unified": 0, "cpu": 1, "partial": 2, "wont_fit": 9}
"""Best first: everything on the GPU, then CPU only, then a partial offload, then nothing."""


@dataclass(frozen=True)
class DeviceFit:
    """One memory pool's share of the load."""

    device: str
    weights: int
    kv_cache: int
    overhead: int
    free: int
    total: int
    checkpoints: int = 0  # llama.cpp sliding-window checkpoints (host RAM only)

    @property
    def used(self) -> int:
        """Bytes this device must hold."""
        return self.weights + self.kv_cache + self.overhead + self.checkpoints

    @property
    def fits(self) -> bool:
        """True when the share fits in the free memory."""
        return self.used <= self.free

    def describe(self) -> str:
        """'GPU 0: ...: weights 15.4 GiB | KV 3.1 GiB | overhead 1.6 GiB | free 23.0 GiB'."""
        checkpoints = f" | KV checkpoints {format_bytes(self.checkpoints)}" if self.checkpoints else ""
        return (
            f"{self.device}: weights {format_bytes(self.weights)} | KV {format_bytes(self.kv_cache)} | "
            f"overhead {format_bytes(self.overhead)}{checkpoints} | free {format_bytes(self.free)}"
            + ("" if self.fits else "  (over)")
        )


@dataclass(frozen=True)
class DraftMemory:
    """What a draft model (speculative decoding) costs beside the model it drafts for: its weights, its
    KV cache for the same context and parallel sequences, its compute buffer and margin (and, for
    sliding-window drafts under llama.cpp, its checkpoints), against the room the model leaves."""

    name: str  # "Qwen3 0.6B Q8_0"
    device: str  # where it goes, beside the model: "GPU 0", "GPU 0 + GPU 1", "CPU RAM", the unified pool
    weights: int
    kv_cache: int
    overhead: int
    room: int  # free memory the model leaves there
    checkpoints: int = 0

    @property
    def used(self) -> int:
        """Bytes the draft adds."""
        return self.weights + self.kv_cache + self.overhead + self.checkpoints

    @property
    def fits(self) -> bool:
        """True when the draft fits in what the model leaves free."""
        return self.used <= self.room

    def describe(self) -> str:
        """'draft Qwen3 0.6B Q8_0 on GPU 0: weights 604 MiB | KV 3.5 GiB | overhead 400 MiB = 4.5 GiB of
        9.1 GiB left'."""
        checkpoints = f" | KV checkpoints {format_bytes(self.checkpoints)}" if self.checkpoints else ""
        return (
            f"draft {self.name} on {self.device}: weights {format_bytes(self.weights)} | "
            f"KV {format_bytes(self.kv_cache)} | overhead {format_bytes(self.overhead)}{checkpoints} = "
            f"{format_bytes(self.used)} of {format_bytes(self.room)} left" + ("" if self.fits else "  (over)")
        )


@dataclass(frozen=True)
class FitResult:
    """The verdict, the breakdown per device, and what to change when it does not fit."""

    verdict: Verdict
    devices: tuple[DeviceFit, ...]
    gpu_layers: int  # layers on the GPU(s); 0 for CPU only; all layers for full_gpu/unified
    total_layers: int
    weights_bytes: int
    kv_bytes: int
    overhead_bytes: int
    context: int
    parallel: int
    kv_type: KvType
    advice: tuple[str, ...] = ()
    checkpoint_bytes: int = 0  # llama.cpp sliding-window checkpoints at most, in host RAM
    draft: DraftMemory | None = None  # a draft model proposed or planned beside it (not in needed_bytes)

    @property
    def needed_bytes(self) -> int:
        """Total bytes the load needs, all devices together (the model alone: see `with_draft_bytes`)."""
        return self.weights_bytes + self.kv_bytes + self.overhead_bytes + self.checkpoint_bytes

    @property
    def with_draft_bytes(self) -> int:
        """Total bytes with the draft model, when there is one."""
        return self.needed_bytes + (self.draft.used if self.draft else 0)

    @property
    def fits(self) -> bool:
        """True unless the verdict is wont_fit."""
        return self.verdict != "wont_fit"

    @property
    def label(self) -> str:
        """The verdict in words ("partial offload (30/48 layers)")."""
        base = VERDICT_LABELS[self.verdict]
        if self.verdict == "partial":
            return f"{base} ({self.gpu_layers}/{self.total_layers} layers on GPU)"
        return base

    def breakdown(self) -> str:
        """One line per device: weights | KV | overhead | (KV checkpoints |) free; then the draft model's line."""
        lines = [dev.describe() for dev in self.devices]
        if self.draft is not None:
            lines.append(self.draft.describe())
        return "\n".join(lines)


def weights_bytes(arch: Architecture, bits_per_weight: float) -> int:
    """Bytes of weights at this quant (all experts for MoE)."""
    return int(arch.params_total_b * 1e9 * bits_per_weight / 8)


def _kv_cell_bytes(arch: Architecture, kv_type: KvType) -> float:
    """K and V of one token in one layer."""
    return 2 * arch.kv_heads * arch.head_dim * KV_BYTES_PER_ELEMENT[kv_type]


def sliding_layer_count(arch: Architecture) -> int:
    """Layers that attend over a sliding window (0 when the model has none)."""
    if arch.sliding_window and arch.full_attention_layers is not None:
        return arch.layers - arch.full_attention_layers
    return 0


def _pad(cells: int, multiple: int) -> int:
    return -(-cells // multiple) * multiple


def kv_cache_bytes(
    arch: Architecture,
    context: int,
    parallel: int = 1,
    kv_type: KvType = "f16",
    sliding: SlidingCache = "window",
) -> int:
    """KV cache bytes for `parallel` sequences of `context` tokens, with sliding layers sized as `sliding` says."""
    sliding_layers = sliding_layer_count(arch)
    full_layers = arch.layers - sliding_layers
    if not sliding_layers or sliding == "full":
        cells = arch.layers * context * parallel
    elif sliding == "llamacpp":
        # llama.cpp (llama-kv-cache-iswa.cpp), one unified cache for all sequences:
        # GGML_PAD(min(size_base, n_swa * n_seq_max + n_ubatch), 256) cells in each sliding layer.
        size_base = context * parallel
        cells = full_layers * size_base + sliding_layers * _llamacpp_swa_cells(arch, context, parallel)
    else:
        assert arch.sliding_window is not None
        cells = (full_layers * context + sliding_layers * min(arch.sliding_window, context)) * parallel
    return int(_kv_cell_bytes(arch, kv_type) * cells)


def swa_checkpoint_bytes(
    arch: Architecture,
    context: int,
    parallel: int = 1,
    kv_type: KvType = "f16",
    *,
    per_slot: int = DEFAULT_SWA_CHECKPOINTS,
    limit_mb: int = DEFAULT_SWA_CHECKPOINT_MB,
) -> int:
    """Host RAM llama.cpp's sliding-window checkpoints may hold, at most (0 without sliding layers).

    One checkpoint is one sequence's window in every sliding layer; each slot keeps up to
    `per_slot` of them, and all together at most `limit_mb` MiB.
    """
    sliding_layers = sliding_layer_count(arch)
    if not sliding_layers:
        return 0
    assert arch.sliding_window is not None
    one = int(sliding_layers * min(arch.sliding_window, context) * _kv_cell_bytes(arch, kv_type))
    return min(per_slot * parallel * one, limit_mb * MIB)


def _llamacpp_swa_cells(arch: Architecture, context: int, parallel: int) -> int:
    """Cells of each sliding layer in llama.cpp's unified cache (llama-kv-cache-iswa.cpp):
    GGML_PAD(min(size_base, n_swa * n_seq_max + n_ubatch), 256)."""
    assert arch.sliding_window is not None
    return min(context * parallel, _pad(arch.sliding_window * parallel + UBATCH_TOKENS, KV_CELL_PAD))


DEFAULT_VOCAB = 150_000  # when the architecture does not say: Qwen 152k, Llama 128k, Gemma 262k


def compute_buffer_bytes(arch: Architecture, context: int, parallel: int = 1) -> int:
    """The activations of one micro-batch, as llama.cpp sizes its compute buffer: the larger of the
    logits (512 tokens x vocabulary, f32) and the attention masks (512 x every KV cell, f16; sliding
    layers have their own), plus the hidden states. Checked against llama.cpp's "compute buffer
    size" for gemma-3-270m (514.5 MiB, logits-bound) and the tiny test models (1 KiB per cell,
    mask-bound) at 4k/32k x 1/4."""
    cells = context * parallel
    ubatch = min(UBATCH_TOKENS, cells)
    mask_cells = cells + (_llamacpp_swa_cells(arch, context, parallel) if sliding_layer_count(arch) else 0)
    logits = ubatch * (arch.vocab_size or DEFAULT_VOCAB) * 4
    return int(max(logits, ubatch * mask_cells * 2) + ubatch * arch.hidden_size * 4 * 8)


def fit_model(
    machine: Machine,
    arch: Architecture,
    weights: int,
    *,
    context: int,
    parallel: int = 1,
    kv_type: KvType = "f16",
    use_gpu: bool = True,
    allow_offload: bool = True,
    sliding: SlidingCache = "window",
) -> FitResult:
    """Decide where the model goes: all on GPU(s), unified memory, partly offloaded, CPU, or nowhere.

    `allow_offload=False` is for engines that cannot split a model between GPU and CPU
    (ExLlama, MLX): then it is full GPU or will not fit. `sliding` is how the engine sizes
    sliding-window layers; "llamacpp" also counts its checkpoints in host RAM.
    """
    kv = kv_cache_bytes(arch, context, parallel, kv_type, sliding)
    checkpoints = swa_checkpoint_bytes(arch, context, parallel, kv_type) if sliding == "llamacpp" else 0
    compute = compute_buffer_bytes(arch, context, parallel)
    margin = int(SAFETY_MARGIN * (weights + kv))
    ram_free = max(0, machine.memory.available - CPU_RESERVE_BYTES)
    base = FitResult(
        verdict="wont_fit",
        devices=(),
        gpu_layers=0,
        total_layers=arch.layers,
        weights_bytes=weights,
        kv_bytes=kv,
        overhead_bytes=compute + margin,
        context=context,
        parallel=parallel,
        kv_type=kv_type,
        checkpoint_bytes=checkpoints,
    )

    if use_gpu and machine.apple is not None:
        return _fit_apple(machine, base, compute + margin + METAL_RUNTIME_BYTES, ram_free, allow_offload)
    gpus = machine.nvidia_gpus or tuple(g for g in machine.gpus if g.vendor in ("amd", "intel"))
    if use_gpu and gpus:
        return _fit_discrete(machine, base, compute, margin, ram_free, allow_offload)
    cpu = DeviceFit("CPU RAM", weights, kv, compute + margin, ram_free, machine.memory.total, checkpoints)
    verdict: Verdict = "cpu" if cpu.fits else "wont_fit"
    return replace(base, verdict=verdict, devices=(cpu,), overhead_bytes=cpu.overhead)


def _fit_apple(machine: Machine, base: FitResult, overhead: int, ram_free: int, allow_offload: bool) -> FitResult:
    assert machine.apple is not None
    # Everything lives in one pool; the GPU may wire at most the limit, and only what is free.
    gpu_free = min(machine.apple.gpu_wired_limit, machine.memory.available)
    checkpoints = base.checkpoint_bytes
    pool = DeviceFit(
        f"{machine.apple.chip} unified memory (GPU limit {format_bytes(machine.apple.gpu_wired_limit)})",
        base.weights_bytes,
        base.kv_bytes,
        overhead,
        gpu_free,
        machine.apple.unified_memory,
    )
    if pool.fits:
        devices: tuple[DeviceFit, ...] = (pool,)
        if checkpoints:
            # Checkpoints are plain host memory: outside the GPU's wired limit, in what the GPU share leaves.
            side = DeviceFit(
                "CPU side of unified memory",
                0,
                0,
                0,
                max(0, machine.memory.available - pool.used),
                machine.apple.unified_memory,
                checkpoints,
            )
            devices = (pool, side)
        if all(d.fits for d in devices):
            return replace(
                base, verdict="unified", devices=devices, gpu_layers=base.total_layers, overhead_bytes=overhead
            )
        return replace(base, verdict="wont_fit", devices=devices, overhead_bytes=overhead)
    if allow_offload:
        per_layer = (base.weights_bytes + base.kv_bytes) / base.total_layers
        on_gpu = max(0, min(base.total_layers, math.floor((gpu_free - overhead) / per_layer)))
        rest = base.total_layers - on_gpu
        cpu_share = int(per_layer * rest)
        if on_gpu > 0 and pool.used + checkpoints <= ram_free + overhead:
            devices = (
                replace(
                    pool,
                    weights=int(base.weights_bytes * on_gpu / base.total_layers),
                    kv_cache=int(base.kv_bytes * on_gpu / base.total_layers),
                ),
                DeviceFit(
                    "CPU side of unified memory",
                    cpu_share,
                    0,
                    0,
                    max(0, ram_free - gpu_free),
                    machine.apple.unified_memory,
                    checkpoints,
                ),
            )
            return replace(base, verdict="partial", devices=devices, gpu_layers=on_gpu, overhead_bytes=overhead)
    return replace(base, verdict="wont_fit", devices=(pool,), overhead_bytes=overhead)


def _fit_discrete(
    machine: Machine, base: FitResult, compute: int, margin: int, ram_free: int, allow_offload: bool
) -> FitResult:
    gpus = machine.nvidia_gpus or tuple(g for g in machine.gpus if g.vendor in ("amd", "intel"))
    n = len(gpus)
    per_card_overhead = CUDA_RUNTIME_BYTES + compute // n + margin // n
    usable = [max(0, g.memory_free - per_card_overhead) for g in gpus]
    total_usable = sum(usable)
    layers = base.total_layers
    per_layer = (base.weights_bytes + base.kv_bytes) / layers
    overhead_total = per_card_overhead * n
    checkpoints = base.checkpoint_bytes

    def split(layer_count: int) -> tuple[DeviceFit, ...]:
        # Layers go to cards in proportion to their free memory (llama.cpp's and ExLlama's auto split).
        shares = [u / total_usable if total_usable else 0 for u in usable]
        return tuple(
            DeviceFit(
                f"GPU {g.index}: {g.name}",
                int(base.weights_bytes * layer_count / layers * share),
                int(base.kv_bytes * layer_count / layers * share),
                per_card_overhead,
                g.memory_free,
                g.memory_total,
            )
            for g, share in zip(gpus, shares, strict=True)
        )

    if base.weights_bytes + base.kv_bytes <= total_usable:
        devices = split(layers)
        if checkpoints:  # everything is on the GPU but the checkpoints, which llama.cpp keeps in RAM
            host = DeviceFit("CPU RAM", 0, 0, 0, ram_free, machine.memory.total, checkpoints)
            devices = (*devices, host)
            if not host.fits:
                return replace(base, verdict="wont_fit", devices=devices, overhead_bytes=overhead_total)
        return replace(base, verdict="full_gpu", devices=devices, gpu_layers=layers, overhead_bytes=overhead_total)
    on_gpu = max(0, min(layers, math.floor(total_usable / per_layer))) if allow_offload else 0
    cpu_weights = int(base.weights_bytes * (layers - on_gpu) / layers)
    cpu_kv = int(base.kv_bytes * (layers - on_gpu) / layers)
    cpu = DeviceFit("CPU RAM", cpu_weights, cpu_kv, compute, ram_free, machine.memory.total, checkpoints)
    if not allow_offload:
        return replace(base, verdict="wont_fit", devices=split(layers), overhead_bytes=overhead_total)
    if on_gpu == 0:
        verdict: Verdict = "cpu" if cpu.fits else "wont_fit"
        return replace(base, verdict=verdict, devices=(cpu,), overhead_bytes=compute + margin)
    verdict = "partial" if cpu.fits else "wont_fit"
    return replace(
        base,
        verdict=verdict,
        devices=(*split(on_gpu), cpu),
        gpu_layers=on_gpu,
        overhead_bytes=overhead_total + compute,
    )


def fit_draft(
    fit: FitResult, arch: Architecture, weights: int, *, name: str, sliding: SlidingCache = "llamacpp"
) -> DraftMemory | None:
    """A draft model sized beside the model `fit` placed: its weights, its KV cache at the same context,
    parallel sequences and KV type, its compute buffer and margin, against the memory the model leaves
    free where it runs (its GPUs, the unified pool, or CPU RAM). None when the model runs with a partial
    offload (a draft would take GPU layers from it) or does not fit at all.

    Conservative on purpose: a sliding-window draft's checkpoints are counted in the same room."""
    if fit.verdict not in ("full_gpu", "unified", "cpu"):
        return None
    kv = kv_cache_bytes(arch, fit.context, fit.parallel, fit.kv_type, sliding)
    checkpoints = swa_checkpoint_bytes(arch, fit.context, fit.parallel, fit.kv_type) if sliding == "llamacpp" else 0
    overhead = compute_buffer_bytes(arch, fit.context, fit.parallel) + int(SAFETY_MARGIN * (weights + kv))
    holding = [d for d in fit.devices if d.weights or d.kv_cache] or list(fit.devices[:1])
    room = sum(max(0, d.free - d.used) for d in holding)
    device = " + ".join(d.device.split(":")[0] if d.device.startswith("GPU") else d.device for d in holding)
    return DraftMemory(name, device, weights, kv, overhead, room, checkpoints)
