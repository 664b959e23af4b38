"""The hardware data tables in launcher/resources/hardware/: GPU and Apple-chip bandwidth and throughput.

Drivers report names, not bandwidths; the advisor's speed estimate needs bandwidth
(decode is memory-bound), so the probe looks the card up here. Each row names its source.
"""

from __future__ import annotations

import csv
import functools
import re
from dataclasses import dataclass
from pathlib import Path

from launcher.core.paths import resources_dir
from launcher.core.units import GIB

# A card matches a row's documented memory within this fraction (drivers report a bit less than the box).
_MEMORY_TOLERANCE = 0.12


@dataclass(frozen=True)
class GpuSpec:
    """One row of gpus.csv."""

    vendor: str
    name: str
    pattern: re.Pattern[str]
    memory_gb: float | None
    bandwidth_gbs: float
    fp16_tflops: float | None
    compute_capability: tuple[int, int] | None
    pci_device_id: str | None
    source: str

    @property
    def bandwidth(self) -> float:
        """Bytes per second."""
        return self.bandwidth_gbs * 1e9


@dataclass(frozen=True)
class AppleChipSpec:
    """One row of apple_chips.csv."""

    chip: str
    gpu_cores_min: int
    gpu_cores_max: int
    bandwidth_gbs: float
    fp16_tflops_per_gpu_core: float
    source: str

    @property
    def bandwidth(self) -> float:
        """Bytes per second."""
        return self.bandwidth_gbs * 1e9

    def fp16_tflops(self, gpu_cores: int | None) -> float:
        """Estimated FP16 TFLOPS for this core count (the smallest variant when unknown)."""
        return round(self.fp16_tflops_per_gpu_core * (gpu_cores or self.gpu_cores_min), 1)


def normalize_gpu_name(name: str) -> str:
    """'NVIDIA A100-SXM4-80GB' -> 'nvidia a100 sxm4 80gb' (what table patterns are written against)."""
    return " ".join(re.sub(r"[-_/()]", " ", name.lower()).split())


def _data_rows(path: Path) -> list[dict[str, str]]:
    with path.open(encoding="utf-8", newline="") as handle:
        lines = [line for line in handle if line.strip() and not line.startswith("#")]
    return list(csv.DictReader(lines))


def _optional_float(text: str) -> float | None:
    return float(text) if text.strip() else None


def _capability(text: str) -> tuple[int, int] | None:
    if not text.strip():
        return None
    major, minor = text.strip().split(".")
    return int(major), int(minor)


@functools.cache
def gpu_table(path: Path | None = None) -> tuple[GpuSpec, ...]:
    """All rows of gpus.csv (cached)."""
    rows = _data_rows(path or resources_dir() / "hardware" / "gpus.csv")
    return tuple(
        GpuSpec(
            vendor=row["vendor"],
            name=row["name"],
            # Whole-token matches only: "a10" must not match "a100", "7900 xt" must not match "7900 xtx".
            pattern=re.compile(rf"(?<![a-z0-9])(?:{row['pattern']})(?![a-z0-9])"),
            memory_gb=_optional_float(row["memory_gb"]),
            bandwidth_gbs=float(row["bandwidth_gbs"]),
            fp16_tflops=_optional_float(row["fp16_tflops"]),
            compute_capability=_capability(row["compute_capability"]),
            pci_device_id=row["pci_device_id"].strip().lower() or None,
            source=row["source"],
        )
        for row in rows
    )


@functools.cache
def apple_chip_table(path: Path | None = None) -> tuple[AppleChipSpec, ...]:
    """All rows of apple_chips.csv (cached)."""
    rows = _data_rows(path or resources_dir() / "hardware" / "apple_chips.csv")
    return tuple(
        AppleChipSpec(
            chip=row["chip"],
            gpu_cores_min=int(row["gpu_cores_min"]),
            gpu_cores_max=int(row["gpu_cores_max"]),
            bandwidth_gbs=float(row["bandwidth_gbs"]),
            fp16_tflops_per_gpu_core=float(row["fp16_tflops_per_gpu_core"]),
            source=row["source"],
        )
        for row in rows
    )


def _memory_fits(spec: GpuSpec, memory_total: int | None) -> bool:
    if spec.memory_gb is None or not memory_total:
        return True
    return abs(memory_total / GIB - spec.memory_gb) <= spec.memory_gb * _MEMORY_TOLERANCE


def match_gpu(name: str, memory_total: int | None = None, *, vendor: str | None = None) -> GpuSpec | None:
    """The table row for a driver-reported GPU name, or None when the card is not in the table.

    The longest pattern match wins ("rtx 4090 laptop" over "rtx 4090"); rows that document a
    memory size only match cards of about that size (RTX 3060 8 GB vs 12 GB).
    """
    normalized = normalize_gpu_name(name)
    best: tuple[int, GpuSpec] | None = None
    for spec in gpu_table():
        if vendor is not None and spec.vendor != vendor:
            continue
        found = spec.pattern.search(normalized)
        if found is None or not _memory_fits(spec, memory_total):
            continue
        length = found.end() - found.start()
        if best is None or length > best[0]:
            best = (length, spec)
    return best[1] if best else None


def match_pci_device(vendor: str, device_id: str, memory_total: int | None) -> GpuSpec | None:
    """The table row for a PCI device id seen in sysfs (AMD/Intel), disambiguated by memory size."""
    wanted = device_id.lower().removeprefix("0x")
    for spec in gpu_table():
        if spec.vendor == vendor and spec.pci_device_id == wanted and _memory_fits(spec, memory_total):
            return spec
    return None


def match_apple_chip(chip: str, gpu_cores: int | None) -> AppleChipSpec | None:
    """The row for 'Apple M3 Max' with this many GPU cores (the smallest variant when cores are unknown)."""
    candidates = [spec for spec in apple_chip_table() if spec.chip.lower() == chip.strip().lower()]
    if gpu_cores is not None:
        for spec in candidates:
            if spec.gpu_cores_min <= gpu_cores <= spec.gpu_cores_max:
                return spec
    return min(candidates, key=lambda spec: spec.gpu_cores_min) if candidates else None
