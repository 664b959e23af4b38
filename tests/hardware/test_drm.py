"""AMD and Intel GPUs from a recorded /sys/class/drm tree."""

from __future__ import annotations

from pathlib import Path

from launcher.hardware.drm import probe_drm
from tests.hardware.fakes import GIB, write_tree


def card(n: int, vendor: str, device: str, vram: int | None = None, used: int = 0) -> dict[str, str | bytes]:
    base = f"/sys/class/drm/card{n}/device"
    files: dict[str, str | bytes] = {f"{base}/vendor": f"{vendor}\n", f"{base}/device": f"{device}\n"}
    if vram is not None:
        files[f"{base}/mem_info_vram_total"] = f"{vram}\n"
        files[f"{base}/mem_info_vram_used"] = f"{used}\n"
    return files


def test_radeon_7900_xtx_with_vram_and_table_bandwidth(tmp_path: Path) -> None:
    files = {**card(1, "0x1002", "0x744c", 24 * GIB, 2 * GIB), "/sys/class/drm/card1-DP-1/status": "connected\n"}
    report = probe_drm(write_tree(tmp_path, files), first_index=0)
    (gpu,) = report.gpus
    assert (gpu.vendor, gpu.name, gpu.index) == ("amd", "Radeon RX 7900 XTX", 0)
    assert (gpu.memory_total, gpu.memory_free) == (24 * GIB, 22 * GIB)
    assert gpu.memory_bandwidth == 960e9
    assert report.unseen == []


def test_apu_carve_out_and_plain_intel_igpu_are_not_listed(tmp_path: Path) -> None:
    files = {**card(0, "0x1002", "0x1638", 512 * 1024**2), **card(1, "0x8086", "0x46a6")}
    report = probe_drm(write_tree(tmp_path, files))
    assert report.gpus == []
    assert len(report.unseen) == 2
    assert "integrated GPU (512 MiB carve-out)" in report.unseen[0]


def test_intel_arc_uses_the_documented_size(tmp_path: Path) -> None:
    report = probe_drm(write_tree(tmp_path, card(0, "0x8086", "0x56a0")), first_index=2)
    (gpu,) = report.gpus
    assert (gpu.vendor, gpu.name, gpu.index, gpu.memory_total) == ("intel", "Arc A770", 2, 16 * GIB)
    assert "assuming 16 GB" in report.unseen[0]


def test_nvidia_cards_are_only_flagged(tmp_path: Path) -> None:
    report = probe_drm(write_tree(tmp_path, card(0, "0x10de", "0x2684")))
    assert report.gpus == [] and report.nvidia_present


def test_no_drm_folder_means_nothing(tmp_path: Path) -> None:
    report = probe_drm(write_tree(tmp_path, {}))
    assert (report.gpus, report.nvidia_present, report.unseen) == ([], False, [])
