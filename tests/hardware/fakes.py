"""Fake raw sources for the hardware probe: recorded files, sysctl output, psutil numbers and an NVML double.

The NVML double raises the real `pynvml.NVMLError` subclasses (built from NVML return codes,
exactly as pynvml does), so the probe's error handling is exercised against the real types.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pynvml

from launcher.hardware.sources import DiskUsage, LocalFiles, PlatformFacts, Sources
from launcher.hardware.windows import LiveWindowsCpu, WindowsCpuSource

MIB = 1024**2
GIB = 1024**3


@dataclass
class FakeStats:
    """psutil-like numbers."""

    total: int
    available: int
    physical: int | None
    logical: int | None

    def virtual_memory(self) -> SimpleNamespace:
        return SimpleNamespace(total=self.total, available=self.available)

    def cpu_count(self, logical: bool = True) -> int | None:
        return self.logical if logical else self.physical


@dataclass
class FakeCommands:
    """Answers by program name (argv[0]); a missing program answers None like a missing binary."""

    outputs: dict[str, str] = field(default_factory=dict)
    calls: list[list[str]] = field(default_factory=list)

    def run(self, argv: Sequence[str]) -> str | None:
        self.calls.append(list(argv))
        return self.outputs.get(argv[0])


@dataclass(frozen=True)
class FakeWindowsCpu:
    """What the registry and IsProcessorFeaturePresent answer on a Windows machine."""

    brand_name: str | None
    feature_set: frozenset[str] | None

    def brand(self) -> str | None:
        return self.brand_name

    def features(self) -> frozenset[str] | None:
        return self.feature_set


@dataclass
class FakeGpu:
    """One GPU as NVML would describe it."""

    name: str
    memory_total_mib: int
    memory_used_mib: int
    compute_capability: tuple[int, int] | None
    bus_id: str
    bus_width: int | None = None
    mem_clock_mhz: int | None = None
    pcie: tuple[int, int] | None = (4, 16)
    nvlinks: list[str] = field(default_factory=list)  # remote bus id per active link, or "switch"
    nvlink_capable: bool = False
    handle_error: int | None = None  # NVML return code for nvmlDeviceGetHandleByIndex


def _error(code: int) -> Exception:
    error: Exception = pynvml.NVMLError(code)
    return error


class FakeNvml:
    """The subset of the pynvml module the probe uses; errors are real pynvml exception classes."""

    NVMLError = pynvml.NVMLError

    def __init__(
        self,
        gpus: list[FakeGpu],
        *,
        driver: str = "550.54.15",
        cuda: int = 12040,
        init_error: int | None = None,
        not_supported: frozenset[str] = frozenset(),
    ) -> None:
        self.gpus = gpus
        self.driver = driver
        self.cuda = cuda
        self.init_error = init_error
        self.not_supported = not_supported
        self.initialized = False
        self.shutdowns = 0

    def __getattr__(self, name: str) -> Any:
        if name.startswith("NVML_"):
            return getattr(pynvml, name)
        raise AttributeError(name)

    def _check(self, function: str) -> None:
        if not self.initialized:
            raise _error(pynvml.NVML_ERROR_UNINITIALIZED)
        if function in self.not_supported:
            raise _error(pynvml.NVML_ERROR_NOT_SUPPORTED)

    def nvmlInit(self) -> None:
        if self.init_error is not None:
            raise _error(self.init_error)
        self.initialized = True

    def nvmlShutdown(self) -> None:
        self._check("nvmlShutdown")
        self.initialized = False
        self.shutdowns += 1

    def nvmlSystemGetDriverVersion(self) -> str:
        self._check("nvmlSystemGetDriverVersion")
        return self.driver

    def nvmlSystemGetCudaDriverVersion(self) -> int:
        self._check("nvmlSystemGetCudaDriverVersion")
        return self.cuda

    def nvmlDeviceGetCount(self) -> int:
        self._check("nvmlDeviceGetCount")
        return len(self.gpus)

    def nvmlDeviceGetHandleByIndex(self, index: int) -> FakeGpu:
        self._check("nvmlDeviceGetHandleByIndex")
        gpu = self.gpus[index]
        if gpu.handle_error is not None:
            raise _error(gpu.handle_error)
        return gpu

    def nvmlDeviceGetName(self, gpu: FakeGpu) -> str:
        self._check("nvmlDeviceGetName")
        return gpu.name

    def nvmlDeviceGetPciInfo(self, gpu: FakeGpu) -> SimpleNamespace:
        self._check("nvmlDeviceGetPciInfo")
        return SimpleNamespace(busId=gpu.bus_id)

    def nvmlDeviceGetMemoryInfo(self, gpu: FakeGpu) -> SimpleNamespace:
        self._check("nvmlDeviceGetMemoryInfo")
        total, used = gpu.memory_total_mib * MIB, gpu.memory_used_mib * MIB
        return SimpleNamespace(total=total, used=used, free=total - used)

    def nvmlDeviceGetCudaComputeCapability(self, gpu: FakeGpu) -> tuple[int, int]:
        self._check("nvmlDeviceGetCudaComputeCapability")
        if gpu.compute_capability is None:
            raise _error(pynvml.NVML_ERROR_NOT_SUPPORTED)
        return gpu.compute_capability

    def nvmlDeviceGetMemoryBusWidth(self, gpu: FakeGpu) -> int:
        self._check("nvmlDeviceGetMemoryBusWidth")
        if gpu.bus_width is None:
            raise _error(pynvml.NVML_ERROR_NOT_SUPPORTED)
        return gpu.bus_width

    def nvmlDeviceGetMaxClockInfo(self, gpu: FakeGpu, clock_type: int) -> int:
        self._check("nvmlDeviceGetMaxClockInfo")
        if gpu.mem_clock_mhz is None or clock_type != pynvml.NVML_CLOCK_MEM:
            raise _error(pynvml.NVML_ERROR_NOT_SUPPORTED)
        return gpu.mem_clock_mhz

    def nvmlDeviceGetMaxPcieLinkGeneration(self, gpu: FakeGpu) -> int:
        self._check("nvmlDeviceGetMaxPcieLinkGeneration")
        if gpu.pcie is None:
            raise _error(pynvml.NVML_ERROR_NOT_SUPPORTED)
        return gpu.pcie[0]

    def nvmlDeviceGetMaxPcieLinkWidth(self, gpu: FakeGpu) -> int:
        self._check("nvmlDeviceGetMaxPcieLinkWidth")
        if gpu.pcie is None:
            raise _error(pynvml.NVML_ERROR_NOT_SUPPORTED)
        return gpu.pcie[1]

    def nvmlDeviceGetNvLinkState(self, gpu: FakeGpu, link: int) -> int:
        self._check("nvmlDeviceGetNvLinkState")
        if not gpu.nvlink_capable and not gpu.nvlinks:
            raise _error(pynvml.NVML_ERROR_NOT_SUPPORTED)
        if link < len(gpu.nvlinks):
            return int(pynvml.NVML_FEATURE_ENABLED)
        if link >= 18:
            raise _error(pynvml.NVML_ERROR_INVALID_ARGUMENT)
        return int(pynvml.NVML_FEATURE_DISABLED)

    def nvmlDeviceGetNvLinkRemoteDeviceType(self, gpu: FakeGpu, link: int) -> int:
        self._check("nvmlDeviceGetNvLinkRemoteDeviceType")
        remote = gpu.nvlinks[link]
        return int(pynvml.NVML_NVLINK_DEVICE_TYPE_SWITCH if remote == "switch" else pynvml.NVML_NVLINK_DEVICE_TYPE_GPU)

    def nvmlDeviceGetNvLinkRemotePciInfo(self, gpu: FakeGpu, link: int) -> SimpleNamespace:
        self._check("nvmlDeviceGetNvLinkRemotePciInfo")
        # pynvml hands back bytes from the C struct; the probe must cope with both.
        return SimpleNamespace(busId=gpu.nvlinks[link].encode())


def missing_pynvml() -> Any:
    """An NvmlLoader for a machine without nvidia-ml-py."""
    raise ModuleNotFoundError("No module named 'pynvml'", name="pynvml")


def write_tree(root: Path, files: dict[str, str | bytes]) -> LocalFiles:
    """Write {'/proc/cpuinfo': text, ...} below root and return a reader rooted there."""
    for path, content in files.items():
        target = root / path.lstrip("/")
        target.parent.mkdir(parents=True, exist_ok=True)
        if isinstance(content, bytes):
            target.write_bytes(content)
        else:
            target.write_text(content, encoding="utf-8")
    return LocalFiles(root)


def make_sources(
    root: Path,
    *,
    platform: PlatformFacts,
    stats: FakeStats,
    files: dict[str, str | bytes] | None = None,
    commands: dict[str, str] | None = None,
    nvml: FakeNvml | None = None,
    disk_free: int = 500 * GIB,
    models_dir: str = "/home/user/.cache/huggingface/hub",
    windows_cpu: WindowsCpuSource | None = None,
) -> Sources:
    """Sources for a recorded machine; `nvml=None` means the NVIDIA library is not on the machine."""

    def disk_usage(path: str) -> DiskUsage:
        return DiskUsage(disk_free * 2, disk_free, disk_free)

    def load_nvml() -> Any:
        return nvml if nvml is not None else FakeNvml([], init_error=pynvml.NVML_ERROR_LIBRARY_NOT_FOUND)

    return Sources(
        platform=platform,
        files=write_tree(root, files or {}),
        commands=FakeCommands(dict(commands or {})),
        stats=stats,
        disk_usage=disk_usage,
        nvml=load_nvml,
        models_dir=lambda: Path(models_dir),
        windows_cpu=windows_cpu or LiveWindowsCpu(),
    )


def cpuinfo_x86(
    model_name: str, flags: str, *, sockets: int, cores: int, threads: int, vendor: str = "GenuineIntel"
) -> str:
    """A /proc/cpuinfo as an x86 Linux kernel writes it, for a CPU with this topology (cores per socket)."""
    blocks = []
    processor = 0
    for thread in range(threads):
        for socket in range(sockets):
            for core in range(cores):
                blocks.append(
                    f"processor\t: {processor}\nvendor_id\t: {vendor}\nmodel name\t: {model_name}\n"
                    f"physical id\t: {socket}\nsiblings\t: {cores * threads}\ncore id\t\t: {core}\n"
                    f"cpu cores\t: {cores}\napicid\t\t: {(socket * cores + core) * threads + thread}\n"
                    f"fpu\t\t: yes\nflags\t\t: {flags}\n"
                )
                processor += 1
    return "\n".join(blocks) + "\n"


def smbios_memory_device(
    *,
    size_mb: int,
    speed_mts: int,
    configured_mts: int | None = None,
    memory_type: int = 0x1A,
    data_width: int = 64,
    device_locator: str = "DIMM_A1",
    bank_locator: str = "P0 CHANNEL A",
    length: int = 0x28,
) -> bytes:
    """An SMBIOS type 17 (Memory Device) record as /sys/firmware/dmi/entries/17-N/raw holds it."""
    record = bytearray(length)
    record[0], record[1] = 17, length
    record[0x08:0x0A] = (data_width + 8 if data_width else 0).to_bytes(2, "little")  # total width incl. ECC
    record[0x0A:0x0C] = data_width.to_bytes(2, "little")
    record[0x0C:0x0E] = min(size_mb, 0x7FFF).to_bytes(2, "little")
    record[0x0E] = 0x09  # DIMM
    record[0x10], record[0x11] = 1, 2  # string numbers of the locators
    record[0x12] = memory_type
    record[0x15:0x17] = (speed_mts if size_mb else 0).to_bytes(2, "little")
    if length >= 0x22:
        record[0x20:0x22] = ((configured_mts or speed_mts) if size_mb else 0).to_bytes(2, "little")
    strings = f"{device_locator}\0{bank_locator}\0\0".encode("ascii")
    return bytes(record) + strings


def smbios_tree(devices: list[bytes]) -> dict[str, str | bytes]:
    """Files for `write_tree`: one /sys/firmware/dmi/entries/17-N/raw per record."""
    return {f"/sys/firmware/dmi/entries/17-{n}/raw": raw for n, raw in enumerate(devices)}
