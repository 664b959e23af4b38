"""Qt-free sampling of the server process's memory: RSS (psutil) and GPU / unified memory.

NVIDIA: NVML's per-process usage summed over the cards the server uses, against those cards'
total. Apple Silicon: unified memory in use system-wide against the total (the GPU has no memory of
its own). Elsewhere the model lives in RAM, so the device figure is the process RSS against RAM.
"""

from __future__ import annotations

import contextlib
import platform
import sys
from typing import Any

import psutil

from launcher.ui.metrics import ProcessMemory


class MemorySampler:
    """Reads memory figures for one pid; NVML is initialised once and shut down by `close`."""

    def __init__(self, pid: int) -> None:
        self.pid = pid
        self._process: psutil.Process | None = None
        self._nvml: Any = None
        self._nvml_handles: list[Any] = []
        self._apple = sys.platform == "darwin" and platform.machine() == "arm64"
        if not self._apple:
            self._init_nvml()

    def _init_nvml(self) -> None:
        try:
            import pynvml

            pynvml.nvmlInit()
            count = pynvml.nvmlDeviceGetCount()
            self._nvml_handles = [pynvml.nvmlDeviceGetHandleByIndex(i) for i in range(count)]
            self._nvml = pynvml
        except Exception:  # no driver, no library, no GPU: the RAM figures are all there is
            self._nvml = None
            self._nvml_handles = []

    def sample(self, engine_memory: dict[str, float] | None = None) -> ProcessMemory:
        """One reading; a vanished process gives empty figures rather than an exception."""
        rss = self._rss()
        total_ram = psutil.virtual_memory().total
        if self._nvml_handles:
            used, total = self._nvml_usage()
            if total:
                return ProcessMemory(rss, used, total, "VRAM")
        if self._apple:
            active = (engine_memory or {}).get("active")
            vm = psutil.virtual_memory()
            used = int(active) if active else int(vm.total - vm.available)
            return ProcessMemory(rss, used, int(vm.total), "unified memory")
        return ProcessMemory(rss, rss, int(total_ram), "RAM")

    def _rss(self) -> int | None:
        try:
            if self._process is None:
                self._process = psutil.Process(self.pid)
            return int(self._process.memory_info().rss)
        except (psutil.NoSuchProcess, psutil.AccessDenied, psutil.ZombieProcess):
            return None

    def _nvml_usage(self) -> tuple[int, int]:
        nvml, used, total = self._nvml, 0, 0
        for handle in self._nvml_handles:
            try:
                procs = nvml.nvmlDeviceGetComputeRunningProcesses(handle)
                mine = sum(int(p.usedGpuMemory or 0) for p in procs if p.pid == self.pid)
                if mine:
                    used += mine
                    total += int(nvml.nvmlDeviceGetMemoryInfo(handle).total)
            except Exception:  # a card going away mid-poll must not stop the gauges
                continue
        if not total and self._nvml_handles:  # not on a GPU (yet): report the first card's total
            try:
                total = int(nvml.nvmlDeviceGetMemoryInfo(self._nvml_handles[0]).total)
            except Exception:
                total = 0
        return used, total

    def close(self) -> None:
        """Release NVML."""
        if self._nvml is not None:
            with contextlib.suppress(Exception):  # shutting down: nothing useful to do on failure
                self._nvml.nvmlShutdown()
            self._nvml = None
