"""NVIDIA detection through an NVML double that raises the real pynvml error classes."""

from __future__ import annotations

from typing import Any

import pynvml
import pytest

from launcher.hardware.nvidia import probe_nvidia
from tests.hardware.fakes import GIB, FakeGpu, FakeNvml, missing_pynvml

RTX4090 = FakeGpu("NVIDIA GeForce RTX 4090", 24564, 1139, (8, 9), "00000000:01:00.0", 384, 10501, (4, 16))


def loader(nvml: FakeNvml) -> Any:
    return lambda: nvml


def test_real_pynvml_on_a_machine_without_driver_says_so() -> None:
    # This machine has nvidia-ml-py but no libnvidia-ml: the real module must produce the note.
    try:
        pynvml.nvmlInit()
    except pynvml.NVMLError:
        pass
    else:
        pynvml.nvmlShutdown()
        pytest.skip("this machine has a working NVIDIA driver")
    report = probe_nvidia(lambda: pynvml)
    assert report.gpus == []
    assert report.unseen == ["NVIDIA: NVML library not found (no NVIDIA driver)"]


def test_missing_package_is_reported() -> None:
    report = probe_nvidia(missing_pynvml)
    assert report.gpus == []
    assert "pynvml" in report.unseen[0] and "not installed" in report.unseen[0]


@pytest.mark.parametrize(
    ("code", "words"),
    [
        (pynvml.NVML_ERROR_LIBRARY_NOT_FOUND, "NVML library not found"),
        (pynvml.NVML_ERROR_DRIVER_NOT_LOADED, "driver is installed but not loaded"),
        (pynvml.NVML_ERROR_NO_PERMISSION, "no permission"),
        (pynvml.NVML_ERROR_UNKNOWN, "NVML failed to start"),
    ],
)
def test_init_failures_become_notes(code: int, words: str) -> None:
    report = probe_nvidia(loader(FakeNvml([RTX4090], init_error=code)))
    assert report.gpus == []
    assert len(report.unseen) == 1 and words in report.unseen[0]


def test_rtx4090_is_described_from_nvml_and_the_table() -> None:
    nvml = FakeNvml([RTX4090])
    report = probe_nvidia(loader(nvml))
    (gpu,) = report.gpus
    assert gpu.name == "NVIDIA GeForce RTX 4090"
    assert gpu.memory_total == 24564 * 1024**2
    assert gpu.memory_free == (24564 - 1139) * 1024**2
    assert gpu.compute_capability == (8, 9)
    assert gpu.memory_bandwidth == 1008e9
    assert gpu.fp16_tflops == pytest.approx(165.2)
    assert gpu.link == "PCIe 4.0 x16"
    assert gpu.nvlink_peers == ()
    assert (report.driver_version, report.cuda_driver_version) == ("550.54.15", "12.4")
    assert report.unseen == []
    assert nvml.shutdowns == 1


def test_not_supported_queries_degrade_to_unknown_link_and_table_values() -> None:
    nvml = FakeNvml(
        [RTX4090],
        not_supported=frozenset(
            {
                "nvmlDeviceGetMaxPcieLinkGeneration",
                "nvmlDeviceGetMemoryBusWidth",
                "nvmlDeviceGetCudaComputeCapability",
                "nvmlSystemGetCudaDriverVersion",
            }
        ),
    )
    (gpu,) = probe_nvidia(loader(nvml)).gpus
    assert gpu.link is None
    assert gpu.compute_capability == (8, 9)  # from gpus.csv
    assert gpu.memory_bandwidth == 1008e9


def test_unknown_card_gets_bandwidth_from_bus_width_and_memory_clock() -> None:
    card = FakeGpu("NVIDIA Future GPU 9000", 49152, 0, (13, 0), "00000000:02:00.0", 512, 15000, (6, 16))
    report = probe_nvidia(loader(FakeNvml([card])))
    (gpu,) = report.gpus
    assert gpu.memory_bandwidth == pytest.approx(15000e6 * 2 * 512 / 8)
    assert gpu.fp16_tflops is None
    assert "not in gpus.csv" in report.unseen[0]


def test_unknown_card_without_clock_queries_has_unknown_bandwidth() -> None:
    card = FakeGpu("NVIDIA Future GPU 9000", 49152, 0, None, "00000000:02:00.0")
    report = probe_nvidia(loader(FakeNvml([card])))
    assert report.gpus[0].memory_bandwidth is None
    assert report.gpus[0].compute_capability is None
    assert "bandwidth unknown" in report.unseen[0]


def test_a_gpu_refusing_its_handle_is_skipped_with_a_note() -> None:
    locked = FakeGpu(
        "NVIDIA GeForce RTX 4090", 24564, 0, (8, 9), "00000000:02:00.0", handle_error=pynvml.NVML_ERROR_NO_PERMISSION
    )
    report = probe_nvidia(loader(FakeNvml([RTX4090, locked])))
    assert [gpu.index for gpu in report.gpus] == [0]
    assert report.unseen == ["NVIDIA GPU 1: not accessible (permission denied or GPU lost)"]


def test_memory_query_refused_skips_the_gpu() -> None:
    report = probe_nvidia(loader(FakeNvml([RTX4090], not_supported=frozenset({"nvmlDeviceGetMemoryInfo"}))))
    assert report.gpus == []
    assert "memory size not readable" in report.unseen[0]


def test_nvlink_bridge_pairs_two_3090s() -> None:
    bus0, bus1 = "00000000:17:00.0", "00000000:65:00.0"
    gpus = [
        FakeGpu("NVIDIA GeForce RTX 3090", 24576, 400, (8, 6), bus0, nvlinks=[bus1] * 4),
        FakeGpu("NVIDIA GeForce RTX 3090", 24576, 0, (8, 6), bus1, nvlinks=[bus0] * 4),
    ]
    report = probe_nvidia(loader(FakeNvml(gpus)))
    assert [(gpu.link, gpu.nvlink_peers) for gpu in report.gpus] == [("NVLink x4", (1,)), ("NVLink x4", (0,))]


def test_nvlink_capable_card_without_a_bridge_reports_pcie() -> None:
    card = FakeGpu("NVIDIA GeForce RTX 3090", 24576, 0, (8, 6), "00000000:17:00.0", pcie=(4, 16), nvlink_capable=True)
    (gpu,) = probe_nvidia(loader(FakeNvml([card]))).gpus
    assert (gpu.link, gpu.nvlink_peers) == ("PCIe 4.0 x16", ())


def test_nvswitch_connects_every_gpu_to_every_other() -> None:
    gpus = [
        FakeGpu("NVIDIA H100 80GB HBM3", 81559, 0, (9, 0), f"00000000:{bus}:00.0", nvlinks=["switch"] * 18)
        for bus in ("18", "2A", "3A", "5D")
    ]
    report = probe_nvidia(loader(FakeNvml(gpus)))
    assert report.gpus[2].link == "NVLink x18 (NVSwitch)"
    assert report.gpus[2].nvlink_peers == (0, 1, 3)
    assert report.gpus[0].memory_bandwidth == 3350e9
    assert report.gpus[0].memory_total / GIB == pytest.approx(79.6, abs=0.1)
