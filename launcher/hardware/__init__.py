"""Hardware probe: what this machine has, as one frozen `Machine` value."""

from launcher.hardware.machine import (
    AppleSilicon,
    CpuInfo,
    GpuInfo,
    Machine,
    MemoryInfo,
)

__all__ = ["AppleSilicon", "CpuInfo", "GpuInfo", "Machine", "MemoryInfo"]
