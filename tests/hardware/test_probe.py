"""The probe on this real machine, and its fallbacks when sources fail."""

from __future__ import annotations

import os
from pathlib import Path
from types import SimpleNamespace

import pynvml

from launcher.hardware.probe import probe_machine, probe_machine_uncached
from launcher.hardware.sources import DiskUsage, PlatformFacts, Sources
from tests.hardware.fakes import GIB, FakeGpu, FakeNvml, FakeStats, make_sources

LINUX = PlatformFacts(system="Linux", machine="x86_64", release="6.8.0")


def test_this_machine_gives_a_complete_answer() -> None:
    machine = probe_machine_uncached()
    assert machine.os in {"linux", "darwin", "windows"}
    assert machine.cpu.physical_cores > 0 and machine.cpu.logical_cores >= machine.cpu.physical_cores
    assert machine.cpu.brand
    assert machine.memory.total > 0 and 0 < machine.memory.available <= machine.memory.total
    assert machine.disk_free is not None and machine.disk_free > 0
    # conftest points the HF cache at a tmp dir that may not exist yet: the probe walks up to one that does.
    assert machine.models_dir == os.environ["HF_HUB_CACHE"]
    if not machine.gpus and not machine.is_apple_silicon:
        assert any(note.startswith("NVIDIA") for note in machine.unseen)


def test_probe_machine_is_cached() -> None:
    assert probe_machine() is probe_machine()


def test_disk_free_walks_up_to_an_existing_folder(tmp_path: Path) -> None:
    asked: list[str] = []

    def disk_usage(path: str) -> DiskUsage:
        asked.append(path)
        if not Path(path).exists():
            raise FileNotFoundError(path)
        return DiskUsage(100 * GIB, 58 * GIB, 42 * GIB)

    base = make_sources(tmp_path, platform=LINUX, stats=FakeStats(8 * GIB, 4 * GIB, 4, 8))
    missing = tmp_path / "hf" / "hub"
    sources = Sources(**{**base.__dict__, "disk_usage": disk_usage, "models_dir": lambda: missing})
    machine = probe_machine_uncached(sources)
    assert machine.disk_free == 42 * GIB
    assert machine.models_dir == str(missing)
    assert asked == [str(missing), str(missing.parent), str(tmp_path)]


def test_unreadable_disk_is_a_note(tmp_path: Path) -> None:
    def disk_usage(path: str) -> DiskUsage:
        raise PermissionError(13, "Permission denied")

    base = make_sources(tmp_path, platform=LINUX, stats=FakeStats(8 * GIB, 4 * GIB, 4, 8))
    machine = probe_machine_uncached(Sources(**{**base.__dict__, "disk_usage": disk_usage}))
    assert machine.disk_free is None
    assert any("Permission denied" in note for note in machine.unseen)


def test_psutil_failure_falls_back_to_proc_meminfo(tmp_path: Path) -> None:
    class BrokenStats(FakeStats):
        def virtual_memory(self) -> SimpleNamespace:
            raise OSError("psutil cannot read /proc")

    meminfo = "MemTotal:       16307140 kB\nMemFree:         1000000 kB\nMemAvailable:    9123456 kB\n"
    sources = make_sources(tmp_path, platform=LINUX, stats=BrokenStats(0, 0, 4, 8), files={"/proc/meminfo": meminfo})
    machine = probe_machine_uncached(sources)
    assert (machine.memory.total, machine.memory.available) == (16307140 * 1024, 9123456 * 1024)


def test_nvidia_card_on_the_bus_without_nvml_is_explained(tmp_path: Path) -> None:
    files: dict[str, str | bytes] = {
        "/sys/class/drm/card0/device/vendor": "0x10de\n",
        "/sys/class/drm/card0/device/device": "0x2684\n",
    }
    sources = make_sources(
        tmp_path,
        platform=LINUX,
        stats=FakeStats(8 * GIB, 4 * GIB, 4, 8),
        files=files,
        nvml=FakeNvml([], init_error=pynvml.NVML_ERROR_DRIVER_NOT_LOADED),
    )
    machine = probe_machine_uncached(sources)
    assert machine.gpus == ()
    assert any("on the PCI bus but NVML cannot see it" in note for note in machine.unseen)
    assert any("not loaded" in note for note in machine.unseen)


def test_nvidia_and_amd_gpus_get_distinct_indexes(tmp_path: Path) -> None:
    files: dict[str, str | bytes] = {
        "/sys/class/drm/card1/device/vendor": "0x1002\n",
        "/sys/class/drm/card1/device/device": "0x744c\n",
        "/sys/class/drm/card1/device/mem_info_vram_total": f"{24 * GIB}\n",
    }
    nvml = FakeNvml([FakeGpu("NVIDIA GeForce RTX 3090", 24576, 0, (8, 6), "00000000:01:00.0")])
    machine = probe_machine_uncached(
        make_sources(tmp_path, platform=LINUX, stats=FakeStats(8 * GIB, 4 * GIB, 4, 8), files=files, nvml=nvml)
    )
    assert [(g.index, g.vendor) for g in machine.gpus] == [(0, "nvidia"), (1, "amd")]
    assert machine.nvidia_driver_version == "550.54.15" and machine.cuda_driver_version == "12.4"


def test_windows_probe_is_complete_with_notes(tmp_path: Path) -> None:
    windows = PlatformFacts(system="Windows", machine="AMD64", release="10", processor="Intel64 Family 6 Model 183")
    machine = probe_machine_uncached(
        make_sources(tmp_path, platform=windows, stats=FakeStats(32 * GIB, 20 * GIB, 8, 16))
    )
    assert machine.os == "windows" and machine.os_version == "Windows 10"
    assert machine.cpu.physical_cores == 8
    notes = " | ".join(machine.unseen)
    assert "NVML library not found" in notes and "AMD/Intel GPUs: not detected on Windows" in notes
