"""Small hand-built machines for hand-checked advisor numbers (recorded machines live in launcher/resources/)."""

from __future__ import annotations

from launcher.core.units import GIB
from launcher.hardware.machine import AppleSilicon, CpuInfo, GpuInfo, Machine, MemoryInfo

AVX2 = frozenset({"sse4_2", "avx", "avx2", "fma", "f16c"})


def desktop_4090(ram_gib: int = 64, vram_free_gib: float = 23.0) -> Machine:
    """A Ryzen desktop with one RTX 4090 (24 GiB, 1008 GB/s)."""
    return Machine(
        os="linux",
        os_version="6.8",
        cpu=CpuInfo("AMD Ryzen 9 7950X", "x86_64", 16, 32, AVX2 | {"avx512f"}, memory_bandwidth=80e9),
        memory=MemoryInfo(ram_gib * GIB, int((ram_gib - 4) * GIB)),
        gpus=(
            GpuInfo(
                0,
                "nvidia",
                "NVIDIA GeForce RTX 4090",
                24 * GIB,
                int(vram_free_gib * GIB),
                (8, 9),
                memory_bandwidth=1008e9,
                fp16_tflops=165.0,
            ),
        ),
        name="test 4090",
    )


def laptop_cpu(ram_gib: int = 16) -> Machine:
    """A CPU-only AVX2 laptop."""
    return Machine(
        os="linux",
        os_version="6.8",
        cpu=CpuInfo("Intel Core i7-1165G7", "x86_64", 4, 8, AVX2, memory_bandwidth=50e9),
        memory=MemoryInfo(ram_gib * GIB, int(ram_gib * 0.7 * GIB)),
        name="test laptop",
    )


def macbook_m2(ram_gib: int = 16) -> Machine:
    """A MacBook Air M2: 100 GB/s unified memory, GPU may wire ~2/3."""
    return Machine(
        os="darwin",
        os_version="15.1",
        cpu=CpuInfo("Apple M2", "arm64", 8, 8, frozenset({"neon", "dotprod"}), memory_bandwidth=100e9),
        memory=MemoryInfo(ram_gib * GIB, int(ram_gib * 0.75 * GIB)),
        apple=AppleSilicon("Apple M2", 10, ram_gib * GIB, 100e9, int(ram_gib * 2 / 3 * GIB), 3.6),
        name="test m2",
    )


def turing_2080ti() -> Machine:
    """An RTX 2080 Ti (11 GiB, compute capability 7.5)."""
    return Machine(
        os="linux",
        os_version="6.8",
        cpu=CpuInfo("Intel Core i9-9900K", "x86_64", 8, 16, AVX2, memory_bandwidth=40e9),
        memory=MemoryInfo(32 * GIB, 28 * GIB),
        gpus=(
            GpuInfo(
                0,
                "nvidia",
                "NVIDIA GeForce RTX 2080 Ti",
                11 * GIB,
                int(10.5 * GIB),
                (7, 5),
                memory_bandwidth=616e9,
                fp16_tflops=107.0,
            ),
        ),
    )
