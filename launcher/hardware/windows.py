"""Windows CPU facts: the brand string from the registry, features from IsProcessorFeaturePresent.

Windows reports only coarse feature tiers (no FMA/F16C/VNNI), but AVX/AVX2/AVX-512F is what
decides which llama.cpp build runs. Off Windows both answers are None.
"""

from __future__ import annotations

import ctypes
import sys
from typing import Protocol

# PF_* numbers from winnt.h (IsProcessorFeaturePresent documentation).
WINDOWS_FEATURES = {
    38: "sse4_2",
    39: "avx",
    40: "avx2",
    41: "avx512f",
    29: "neon",  # PF_ARM_V8_INSTRUCTIONS_AVAILABLE: Advanced SIMD is part of ARMv8-A
    43: "dotprod",  # PF_ARM_V82_DP_INSTRUCTIONS_AVAILABLE
    46: "sve",
    47: "sve2",
}
_CPU_KEY = r"HARDWARE\DESCRIPTION\System\CentralProcessor\0"


class WindowsCpuSource(Protocol):
    """The two Windows queries the CPU probe uses."""

    def brand(self) -> str | None:
        """ProcessorNameString ("AMD Ryzen 9 7950X 16-Core Processor"), or None when unreadable."""
        ...

    def features(self) -> frozenset[str] | None:
        """Engine-relevant features Windows vouches for, or None off Windows."""
        ...


class LiveWindowsCpu:
    """Reads the running Windows machine; answers None elsewhere."""

    def brand(self) -> str | None:
        """ProcessorNameString from the registry."""
        if sys.platform != "win32":
            return None
        import winreg

        try:
            with winreg.OpenKey(winreg.HKEY_LOCAL_MACHINE, _CPU_KEY) as key:
                value, _ = winreg.QueryValueEx(key, "ProcessorNameString")
        except OSError:
            return None
        return str(value).strip() or None

    def features(self) -> frozenset[str] | None:
        """Features from kernel32.IsProcessorFeaturePresent."""
        windll = getattr(ctypes, "windll", None)
        if windll is None:
            return None
        present = windll.kernel32.IsProcessorFeaturePresent
        return frozenset(name for number, name in WINDOWS_FEATURES.items() if present(number))
