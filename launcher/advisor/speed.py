"""Decode and prefill speed estimates from bandwidth and compute, stated as a range.

    decode tok/s  ~= efficiency * bandwidth / bytes_read_per_token
    bytes_read    ~= active_params * bits_per_weight / 8 + KV read at the working context
    prefill tok/s ~= efficiency * peak_flops / (2 * active_params)

With partial offload a token's time is the GPU part at VRAM speed plus the CPU part at RAM
speed. CPU decode is also capped by compute (dequantising every weight costs arithmetic),
which matters on small machines where RAM bandwidth is not the limit.

Runs measured on this machine (`launcher bench --calibrate`, see `launcher.advisor.calibration`)
re-centre and narrow these ranges: `predict_speed` is what the advisor's callers use.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from launcher.advisor.calibration import Calibration
from launcher.advisor.calibration_store import CalibrationChoice, resolve_calibration
from launcher.advisor.fit import FitResult, kv_cache_bytes
from launcher.core.model_types import Architecture
from launcher.hardware.machine import CpuInfo, Machine

DECODE_EFFICIENCY = (0.5, 0.8)
PREFILL_EFFICIENCY = (0.3, 0.6)
# Quantised matmul on CPU reaches a small share of peak FMA throughput. Calibrated on this repo's
# 2-core AVX-512 VM: gemma-3-270m Q4_K_M decodes at ~44 tok/s single stream (docs/benchmarks.md).
CPU_DECODE_EFFICIENCY = (0.05, 0.15)
CPU_PREFILL_EFFICIENCY = (0.25, 0.5)
WORKING_CONTEXT = 4096  # tokens of KV read per step in the estimate (a typical agent turn)
ASSUMED_RAM_BANDWIDTH = 40e9  # dual-channel DDR4/DDR5 laptop, when the probe could not tell
CPU_CLOCK_HZ = 3.0e9


@dataclass(frozen=True)
class SpeedEstimate:
    """Predicted single-stream speeds, low..high, and what limits them."""

    decode_low: float
    decode_high: float
    prefill_low: float
    prefill_high: float
    bound: str  # plain words: "GPU memory bandwidth (1008 GB/s)"
    calibrated_runs: int = 0  # runs on this machine that set the decode range (0: the model alone)
    calibration_note: str = ""  # "calibrated from 3 runs on this machine"
    # Measured on this machine (calibration runs): decode with speculative decoding on text the answer copies
    # from the prompt, over decode without it (None: not measured). Prose gains nothing.
    copy_speedup: float | None = None

    @property
    def decode_mid(self) -> float:
        """The middle of the decode range: the one number a calibration run compares with."""
        return (self.decode_low + self.decode_high) / 2

    @property
    def prefill_mid(self) -> float:
        """The middle of the prefill range."""
        return (self.prefill_low + self.prefill_high) / 2

    def decode_range(self) -> str:
        """'35-56' (one decimal below 10 tok/s, where it matters)."""
        return f"{format_tps(self.decode_low)}-{format_tps(self.decode_high)}"

    def prefill_range(self) -> str:
        """'900-1800'."""
        return f"{format_tps(self.prefill_low)}-{format_tps(self.prefill_high)}"

    def summary(self) -> str:
        """'decode 35-56 tok/s, prefill 900-1800 tok/s (GPU memory bandwidth ...; calibrated from 3 runs ...)'."""
        why = f"{self.bound}; {self.calibration_note}" if self.calibration_note else self.bound
        copying = f"; {self.copy_speedup:.1f}x on copied text" if self.copy_speedup else ""
        return f"decode {self.decode_range()} tok/s{copying}, prefill {self.prefill_range()} tok/s ({why})"


def format_tps(value: float) -> str:
    """Tokens per second for people: '0.4', '7.5', '42', '1800'."""
    return f"{value:.1f}" if value < 10 else f"{value:.0f}"


def cpu_peak_flops(cpu: CpuInfo) -> float:
    """Peak fp32 FLOP/s from cores and vector width (an FMA is 2 FLOPs)."""
    if cpu.has("avx512f"):
        per_cycle = 64
    elif cpu.has("avx2") and cpu.has("fma"):
        per_cycle = 32
    elif cpu.has("avx") or cpu.has("neon") or cpu.arch in ("arm64", "aarch64"):
        per_cycle = 16
    else:
        per_cycle = 8
    return cpu.physical_cores * CPU_CLOCK_HZ * per_cycle


def estimate_speed(
    machine: Machine,
    arch: Architecture,
    bits_per_weight: float,
    fit: FitResult,
    *,
    tensor_parallel: bool = False,
    calibration: Calibration | None = None,
) -> SpeedEstimate:
    """Single-stream decode and prefill ranges for a fitted load, narrowed by `calibration` when given."""
    active_weights = arch.params_active_b * 1e9 * bits_per_weight / 8
    kv_read = kv_cache_bytes(arch, min(WORKING_CONTEXT, fit.context), 1, fit.kv_type)
    per_token = active_weights + kv_read
    gpu_fraction = fit.gpu_layers / fit.total_layers if fit.total_layers else 0.0
    flops_per_token = 2 * arch.params_active_b * 1e9

    cpu_bw = machine.cpu.memory_bandwidth or ASSUMED_RAM_BANDWIDTH
    cpu_flops = cpu_peak_flops(machine.cpu)
    if machine.apple is not None and fit.verdict in ("unified", "partial"):
        gpu_bw = machine.apple.memory_bandwidth or cpu_bw
        gpu_flops = (machine.apple.fp16_tflops or 5.0) * 1e12
        gpu_name = f"{machine.apple.chip} unified memory bandwidth ({gpu_bw / 1e9:.0f} GB/s)"
    elif machine.gpus and fit.gpu_layers > 0:
        cards = machine.nvidia_gpus or machine.gpus
        bandwidths = [g.memory_bandwidth or 300e9 for g in cards]
        # Layer split: cards take turns, so one token sees one card's bandwidth; tensor parallel reads in parallel.
        gpu_bw = sum(bandwidths) * 0.7 if tensor_parallel and len(cards) > 1 else min(bandwidths)
        gpu_flops = sum((g.fp16_tflops or 20.0) * 1e12 for g in cards)
        gpu_name = f"GPU memory bandwidth ({gpu_bw / 1e9:.0f} GB/s)"
    else:
        gpu_bw, gpu_flops, gpu_name = 0.0, 0.0, ""

    def decode(eff: float, cpu_eff: float) -> float:  # seconds per token, summed over where layers live
        seconds = 0.0
        if gpu_fraction > 0:
            seconds += per_token * gpu_fraction / (gpu_bw * eff)
        if gpu_fraction < 1:
            cpu_part = 1 - gpu_fraction
            memory_time = per_token * cpu_part / (cpu_bw * eff)
            compute_time = flops_per_token * cpu_part / (cpu_flops * cpu_eff)
            seconds += max(memory_time, compute_time)
        return 1 / seconds

    def prefill(eff: float, cpu_eff: float) -> float:
        # Prefill runs where the layers are; llama.cpp also ships CPU layers' batches to the GPU when
        # it has one, so partial offload prefill is close to GPU speed. We stay conservative.
        if gpu_fraction >= 1 or (gpu_fraction > 0 and gpu_flops):
            return eff * gpu_flops / flops_per_token * (1 if gpu_fraction >= 1 else 0.5)
        return cpu_eff * cpu_flops / flops_per_token

    if gpu_fraction >= 1:
        bound = gpu_name
    elif gpu_fraction > 0:
        bound = f"CPU RAM for the {fit.total_layers - fit.gpu_layers} offloaded layers"
    else:
        compute_bound = flops_per_token / (cpu_flops * CPU_DECODE_EFFICIENCY[1]) > per_token / (
            cpu_bw * DECODE_EFFICIENCY[1]
        )
        bound = (
            f"CPU compute ({machine.cpu.physical_cores} cores)"
            if compute_bound
            else f"RAM bandwidth (~{cpu_bw / 1e9:.0f} GB/s{'' if machine.cpu.memory_bandwidth else ', assumed'})"
        )
    estimate = SpeedEstimate(
        decode_low=decode(DECODE_EFFICIENCY[0], CPU_DECODE_EFFICIENCY[0]),
        decode_high=decode(DECODE_EFFICIENCY[1], CPU_DECODE_EFFICIENCY[1]),
        prefill_low=prefill(PREFILL_EFFICIENCY[0], CPU_PREFILL_EFFICIENCY[0]),
        prefill_high=prefill(PREFILL_EFFICIENCY[1], CPU_PREFILL_EFFICIENCY[1]),
        bound=bound,
    )
    return calibrated(estimate, calibration) if calibration is not None else estimate


def calibrated(estimate: SpeedEstimate, calibration: Calibration) -> SpeedEstimate:
    """The model's estimate re-centred on what this machine measured: the middle of each range times
    the median measured / predicted ratio, give or take the spread the runs justify."""
    decode_fix = calibration.correction("decode")
    prefill_fix = calibration.correction("prefill")
    decode = decode_fix.range_around(estimate.decode_mid) if decode_fix else (estimate.decode_low, estimate.decode_high)
    prefill = (
        prefill_fix.range_around(estimate.prefill_mid) if prefill_fix else (estimate.prefill_low, estimate.prefill_high)
    )
    fix = decode_fix or prefill_fix
    if fix is None:  # the runs measured memory only
        return estimate
    return replace(
        estimate,
        copy_speedup=calibration.speculative_speedup(),
        decode_low=decode[0],
        decode_high=decode[1],
        prefill_low=prefill[0],
        prefill_high=prefill[1],
        calibrated_runs=fix.runs,
        calibration_note=calibration.note(fix.runs),
    )


def predict_speed(
    machine: Machine,
    arch: Architecture,
    bits_per_weight: float,
    fit: FitResult,
    *,
    engine: str,
    tensor_parallel: bool = False,
    calibration: CalibrationChoice = "stored",
) -> SpeedEstimate:
    """`estimate_speed` calibrated with this machine's runs for `engine` and the model's size class.

    `calibration="stored"` reads the runs `launcher bench --calibrate` stored (cached); None gives
    the model's raw estimate. A machine that was never calibrated gets the raw estimate too.
    """
    runs = resolve_calibration(machine, calibration)
    applicable = runs.for_model(engine, arch.params_active_b) if runs is not None else None
    return estimate_speed(machine, arch, bits_per_weight, fit, tensor_parallel=tensor_parallel, calibration=applicable)
