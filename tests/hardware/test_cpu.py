"""CPU detection from recorded /proc/cpuinfo texts and macOS sysctl output."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from launcher.hardware.cpu import mac_features, parse_proc_cpuinfo, parse_sysctl, probe_cpu
from launcher.hardware.sources import PlatformFacts
from launcher.hardware.windows import LiveWindowsCpu
from tests.hardware.fakes import GIB, FakeStats, FakeWindowsCpu, cpuinfo_x86, make_sources
from tests.hardware.raw_machines import COFFEE_LAKE, RAW_DIR, SANDY_BRIDGE, ZEN4

LINUX = PlatformFacts(system="Linux", machine="x86_64", release="6.8.0")


def test_recorded_xeon_cpuinfo_gives_brand_and_avx512_amx_features() -> None:
    parsed = parse_proc_cpuinfo((RAW_DIR / "xeon-vm.cpuinfo").read_text())
    assert parsed.brand == "Intel(R) Xeon(R) Processor"
    assert parsed.logical_cores == 2
    assert parsed.physical_cores == 2
    assert {"sse4_2", "avx", "avx2", "fma", "f16c", "avx512f", "avx512_vnni", "avx512_bf16"} <= parsed.features
    assert {"amx_tile", "amx_int8", "amx_bf16"} <= parsed.features
    # Only features engines branch on are kept, not every kernel flag.
    assert "pclmulqdq" not in parsed.features


def test_sandy_bridge_has_avx_but_no_avx2_fma_or_f16c() -> None:
    parsed = parse_proc_cpuinfo(cpuinfo_x86("Intel(R) Core(TM) i5-2500K", SANDY_BRIDGE, sockets=1, cores=4, threads=1))
    assert parsed.features == {"sse4_2", "avx"}


def test_smt_topology_counts_physical_cores_per_socket_and_core_id() -> None:
    text = cpuinfo_x86("Intel(R) Xeon(R) Platinum 8480+", COFFEE_LAKE, sockets=2, cores=56, threads=2)
    parsed = parse_proc_cpuinfo(text)
    assert (parsed.physical_cores, parsed.logical_cores) == (112, 224)


def test_arm_features_line_maps_to_engine_names() -> None:
    parsed = parse_proc_cpuinfo((RAW_DIR / "graviton3.cpuinfo").read_text())
    assert parsed.brand == "ARM Neoverse-V1"
    assert {"neon", "dotprod", "fp16", "sve", "i8mm", "bf16"} <= parsed.features
    assert "asimd" not in parsed.features
    assert parsed.physical_cores is None  # arm kernels do not list core ids


def test_raspberry_pi_brand_comes_from_the_model_line() -> None:
    parsed = parse_proc_cpuinfo((RAW_DIR / "raspberry-pi-4.cpuinfo").read_text())
    assert parsed.brand == "ARM Cortex-A72"
    assert parsed.features == {"neon"}
    assert parsed.logical_cores == 2


def test_probe_falls_back_to_cpuinfo_counts_when_psutil_has_none(tmp_path: Path) -> None:
    text = cpuinfo_x86("AMD Ryzen 9 7950X 16-Core Processor", ZEN4, sockets=1, cores=16, threads=2)
    sources = make_sources(
        tmp_path, platform=LINUX, stats=FakeStats(64 * GIB, 50 * GIB, None, None), files={"/proc/cpuinfo": text}
    )
    report = probe_cpu(sources)
    assert (report.cpu.physical_cores, report.cpu.logical_cores) == (16, 32)
    assert report.cpu.has("AVX512F") and report.cpu.has("avx512_bf16")
    assert report.unseen == []


def test_missing_cpuinfo_is_reported_not_fatal(tmp_path: Path) -> None:
    sources = make_sources(tmp_path, platform=LINUX, stats=FakeStats(8 * GIB, 4 * GIB, None, 4))
    report = probe_cpu(sources)
    assert report.cpu.logical_cores == 4 and report.cpu.physical_cores == 4
    assert any("/proc/cpuinfo not readable" in note for note in report.unseen)
    assert any("physical core count unknown" in note for note in report.unseen)


def test_mac_sysctl_features_for_m2() -> None:
    values = parse_sysctl((RAW_DIR / "m2-macbook-air.sysctl").read_text())
    assert values["machdep.cpu.brand_string"] == "Apple M2"
    assert mac_features(values) == {"neon", "dotprod", "fp16", "i8mm", "bf16"}  # FEAT_SME is 0 on M2


def test_windows_brand_and_feature_tiers(tmp_path: Path) -> None:
    windows = PlatformFacts(system="Windows", machine="AMD64", release="11", processor="Intel64 Family 6")
    cpu = FakeWindowsCpu("13th Gen Intel(R) Core(TM) i7-13700K", frozenset({"sse4_2", "avx", "avx2"}))
    sources = make_sources(tmp_path, platform=windows, stats=FakeStats(32 * GIB, 20 * GIB, 16, 24), windows_cpu=cpu)
    report = probe_cpu(sources)
    assert report.cpu.brand == "13th Gen Intel(R) Core(TM) i7-13700K"
    assert report.cpu.arch == "x86_64"
    assert report.cpu.features == {"sse4_2", "avx", "avx2"}
    assert any("FMA, F16C, VNNI unknown" in note for note in report.unseen)


def test_windows_without_answers_keeps_platform_brand_and_says_so(tmp_path: Path) -> None:
    windows = PlatformFacts(system="Windows", machine="AMD64", release="11", processor="Intel64 Family 6")
    sources = make_sources(
        tmp_path,
        platform=windows,
        stats=FakeStats(16 * GIB, 8 * GIB, 8, 16),
        windows_cpu=FakeWindowsCpu(None, None),
    )
    report = probe_cpu(sources)
    assert report.cpu.brand == "Intel64 Family 6"
    assert report.cpu.features == frozenset()
    assert any("not readable on this Windows machine" in note for note in report.unseen)


def test_live_windows_source_answers_none_off_windows() -> None:
    if sys.platform == "win32":
        pytest.skip("only meaningful off Windows")
    assert LiveWindowsCpu().brand() is None and LiveWindowsCpu().features() is None
