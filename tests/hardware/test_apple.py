"""Apple Silicon: chip table lookup, GPU cores from system_profiler/ioreg, the GPU wired-memory limit."""

from __future__ import annotations

import json

import pytest

from launcher.hardware.apple import default_wired_limit, parse_gpu_cores, probe_apple, wired_limit
from launcher.hardware.cpu import parse_sysctl
from tests.hardware.fakes import GIB, FakeCommands
from tests.hardware.raw_machines import RAW_DIR


def m2_values() -> dict[str, str]:
    return parse_sysctl((RAW_DIR / "m2-macbook-air.sysctl").read_text())


def profiler(cores: int) -> str:
    return json.dumps({"SPDisplaysDataType": [{"_name": "Apple M3 Max", "sppci_cores": str(cores)}]})


def test_m2_air_default_wired_limit_is_two_thirds_of_ram() -> None:
    report = probe_apple(m2_values(), FakeCommands({"system_profiler": profiler(10)}))
    apple = report.apple
    assert apple is not None
    assert (apple.chip, apple.gpu_cores, apple.unified_memory) == ("Apple M2", 10, 16 * GIB)
    assert apple.memory_bandwidth == 100e9
    assert apple.gpu_wired_limit == pytest.approx(16 * GIB * 2 / 3, abs=1)
    assert apple.fp16_tflops == pytest.approx(3.6)
    assert report.unseen == []


def test_big_macs_default_to_three_quarters() -> None:
    assert default_wired_limit(192 * GIB) == 144 * GIB
    assert default_wired_limit(36 * GIB) == 24 * GIB


def test_iogpu_wired_limit_override_wins() -> None:
    values = {**m2_values(), "iogpu.wired_limit_mb": "14336"}
    assert wired_limit(values, 16 * GIB) == 14 * GIB
    legacy = {"debug.iogpu.wired_limit": str(12 * GIB)}
    assert wired_limit(legacy, 16 * GIB) == 12 * GIB


@pytest.mark.parametrize(("cores", "bandwidth"), [(30, 300e9), (40, 400e9)])
def test_m3_max_bandwidth_depends_on_gpu_cores(cores: int, bandwidth: float) -> None:
    values = {"machdep.cpu.brand_string": "Apple M3 Max", "hw.memsize": str(64 * GIB), "iogpu.wired_limit_mb": "0"}
    apple = probe_apple(values, FakeCommands({"system_profiler": profiler(cores)})).apple
    assert apple is not None and apple.memory_bandwidth == bandwidth


def test_gpu_cores_fall_back_to_ioreg_then_to_a_note() -> None:
    ioreg = '+-o AGXAcceleratorG14X  <class AGXAcceleratorG14X>\n    "gpu-core-count" = 38\n'
    assert parse_gpu_cores(None, ioreg) == 38
    values = {"machdep.cpu.brand_string": "Apple M3 Max", "hw.memsize": str(48 * GIB)}
    report = probe_apple(values, FakeCommands({}))  # neither command exists
    assert report.apple is not None and report.apple.gpu_cores is None
    assert report.apple.memory_bandwidth == 300e9  # the smaller variant, said so below
    assert any("core count not readable" in note for note in report.unseen)
    assert any("assuming the smallest Apple M3 Max" in note for note in report.unseen)
    assert any("wired-memory limit not readable" in note for note in report.unseen)


def test_unknown_chip_has_unknown_bandwidth() -> None:
    values = {"machdep.cpu.brand_string": "Apple M9 Hyper", "hw.memsize": str(32 * GIB), "iogpu.wired_limit_mb": "0"}
    report = probe_apple(values, FakeCommands({"system_profiler": profiler(64)}))
    assert report.apple is not None and report.apple.memory_bandwidth is None
    assert "not in apple_chips.csv" in report.unseen[0]
