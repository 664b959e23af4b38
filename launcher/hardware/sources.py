"""Where the probe gets its raw facts. Each source is a small Protocol so tests replay recorded machines.

`Sources.real()` wires the live ones: files under `/` (proc, sysfs), `sysctl`/`system_profiler`
through subprocess, psutil for RAM and core counts, `shutil.disk_usage`, and the `pynvml` module
(imported lazily: a missing package is an answer, not a crash).
"""

from __future__ import annotations

import os
import platform
import shutil
import subprocess
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, NamedTuple, Protocol

from launcher.hardware.windows import LiveWindowsCpu, WindowsCpuSource


class FileReader(Protocol):
    """Reads small text files such as /proc/cpuinfo and sysfs attributes."""

    def read_text(self, path: str) -> str | None:
        """The file's text, or None when it is missing or unreadable."""
        ...

    def read_bytes(self, path: str) -> bytes | None:
        """The file's bytes (SMBIOS tables), or None when missing or unreadable."""
        ...

    def list_dir(self, path: str) -> list[str]:
        """Sorted entry names of a directory; empty when it is missing or unreadable."""
        ...


class CommandRunner(Protocol):
    """Runs a short read-only command (sysctl, system_profiler)."""

    def run(self, argv: Sequence[str]) -> str | None:
        """Its stdout, or None when the command does not exist or produced nothing."""
        ...


class VirtualMemory(Protocol):
    """The two numbers of psutil.virtual_memory() the probe uses."""

    @property
    def total(self) -> int: ...

    @property
    def available(self) -> int: ...


class SystemStats(Protocol):
    """psutil-like: RAM and core counts (the psutil module itself satisfies this)."""

    def virtual_memory(self) -> VirtualMemory:
        """Total and available RAM in bytes."""
        ...

    def cpu_count(self, logical: bool = True) -> int | None:
        """Logical or physical core count; None when unknown."""
        ...


class DiskUsage(NamedTuple):
    """Same fields as shutil.disk_usage()."""

    total: int
    used: int
    free: int


DiskUsageFn = Callable[[str], DiskUsage]


class NvmlLoader(Protocol):
    """Returns the pynvml module (or a fake with the same functions and NVMLError classes)."""

    def __call__(self) -> Any:
        """Raises ImportError when nvidia-ml-py is not installed."""
        ...


@dataclass(frozen=True)
class PlatformFacts:
    """What Python's `platform` module says about the OS."""

    system: str  # platform.system(): "Linux" | "Darwin" | "Windows"
    machine: str  # platform.machine(): "x86_64" | "arm64" | "aarch64" | "AMD64"
    release: str  # kernel / Windows release
    mac_version: str = ""  # platform.mac_ver()[0] on macOS
    processor: str = ""  # platform.processor() (the only CPU name Windows gives cheaply)

    @classmethod
    def current(cls) -> PlatformFacts:
        """Facts about the running interpreter's machine."""
        return cls(
            system=platform.system(),
            machine=platform.machine(),
            release=platform.release(),
            mac_version=platform.mac_ver()[0],
            processor=platform.processor(),
        )


class LocalFiles:
    """Reads real files, optionally below a different root (tests point it at a recorded tree)."""

    def __init__(self, root: str | os.PathLike[str] = "/") -> None:
        self.root = Path(root)

    def _path(self, path: str) -> Path:
        return self.root / path.lstrip("/")

    def read_text(self, path: str) -> str | None:
        """The file's text, or None when it is missing or unreadable."""
        try:
            return self._path(path).read_text(encoding="utf-8", errors="replace")
        except OSError:
            return None

    def read_bytes(self, path: str) -> bytes | None:
        """The file's bytes, or None when missing or unreadable."""
        try:
            return self._path(path).read_bytes()
        except OSError:
            return None

    def list_dir(self, path: str) -> list[str]:
        """Sorted entry names; empty when missing or unreadable."""
        try:
            return sorted(os.listdir(self._path(path)))
        except OSError:
            return []


class SubprocessRunner:
    """Runs commands with a short timeout; a missing binary or a failure is None, never an exception."""

    def __init__(self, timeout_s: float = 10.0) -> None:
        self.timeout_s = timeout_s

    def run(self, argv: Sequence[str]) -> str | None:
        """stdout, even on a non-zero exit (`sysctl` fails on one unknown key but prints the rest)."""
        try:
            done = subprocess.run(list(argv), capture_output=True, text=True, timeout=self.timeout_s, check=False)
        except (OSError, subprocess.SubprocessError):
            return None
        return done.stdout or None


def _disk_usage(path: str) -> DiskUsage:
    usage = shutil.disk_usage(path)
    return DiskUsage(usage.total, usage.used, usage.free)


def _load_pynvml() -> Any:
    import pynvml  # nvidia-ml-py; lazily, it is not an engine runtime but may be absent

    return pynvml


@dataclass(frozen=True)
class Sources:
    """Every raw source the probe reads; replace any of them in tests."""

    platform: PlatformFacts
    files: FileReader
    commands: CommandRunner
    stats: SystemStats
    disk_usage: DiskUsageFn
    nvml: NvmlLoader
    models_dir: Callable[[], Path]
    windows_cpu: WindowsCpuSource = field(default_factory=LiveWindowsCpu)

    @classmethod
    def real(cls) -> Sources:
        """The live machine."""
        import psutil

        from launcher.core.paths import hf_cache_dir

        stats: SystemStats = psutil  # type: ignore[assignment]  # the module satisfies the protocol
        return cls(
            platform=PlatformFacts.current(),
            files=LocalFiles("/"),
            commands=SubprocessRunner(),
            stats=stats,
            disk_usage=_disk_usage,
            nvml=_load_pynvml,
            models_dir=hf_cache_dir,
        )
