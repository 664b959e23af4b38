"""The hardware probe: one `Machine` answer from injected raw sources.

`probe_machine()` is what the app calls (cached per process: hardware does not change while
the launcher runs, and NVML start-up costs ~100 ms). `probe_machine_uncached(sources)` takes
recorded sources, which is how tests replay other machines through the real parsing code.
The probe never raises for a missing tool or library: it answers what it could see and says
in `Machine.unseen` what it could not, and why.
"""

from __future__ import annotations

import dataclasses
import functools
import logging
from pathlib import Path

from launcher.hardware.apple import APPLE_KEYS, probe_apple
from launcher.hardware.cpu import MAC_CPU_KEYS, normalize_arch, parse_sysctl, probe_cpu
from launcher.hardware.drm import probe_drm
from launcher.hardware.machine import GpuInfo, Machine, MemoryInfo
from launcher.hardware.memory_bandwidth import probe_memory_bandwidth
from launcher.hardware.nvidia import probe_nvidia
from launcher.hardware.sources import Sources

log = logging.getLogger(__name__)
_OS_NAMES = {"Linux": "linux", "Darwin": "darwin", "Windows": "windows"}


@functools.cache
def probe_machine() -> Machine:
    """This machine, probed once per process."""
    return probe_machine_uncached()


def probe_machine_uncached(sources: Sources | None = None) -> Machine:
    """Probe now, from `sources` (the live machine when None)."""
    sources = sources or Sources.real()
    facts = sources.platform
    unseen: list[str] = []
    sysctl_values: dict[str, str] = {}
    if facts.system == "Darwin":
        sysctl_values = parse_sysctl(sources.commands.run(["sysctl", *MAC_CPU_KEYS, *APPLE_KEYS]) or "")

    cpu_report = probe_cpu(sources, sysctl_values or None)
    unseen += cpu_report.unseen
    memory = _memory(sources, sysctl_values, unseen)

    gpus: list[GpuInfo] = []
    apple = None
    nvidia_driver = cuda_driver = None
    if facts.system == "Darwin" and normalize_arch(facts.machine) == "arm64":
        apple_report = probe_apple(sysctl_values, sources.commands)
        apple = apple_report.apple
        unseen += apple_report.unseen
    elif facts.system in {"Linux", "Windows"}:
        nvidia = probe_nvidia(sources.nvml)
        gpus += nvidia.gpus
        nvidia_driver, cuda_driver = nvidia.driver_version, nvidia.cuda_driver_version
        if facts.system == "Linux":
            drm = probe_drm(sources.files, first_index=len(gpus))
            gpus += drm.gpus
            if drm.nvidia_present and not nvidia.gpus:
                unseen.append("NVIDIA: a GPU is on the PCI bus but NVML cannot see it (driver missing/broken)")
            unseen += nvidia.unseen
            unseen += drm.unseen
        else:
            unseen += nvidia.unseen
            unseen.append("AMD/Intel GPUs: not detected on Windows (no vendor-neutral query)")
    else:
        unseen.append(f"GPUs: not detected on {facts.system or 'this OS'}")

    cpu = cpu_report.cpu
    if apple is not None:
        cpu = dataclasses.replace(cpu, memory_bandwidth=apple.memory_bandwidth)
    else:
        bandwidth, note = probe_memory_bandwidth(sources.files, facts.system)
        cpu = dataclasses.replace(cpu, memory_bandwidth=bandwidth)
        if note:
            unseen.append(note)

    models_dir, disk_free = _disk(sources, unseen)
    return Machine(
        os=_OS_NAMES.get(facts.system, facts.system.lower() or "unknown"),
        os_version=_os_version(sources),
        cpu=cpu,
        memory=memory,
        gpus=tuple(gpus),
        apple=apple,
        disk_free=disk_free,
        models_dir=models_dir,
        unseen=tuple(unseen),
        nvidia_driver_version=nvidia_driver,
        cuda_driver_version=cuda_driver,
    )


def _memory(sources: Sources, sysctl_values: dict[str, str], unseen: list[str]) -> MemoryInfo:
    try:
        memory = sources.stats.virtual_memory()
        return MemoryInfo(total=int(memory.total), available=int(memory.available))
    except (OSError, RuntimeError, AttributeError) as err:
        log.debug("psutil.virtual_memory failed: %s", err)
    meminfo = _parse_meminfo(sources.files.read_text("/proc/meminfo") or "")
    total = meminfo.get("MemTotal") or int(sysctl_values.get("hw.memsize", "0") or 0)
    available = meminfo.get("MemAvailable", total)
    if not total:
        unseen.append("RAM: size not readable")
    return MemoryInfo(total=total, available=available)


def _parse_meminfo(text: str) -> dict[str, int]:
    values: dict[str, int] = {}
    for line in text.splitlines():
        key, _, rest = line.partition(":")
        parts = rest.split()
        if parts and parts[0].isdigit():
            values[key.strip()] = int(parts[0]) * (1024 if parts[1:] == ["kB"] else 1)
    return values


def _disk(sources: Sources, unseen: list[str]) -> tuple[str | None, int | None]:
    """Free bytes where models live; the HF cache may not exist yet, so walk up to a folder that does."""
    try:
        models_dir = Path(sources.models_dir())
    except Exception as err:  # a broken HF_HOME setting must not break detection
        unseen.append(f"Disk: models folder unknown ({err})")
        return None, None
    candidate = models_dir
    while True:
        try:
            return str(models_dir), int(sources.disk_usage(str(candidate)).free)
        except FileNotFoundError:
            if candidate.parent == candidate:
                break
            candidate = candidate.parent
        except OSError as err:
            unseen.append(f"Disk: free space at {candidate} not readable ({err.strerror or err})")
            return str(models_dir), None
    unseen.append(f"Disk: no existing folder above {models_dir}")
    return str(models_dir), None


def _os_version(sources: Sources) -> str:
    facts = sources.platform
    if facts.system == "Darwin":
        return f"macOS {facts.mac_version}".strip()
    if facts.system == "Linux":
        pretty = ""
        for line in (sources.files.read_text("/etc/os-release") or "").splitlines():
            if line.startswith("PRETTY_NAME="):
                pretty = line.partition("=")[2].strip().strip('"')
        return f"{pretty} (kernel {facts.release})" if pretty else f"Linux {facts.release}"
    return f"{facts.system} {facts.release}".strip()
