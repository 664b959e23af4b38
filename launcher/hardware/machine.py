"""The `Machine` value: everything the advisor needs to know about the hardware.

Frozen dataclasses so a probe result can be shared between threads, recorded as JSON
(tests replay recorded machines) and compared. Sizes are bytes, bandwidths bytes/s.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import Any, Literal

GpuVendor = Literal["nvidia", "amd", "intel", "apple"]


@dataclass(frozen=True)
class CpuInfo:
    """The CPU and the instruction-set features engines care about."""

    brand: str
    arch: str  # "x86_64" | "arm64"
    physical_cores: int
    logical_cores: int
    features: frozenset[str] = frozenset()  # lower-case: "avx2", "fma", "avx512f", "neon", ...
    memory_bandwidth: float | None = None  # bytes/s of system RAM, when known

    def has(self, feature: str) -> bool:
        """True when the CPU reports this feature (case-insensitive)."""
        return feature.lower() in self.features


@dataclass(frozen=True)
class MemoryInfo:
    """System RAM."""

    total: int
    available: int


@dataclass(frozen=True)
class GpuInfo:
    """One discrete or integrated GPU."""

    index: int
    vendor: GpuVendor
    name: str
    memory_total: int
    memory_free: int
    compute_capability: tuple[int, int] | None = None  # NVIDIA only
    memory_bandwidth: float | None = None  # bytes/s, from launcher/resources/hardware/gpus.csv
    fp16_tflops: float | None = None  # dense tensor-core FP16, from the same table
    link: str | None = None  # "NVLink x4" / "PCIe 4.0 x16"
    nvlink_peers: tuple[int, ...] = ()


@dataclass(frozen=True)
class AppleSilicon:
    """An Apple Silicon SoC with unified memory."""

    chip: str  # "Apple M2"
    gpu_cores: int | None
    unified_memory: int
    memory_bandwidth: float | None
    gpu_wired_limit: int  # bytes the GPU may wire (recommendedMaxWorkingSetSize / iogpu.wired_limit_mb)
    fp16_tflops: float | None = None


@dataclass(frozen=True)
class Machine:
    """A complete probe answer. `unseen` says what could not be detected and why."""

    os: str  # "linux" | "darwin" | "windows"
    os_version: str
    cpu: CpuInfo
    memory: MemoryInfo
    gpus: tuple[GpuInfo, ...] = ()
    apple: AppleSilicon | None = None
    disk_free: int | None = None  # bytes free where models live
    models_dir: str | None = None
    unseen: tuple[str, ...] = field(default=())  # human-readable notes: "NVML: not installed"
    name: str = ""  # a label for recorded machines ("RTX 4090 desktop")
    nvidia_driver_version: str | None = None  # "550.54.15"
    cuda_driver_version: str | None = None  # the newest CUDA the driver supports: "12.4"

    @property
    def nvidia_gpus(self) -> tuple[GpuInfo, ...]:
        """The NVIDIA cards, in index order."""
        return tuple(g for g in self.gpus if g.vendor == "nvidia")

    @property
    def is_apple_silicon(self) -> bool:
        """True on an M-series Mac."""
        return self.apple is not None

    def to_json(self) -> dict[str, Any]:
        """A JSON-ready dict (features sorted, tuples as lists)."""

        def convert(value: Any) -> Any:
            if isinstance(value, frozenset):
                return sorted(value)
            if isinstance(value, tuple):
                return [convert(v) for v in value]
            if isinstance(value, dict):
                return {k: convert(v) for k, v in value.items()}
            return value

        return {k: convert(v) for k, v in dataclasses.asdict(self).items()}

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> Machine:
        """Rebuild a Machine from `to_json` output (recorded fixtures use this)."""
        cpu = dict(data["cpu"])
        cpu["features"] = frozenset(cpu.get("features", ()))
        gpus = []
        for g in data.get("gpus", ()):
            g = dict(g)
            if g.get("compute_capability") is not None:
                g["compute_capability"] = tuple(g["compute_capability"])
            g["nvlink_peers"] = tuple(g.get("nvlink_peers", ()))
            gpus.append(GpuInfo(**g))
        apple = AppleSilicon(**data["apple"]) if data.get("apple") else None
        return cls(
            os=data["os"],
            os_version=data.get("os_version", ""),
            cpu=CpuInfo(**cpu),
            memory=MemoryInfo(**data["memory"]),
            gpus=tuple(gpus),
            apple=apple,
            disk_free=data.get("disk_free"),
            models_dir=data.get("models_dir"),
            unseen=tuple(data.get("unseen", ())),
            name=data.get("name", ""),
            nvidia_driver_version=data.get("nvidia_driver_version"),
            cuda_driver_version=data.get("cuda_driver_version"),
        )
