"""Apple Silicon: chip, GPU cores, unified memory, bandwidth and the GPU wired-memory limit.

The GPU may only wire part of unified memory. macOS exposes an override as sysctl
`iogpu.wired_limit_mb` (0 = the default, which is about 2/3 of RAM on machines up to 36 GB and
about 3/4 above: Metal's recommendedMaxWorkingSetSize). GPU cores come from system_profiler.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field

from launcher.core.units import GIB
from launcher.hardware.machine import AppleSilicon
from launcher.hardware.sources import CommandRunner
from launcher.hardware.tables import apple_chip_table, match_apple_chip

MIB = 1024**2
APPLE_KEYS = ("iogpu.wired_limit_mb", "debug.iogpu.wired_limit")
_SMALL_MAC_LIMIT = 36 * GIB


@dataclass
class AppleReport:
    """The SoC answer plus what could not be seen."""

    apple: AppleSilicon | None
    unseen: list[str] = field(default_factory=list)


def default_wired_limit(unified_memory: int) -> int:
    """macOS's default GPU working-set limit for this much RAM (the iogpu.wired_limit_mb=0 case)."""
    fraction = 2 / 3 if unified_memory <= _SMALL_MAC_LIMIT else 3 / 4
    return int(unified_memory * fraction)


def wired_limit(values: dict[str, str], unified_memory: int) -> int:
    """The effective GPU wired limit in bytes: the sysctl override when set, else macOS's default."""
    override_mb = _int(values.get("iogpu.wired_limit_mb"))
    if override_mb:
        return override_mb * MIB
    legacy_bytes = _int(values.get("debug.iogpu.wired_limit"))  # macOS 13 and older spelled it this way
    if legacy_bytes:
        return legacy_bytes
    return default_wired_limit(unified_memory)


def parse_gpu_cores(system_profiler_json: str | None, ioreg_text: str | None = None) -> int | None:
    """GPU core count from `system_profiler SPDisplaysDataType -json` (or `ioreg -rc AGXAccelerator`)."""
    if system_profiler_json:
        try:
            displays = json.loads(system_profiler_json).get("SPDisplaysDataType", [])
        except (ValueError, AttributeError):
            displays = []
        for display in displays:
            cores = _int(str(display.get("sppci_cores", "")))
            if cores:
                return cores
    if ioreg_text:
        found = re.search(r'"gpu-core-count"\s*=\s*(\d+)', ioreg_text)
        if found:
            return int(found.group(1))
    return None


def probe_apple(values: dict[str, str], commands: CommandRunner) -> AppleReport:
    """Describe the Apple Silicon SoC from already-read sysctl values plus system_profiler."""
    unseen: list[str] = []
    chip = values.get("machdep.cpu.brand_string", "").strip() or "Apple Silicon"
    unified = _int(values.get("hw.memsize")) or 0
    gpu_cores = parse_gpu_cores(commands.run(["system_profiler", "SPDisplaysDataType", "-json"]))
    if gpu_cores is None:
        gpu_cores = parse_gpu_cores(None, commands.run(["ioreg", "-rc", "AGXAccelerator", "-d1"]))
    if gpu_cores is None:
        unseen.append("Apple GPU: core count not readable (system_profiler and ioreg gave nothing)")
    spec = match_apple_chip(chip, gpu_cores)
    if spec is None:
        unseen.append(f"Apple GPU: {chip} is not in apple_chips.csv, so memory bandwidth is unknown")
    elif gpu_cores is None and _has_variants(chip):
        unseen.append(f"Apple GPU: assuming the smallest {chip} variant ({spec.gpu_cores_min} GPU cores)")
    if "iogpu.wired_limit_mb" not in values and "debug.iogpu.wired_limit" not in values:
        unseen.append("Apple GPU: wired-memory limit not readable; assuming the macOS default")
    apple = AppleSilicon(
        chip=chip,
        gpu_cores=gpu_cores,
        unified_memory=unified,
        memory_bandwidth=spec.bandwidth if spec else None,
        gpu_wired_limit=wired_limit(values, unified),
        fp16_tflops=spec.fp16_tflops(gpu_cores) if spec else None,
    )
    return AppleReport(apple=apple, unseen=unseen)


def _has_variants(chip: str) -> bool:
    """True when the chip ships with several GPU-core counts (the table row picked may be the wrong one)."""
    rows = [spec for spec in apple_chip_table() if spec.chip.lower() == chip.lower()]
    return len(rows) > 1 or any(spec.gpu_cores_min != spec.gpu_cores_max for spec in rows)


def _int(text: str | None) -> int | None:
    try:
        return int(text.strip()) if text is not None else None
    except ValueError:
        return None
