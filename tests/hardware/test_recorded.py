"""Recorded machines: all load, round-trip through JSON, match the probe's reading of their raw sources."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from launcher.core.errors import ConfigError
from launcher.hardware.machine import Machine
from launcher.hardware.recorded import load_recorded, recorded_dir, recorded_names
from tests.hardware.raw_machines import RAW_MACHINES
from tests.hardware.record_fixtures import FIXTURES_DIR, machine_text, probe_raw

GIB = 1024**3
REQUIRED = {
    "macbook-air-m2-16gb", "mac-studio-m3-ultra-192gb", "rtx4090-desktop", "2x-rtx3090-nvlink", "4x-rtx4090",
    "cpu-avx2-laptop-16gb", "old-cpu-no-avx2", "8x-h100-server", "rtx2080ti", "this-linux-vm",
}  # fmt: skip


def test_required_machines_are_recorded() -> None:
    assert set(recorded_names()) >= REQUIRED


@pytest.mark.parametrize("name", sorted(REQUIRED))
def test_each_machine_loads_and_round_trips(name: str) -> None:
    machine = load_recorded(name)
    assert machine.cpu.logical_cores >= machine.cpu.physical_cores > 0
    assert machine.memory.total >= machine.memory.available > 0
    assert Machine.from_json(json.loads(json.dumps(machine.to_json()))) == machine


@pytest.mark.parametrize("name", sorted(REQUIRED))
def test_test_fixture_copy_matches_the_resource(name: str) -> None:
    assert (FIXTURES_DIR / f"{name}.json").read_text() == (recorded_dir() / f"{name}.json").read_text()


@pytest.mark.parametrize("name", sorted(RAW_MACHINES))
def test_recorded_json_is_what_the_probe_makes_of_the_raw_sources(name: str, tmp_path: Path) -> None:
    probed = probe_raw(name, tmp_path)
    assert probed == load_recorded(name)
    assert machine_text(probed) == (recorded_dir() / f"{name}.json").read_text(), (
        "regenerate with: python -m tests.hardware.record_fixtures"
    )


def test_unknown_name_lists_the_known_ones() -> None:
    with pytest.raises(ConfigError, match="rtx4090-desktop"):
        load_recorded("no-such-machine")


def test_recorded_values_are_realistic() -> None:
    h100 = load_recorded("8x-h100-server")
    assert len(h100.nvidia_gpus) == 8
    assert all(g.compute_capability == (9, 0) and g.memory_bandwidth == 3350e9 for g in h100.gpus)
    assert h100.gpus[0].nvlink_peers == (1, 2, 3, 4, 5, 6, 7)
    assert h100.cpu.has("amx_tile") and h100.cpu.physical_cores == 112

    turing = load_recorded("rtx2080ti").gpus[0]
    assert turing.compute_capability == (7, 5) and round(turing.memory_total / GIB) == 11

    pair = load_recorded("2x-rtx3090-nvlink").gpus
    assert [g.nvlink_peers for g in pair] == [(1,), (0,)]

    old = load_recorded("old-cpu-no-avx2").cpu
    assert old.has("avx") and not old.has("avx2") and not old.has("fma")

    laptop = load_recorded("cpu-avx2-laptop-16gb")
    assert laptop.gpus == () and laptop.cpu.has("avx2") and not laptop.cpu.has("avx512f")

    air = load_recorded("macbook-air-m2-16gb")
    assert air.apple is not None and air.apple.memory_bandwidth == 100e9
    assert air.apple.gpu_wired_limit < air.memory.total * 0.7

    studio = load_recorded("mac-studio-m3-ultra-192gb")
    assert studio.apple is not None and studio.apple.gpu_wired_limit == 144 * GIB
    assert studio.apple.memory_bandwidth == 819e9
