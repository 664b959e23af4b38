"""The bandwidth tables and matching of driver-reported names."""

from __future__ import annotations

import pytest

from launcher.hardware.tables import apple_chip_table, gpu_table, match_apple_chip, match_gpu, match_pci_device

GIB = 1024**3


@pytest.mark.parametrize(
    ("nvml_name", "memory_gib", "table_name", "bandwidth_gbs"),
    [
        ("NVIDIA GeForce RTX 4090", 24, "GeForce RTX 4090", 1008),
        ("NVIDIA GeForce RTX 4090 Laptop GPU", 16, "GeForce RTX 4090 Laptop GPU", 576),
        ("NVIDIA GeForce RTX 4080 SUPER", 16, "GeForce RTX 4080 Super", 736),
        ("NVIDIA GeForce RTX 3090", 24, "GeForce RTX 3090", 936),
        ("NVIDIA GeForce RTX 3090 Ti", 24, "GeForce RTX 3090 Ti", 1008),
        ("NVIDIA GeForce RTX 3060", 12, "GeForce RTX 3060 12GB", 360),
        ("NVIDIA GeForce RTX 3060", 8, "GeForce RTX 3060 8GB", 240),
        ("NVIDIA GeForce RTX 2080 Ti", 11, "GeForce RTX 2080 Ti", 616),
        ("NVIDIA GeForce RTX 5090", 32, "GeForce RTX 5090", 1792),
        ("NVIDIA H100 80GB HBM3", 79.6, "H100 SXM5", 3350),
        ("NVIDIA H100 PCIe", 79.6, "H100 PCIe", 2000),
        ("NVIDIA H100 NVL", 93.6, "H100 NVL", 3900),
        ("NVIDIA H200", 140.4, "H200 SXM", 4800),
        ("NVIDIA A100-SXM4-80GB", 80, "A100 SXM4 80GB", 2039),
        ("NVIDIA A100-PCIE-40GB", 40, "A100 PCIe 40GB", 1555),
        ("NVIDIA A100 80GB PCIe", 80, "A100 PCIe 80GB", 1935),
        ("NVIDIA A10", 24, "A10", 600),
        ("NVIDIA L40S", 48, "L40S", 864),
        ("NVIDIA RTX A6000", 48, "RTX A6000", 768),
        ("NVIDIA RTX 6000 Ada Generation", 48, "RTX 6000 Ada Generation", 960),
        ("Quadro RTX 6000", 24, "Quadro RTX 6000", 672),
        ("Tesla T4", 15, "Tesla T4", 320),
        ("Tesla V100-SXM2-16GB", 16, "Tesla V100 SXM2", 900),
        ("NVIDIA GeForce GTX 1080 Ti", 11, "GeForce GTX 1080 Ti", 484),
    ],
)
def test_nvml_names_match_the_right_row(
    nvml_name: str, memory_gib: float, table_name: str, bandwidth_gbs: float
) -> None:
    spec = match_gpu(nvml_name, int(memory_gib * GIB), vendor="nvidia")
    assert spec is not None, nvml_name
    assert (spec.name, spec.bandwidth_gbs) == (table_name, bandwidth_gbs)


def test_compute_capabilities_by_generation() -> None:
    expected = {"GeForce RTX 2080 Ti": (7, 5), "GeForce RTX 3090": (8, 6), "A100 SXM4 80GB": (8, 0),
                "GeForce RTX 4090": (8, 9), "H100 SXM5": (9, 0), "GeForce RTX 5090": (12, 0),
                "GeForce GTX 1080 Ti": (6, 1)}  # fmt: skip
    by_name = {spec.name: spec for spec in gpu_table()}
    assert {name: by_name[name].compute_capability for name in expected} == expected


def test_unknown_names_do_not_match() -> None:
    assert match_gpu("NVIDIA Graphics Device") is None
    assert match_gpu("NVIDIA GeForce RTX 3060", 6 * GIB) is None  # no 6 GB desktop 3060 in the table


def test_every_row_has_a_source_and_sane_numbers() -> None:
    for spec in gpu_table():
        assert spec.source.strip(), spec.name
        assert 100 <= spec.bandwidth_gbs <= 10_000, spec.name
        assert spec.fp16_tflops is None or 1 <= spec.fp16_tflops <= 3000, spec.name
    for chip in apple_chip_table():
        assert chip.source.strip() and chip.gpu_cores_min <= chip.gpu_cores_max


def test_amd_cards_by_pci_id_and_memory() -> None:
    xtx = match_pci_device("amd", "0x744c", 24 * GIB)
    xt = match_pci_device("amd", "0x744C", 20 * GIB)
    assert xtx is not None and xtx.name == "Radeon RX 7900 XTX" and xtx.bandwidth_gbs == 960
    assert xt is not None and xt.name == "Radeon RX 7900 XT"
    assert match_gpu("AMD Instinct MI300X", 192 * GIB, vendor="amd") is not None


def test_apple_chip_lookup() -> None:
    ultra = match_apple_chip("Apple M3 Ultra", 80)
    assert ultra is not None and ultra.bandwidth_gbs == 819
    m4_max = match_apple_chip("Apple M4 Max", 40)
    assert m4_max is not None and m4_max.bandwidth_gbs == 546
    assert match_apple_chip("Apple M1", None) is not None
    assert match_apple_chip("Apple M7", 10) is None
