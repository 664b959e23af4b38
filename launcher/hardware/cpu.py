"""CPU brand, core counts and the instruction-set features engines care about.

Linux: /proc/cpuinfo (x86 `flags`, arm `Features`). macOS: sysctl (`machdep.cpu.*`,
`hw.optional.*`). Windows: registry brand string and IsProcessorFeaturePresent tiers.
Feature names are normalized to the lower-case Linux spellings listed in ENGINE_FEATURES.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from launcher.hardware.machine import CpuInfo
from launcher.hardware.sources import Sources

# The features llama.cpp / MLX builds branch on (x86 SIMD tiers, AMX, arm dot-product / SVE / matmul).
ENGINE_FEATURES = frozenset(
    {
        "sse4_2", "avx", "avx2", "fma", "f16c", "avx_vnni",
        "avx512f", "avx512bw", "avx512vl", "avx512_vnni", "avx512_bf16", "avx512_fp16",
        "amx_tile", "amx_int8", "amx_bf16",
        "neon", "dotprod", "fp16", "i8mm", "bf16", "sve", "sve2", "sme",
    }
)  # fmt: skip

# /proc/cpuinfo `Features` on arm64 uses its own names for some of them.
_ARM_LINUX_ALIASES = {"asimd": "neon", "asimddp": "dotprod", "asimdhp": "fp16"}

# macOS sysctl hw.optional.* keys -> feature (Apple Silicon and Intel Macs).
MAC_FEATURE_KEYS = {
    "hw.optional.neon": "neon",
    "hw.optional.AdvSIMD": "neon",
    "hw.optional.arm.FEAT_DotProd": "dotprod",
    "hw.optional.arm.FEAT_FP16": "fp16",
    "hw.optional.arm.FEAT_I8MM": "i8mm",
    "hw.optional.arm.FEAT_BF16": "bf16",
    "hw.optional.arm.FEAT_SME": "sme",
    "hw.optional.sse4_2": "sse4_2",
    "hw.optional.avx1_0": "avx",
    "hw.optional.avx2_0": "avx2",
    "hw.optional.fma": "fma",
    "hw.optional.f16c": "f16c",
    "hw.optional.avx512f": "avx512f",
    "hw.optional.avx512bw": "avx512bw",
    "hw.optional.avx512vl": "avx512vl",
    "hw.optional.avx512vnni": "avx512_vnni",
}
MAC_CPU_KEYS = (
    "machdep.cpu.brand_string", "hw.physicalcpu", "hw.logicalcpu", "hw.memsize", *MAC_FEATURE_KEYS,
)  # fmt: skip

# Brand names for arm cores that /proc/cpuinfo only reports as implementer/part numbers.
_ARM_PARTS = {
    ("0x41", "0xd03"): "ARM Cortex-A53",
    ("0x41", "0xd08"): "ARM Cortex-A72",
    ("0x41", "0xd0b"): "ARM Cortex-A76",
    ("0x41", "0xd0c"): "ARM Neoverse-N1",
    ("0x41", "0xd40"): "ARM Neoverse-V1",
    ("0x41", "0xd49"): "ARM Neoverse-N2",
    ("0x41", "0xd4f"): "ARM Neoverse-V2",
    ("0x41", "0xd8e"): "ARM Neoverse-N3",
    ("0x61", "0x022"): "Apple M1 (Icestorm)",
    ("0x61", "0x023"): "Apple M1 (Firestorm)",
}


@dataclass
class CpuReport:
    """The CPU answer plus what could not be seen."""

    cpu: CpuInfo
    unseen: list[str] = field(default_factory=list)


@dataclass(frozen=True)
class ProcCpuinfo:
    """The parts of /proc/cpuinfo the probe uses."""

    brand: str
    features: frozenset[str]
    logical_cores: int
    physical_cores: int | None


def normalize_arch(machine: str) -> str:
    """'AMD64'/'x86_64' -> 'x86_64'; 'aarch64'/'arm64' -> 'arm64'."""
    lowered = machine.lower()
    if lowered in {"amd64", "x86_64", "x64"}:
        return "x86_64"
    if lowered in {"aarch64", "arm64", "armv8l"}:
        return "arm64"
    return lowered


def parse_proc_cpuinfo(text: str) -> ProcCpuinfo:
    """Parse /proc/cpuinfo from an x86 or arm64 Linux kernel."""
    blocks = [block for block in text.split("\n\n") if block.strip()]
    processors: list[dict[str, str]] = []
    for block in blocks:
        entry: dict[str, str] = {}
        for line in block.splitlines():
            key, sep, value = line.partition(":")
            if sep:
                entry[key.strip().lower()] = value.strip()
        if "processor" in entry:
            processors.append(entry)
    first = processors[0] if processors else {}
    raw_flags = (first.get("flags") or first.get("features") or "").split()
    features = frozenset(_ARM_LINUX_ALIASES.get(flag, flag) for flag in raw_flags) & ENGINE_FEATURES
    brand = first.get("model name") or _arm_brand(first, text)
    # x86 lists (physical id, core id) per logical CPU; arm lists neither, so physical is unknown there.
    cores = {(p.get("physical id", "0"), p["core id"]) for p in processors if "core id" in p}
    return ProcCpuinfo(
        brand=brand,
        features=features,
        logical_cores=len(processors),
        physical_cores=len(cores) or None,
    )


def _arm_brand(first: dict[str, str], text: str) -> str:
    part = (first.get("cpu implementer", ""), first.get("cpu part", ""))
    if part in _ARM_PARTS:
        return _ARM_PARTS[part]
    for line in text.splitlines():  # Raspberry Pi kernels put the board name at the end
        if line.lower().startswith("model") and ":" in line:
            return line.partition(":")[2].strip()
    return "unknown arm64 CPU"


def parse_sysctl(text: str) -> dict[str, str]:
    """`sysctl key1 key2 ...` output ('key: value' lines) -> {key: value}."""
    values: dict[str, str] = {}
    for line in text.splitlines():
        key, sep, value = line.partition(":")
        if sep and key.strip():
            values[key.strip()] = value.strip()
    return values


def mac_features(values: dict[str, str]) -> frozenset[str]:
    """CPU features from sysctl hw.optional.* values ('1' means present)."""
    return frozenset(feature for key, feature in MAC_FEATURE_KEYS.items() if values.get(key) == "1")


def _cpu_counts(sources: Sources) -> tuple[int | None, int | None]:
    stats = sources.stats
    try:
        return stats.cpu_count(logical=False), stats.cpu_count(logical=True)
    except (OSError, RuntimeError):
        return None, None


def probe_cpu(sources: Sources, sysctl_values: dict[str, str] | None = None) -> CpuReport:
    """Detect the CPU; `sysctl_values` are the already-read macOS values (None elsewhere)."""
    facts = sources.platform
    arch = normalize_arch(facts.machine)
    physical, logical = _cpu_counts(sources)
    unseen: list[str] = []
    brand = facts.processor or "unknown CPU"
    features: frozenset[str] = frozenset()

    if facts.system == "Linux":
        text = sources.files.read_text("/proc/cpuinfo")
        if text:
            parsed = parse_proc_cpuinfo(text)
            brand, features = parsed.brand, parsed.features
            logical = logical or parsed.logical_cores
            physical = physical or parsed.physical_cores
        else:
            unseen.append("CPU: /proc/cpuinfo not readable, so CPU features are unknown")
    elif facts.system == "Darwin":
        values = sysctl_values or {}
        if values:
            brand = values.get("machdep.cpu.brand_string", brand)
            features = mac_features(values)
            physical = physical or _int_or_none(values.get("hw.physicalcpu"))
            logical = logical or _int_or_none(values.get("hw.logicalcpu"))
        else:
            unseen.append("CPU: sysctl not available, so CPU features are unknown")
    elif facts.system == "Windows":
        brand = sources.windows_cpu.brand() or brand
        windows_features = sources.windows_cpu.features()
        if windows_features is None:
            unseen.append("CPU: instruction-set features are not readable on this Windows machine")
        else:
            features = windows_features
            unseen.append("CPU: Windows reports only SSE4.2/AVX/AVX2/AVX-512F (FMA, F16C, VNNI unknown)")
    else:
        unseen.append(f"CPU: instruction-set features are not detected on {facts.system or 'this OS'}")

    if arch == "arm64" and facts.system != "Windows":
        features = features | {"neon"}  # Advanced SIMD is mandatory in ARMv8-A
    logical = logical or 1
    if physical is None:
        unseen.append("CPU: physical core count unknown; assuming one thread per core")
        physical = logical
    return CpuReport(
        cpu=CpuInfo(
            brand=brand,
            arch=arch,
            physical_cores=physical,
            logical_cores=logical,
            features=features,
        ),
        unseen=unseen,
    )


def _int_or_none(text: str | None) -> int | None:
    try:
        return int(text) if text is not None else None
    except ValueError:
        return None
