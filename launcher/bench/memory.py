"""Peak memory and CPU use of the server under test, and how busy the host was, during a benchmark.

Preferred source: the server process's RSS (plus its children's) through psutil, when we
know its pid (`--server-pid`, the LAUNCHER_READY line, or the process listening on a
loopback port). Otherwise the server's own /metrics `process_resident_memory_bytes`.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from urllib.parse import urlsplit

import psutil

from launcher.core.net import is_loopback_host

_PSUTIL_INTERVAL_S = 0.05
_METRICS_INTERVAL_S = 0.5


@dataclass(frozen=True)
class PeakMemory:
    """The largest resident size seen and where it came from."""

    peak_bytes: int | None
    source: str  # "psutil rss pid 1234", "/metrics process_resident_memory_bytes", "unavailable"


def discover_listening_pid(base_url: str) -> int | None:
    """The pid listening on a loopback base URL's port, if this user can see it."""
    parts = urlsplit(base_url)
    if not is_loopback_host(parts.hostname or ""):
        return None
    port = parts.port or (443 if parts.scheme == "https" else 80)
    try:
        connections = psutil.net_connections(kind="tcp")
    except (psutil.AccessDenied, OSError):
        return None
    for conn in connections:
        if conn.status == psutil.CONN_LISTEN and conn.laddr and conn.laddr.port == port and conn.pid:
            return int(conn.pid)
    return None


def process_tree_rss(pid: int) -> int | None:
    """RSS of a process and its children in bytes; None once it is gone."""
    try:
        process = psutil.Process(pid)
        total = int(process.memory_info().rss)
        for child in process.children(recursive=True):
            with contextlib.suppress(psutil.Error):
                total += int(child.memory_info().rss)
        return total
    except psutil.Error:
        return None


def process_tree_cpu_seconds(pid: int) -> float | None:
    """User + system CPU seconds of a process and its live children; None once it is gone."""
    try:
        process = psutil.Process(pid)
        times = process.cpu_times()
        total = times.user + times.system
        for child in process.children(recursive=True):
            with contextlib.suppress(psutil.Error):
                child_times = child.cpu_times()
                total += child_times.user + child_times.system
        return float(total)
    except psutil.Error:
        return None


@dataclass(frozen=True)
class HostLoad:
    """How much CPU the server got, and how busy the machine was, over the measured part of a run.

    On a shared machine a low `server_cores_busy` next to a high load average means the
    numbers measure the contention more than the server.
    """

    wall_seconds: float
    load_average_start: float | None  # 1-minute load average
    load_average_end: float | None
    server_cpu_seconds: float | None

    @property
    def server_cores_busy(self) -> float | None:
        """Average number of cores the server kept busy."""
        if self.server_cpu_seconds is None or self.wall_seconds <= 0:
            return None
        return self.server_cpu_seconds / self.wall_seconds


def load_average() -> float | None:
    """The 1-minute load average, where the OS has one."""
    try:
        return float(psutil.getloadavg()[0])
    except (AttributeError, OSError):
        return None


class MemorySampler:
    """Samples a memory reading in the background; `peak()` gives the maximum seen so far."""

    def __init__(self, read: Callable[[], Awaitable[int | None]], interval: float, source: str) -> None:
        self._read = read
        self._interval = interval
        self._source = source
        self._peak: int | None = None
        self._task: asyncio.Task[None] | None = None

    @classmethod
    def for_pid(cls, pid: int) -> MemorySampler:
        """Sample the process tree's RSS with psutil."""

        async def read() -> int | None:
            return process_tree_rss(pid)

        return cls(read, _PSUTIL_INTERVAL_S, f"psutil RSS of pid {pid} and children")

    @classmethod
    def for_metrics(cls, read_metrics: Callable[[], Awaitable[dict[str, float] | None]]) -> MemorySampler:
        """Sample /metrics' process_resident_memory_bytes (prometheus-client's process collector)."""

        async def read() -> int | None:
            samples = await read_metrics()
            value = (samples or {}).get("process_resident_memory_bytes")
            return int(value) if value is not None else None

        return cls(read, _METRICS_INTERVAL_S, "/metrics process_resident_memory_bytes")

    async def sample_once(self) -> None:
        """Take one reading now."""
        value = await self._read()
        if value is not None and (self._peak is None or value > self._peak):
            self._peak = value

    async def _loop(self) -> None:
        while True:
            await self.sample_once()
            await asyncio.sleep(self._interval)

    def start(self) -> None:
        """Begin sampling on the running event loop."""
        self._task = asyncio.get_running_loop().create_task(self._loop())

    async def stop(self) -> PeakMemory:
        """Stop sampling (one last reading) and return the peak."""
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
        await self.sample_once()
        source = self._source if self._peak is not None else "unavailable"
        return PeakMemory(self._peak, source)
