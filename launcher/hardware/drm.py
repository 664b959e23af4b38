"""AMD and Intel GPUs on Linux, from /sys/class/drm (no vendor library needed).

amdgpu exposes VRAM size and use (`mem_info_vram_total/used`); i915/xe expose no VRAM size in
a stable place, so only Intel cards known to gpus.csv (discrete Arc) are listed, with their
documented size; integrated GPUs share system RAM and are only mentioned in `unseen`.
NVIDIA cards seen here only explain a missing NVML ("a card is present, the driver is not answering").
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

from launcher.hardware.machine import GpuInfo, GpuVendor
from launcher.hardware.sources import FileReader
from launcher.hardware.tables import match_pci_device

DRM_ROOT = "/sys/class/drm"
_INTEGRATED_VRAM_LIMIT = 2 * 1024**3
_VENDORS: dict[str, GpuVendor] = {"0x1002": "amd", "0x8086": "intel", "0x10de": "nvidia"}


@dataclass
class DrmReport:
    """Non-NVIDIA GPUs found in sysfs, whether an NVIDIA card is physically present, and notes."""

    gpus: list[GpuInfo] = field(default_factory=list)
    nvidia_present: bool = False
    unseen: list[str] = field(default_factory=list)


def _int(text: str | None) -> int | None:
    try:
        return int(text.strip()) if text else None
    except ValueError:
        return None


def probe_drm(files: FileReader, first_index: int = 0) -> DrmReport:
    """Read every /sys/class/drm/cardN (connectors like card0-DP-1 are skipped)."""
    report = DrmReport()
    index = first_index
    for card in files.list_dir(DRM_ROOT):
        if not re.fullmatch(r"card\d+", card):
            continue
        device = f"{DRM_ROOT}/{card}/device"
        vendor = _VENDORS.get((files.read_text(f"{device}/vendor") or "").strip().lower())
        device_id = (files.read_text(f"{device}/device") or "").strip().lower()
        if vendor is None:
            continue
        if vendor == "nvidia":
            report.nvidia_present = True
            continue
        total = _int(files.read_text(f"{device}/mem_info_vram_total"))
        used = _int(files.read_text(f"{device}/mem_info_vram_used")) or 0
        spec = match_pci_device(vendor, device_id, total)
        name = spec.name if spec else f"{'AMD' if vendor == 'amd' else 'Intel'} GPU (PCI {device_id})"
        if total is None and spec is not None and spec.memory_gb:
            # A known discrete card whose driver hides VRAM size (Intel Arc): use the documented size.
            total = int(spec.memory_gb * 1024**3)
            report.unseen.append(f"{name}: VRAM size not in sysfs; assuming {spec.memory_gb:g} GB free")
        elif total is None:
            report.unseen.append(f"{name}: integrated or unknown GPU without readable VRAM size; not listed")
            continue
        elif spec is None and total < _INTEGRATED_VRAM_LIMIT:
            # APUs report a small BIOS carve-out as "VRAM"; offloading to it would not help.
            report.unseen.append(f"{name}: integrated GPU ({total // 1024**2} MiB carve-out); not listed")
            continue
        elif spec is None:
            report.unseen.append(f"{name}: not in gpus.csv, so memory bandwidth is unknown")
        report.gpus.append(
            GpuInfo(
                index=index,
                vendor=vendor,
                name=name,
                memory_total=total,
                memory_free=max(total - used, 0),
                memory_bandwidth=spec.bandwidth if spec else None,
                fp16_tflops=spec.fp16_tflops if spec else None,
            )
        )
        index += 1
    return report
