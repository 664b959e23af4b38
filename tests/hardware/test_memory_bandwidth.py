"""RAM bandwidth from recorded SMBIOS type 17 records."""

from __future__ import annotations

from pathlib import Path

import pytest

from launcher.hardware.memory_bandwidth import parse_memory_device, probe_memory_bandwidth
from tests.hardware.fakes import smbios_memory_device, smbios_tree, write_tree


def test_record_fields_are_decoded() -> None:
    raw = smbios_memory_device(size_mb=32768, speed_mts=5600, configured_mts=5200, memory_type=0x22,
                               device_locator="DIMM_A2", bank_locator="P0 CHANNEL A")  # fmt: skip
    device = parse_memory_device(raw)
    assert device is not None
    assert (device.memory_type, device.speed_mts, device.data_width_bits) == ("DDR5", 5200, 64)
    assert (device.device_locator, device.bank_locator) == ("DIMM_A2", "P0 CHANNEL A")


def test_empty_slot_is_ignored() -> None:
    assert parse_memory_device(smbios_memory_device(size_mb=0, speed_mts=0)) is None


def test_dual_channel_ddr5_with_empty_slots(tmp_path: Path) -> None:
    records = [
        smbios_memory_device(size_mb=0, speed_mts=0, device_locator="DIMM_A1", bank_locator="P0 CHANNEL A"),
        smbios_memory_device(size_mb=32768, speed_mts=5600, memory_type=0x22, device_locator="DIMM_A2",
                             bank_locator="P0 CHANNEL A"),
        smbios_memory_device(size_mb=0, speed_mts=0, device_locator="DIMM_B1", bank_locator="P0 CHANNEL B"),
        smbios_memory_device(size_mb=32768, speed_mts=5600, memory_type=0x22, device_locator="DIMM_B2",
                             bank_locator="P0 CHANNEL B"),
    ]  # fmt: skip
    bandwidth, note = probe_memory_bandwidth(write_tree(tmp_path, smbios_tree(records)), "Linux")
    assert bandwidth == pytest.approx(2 * 8 * 5600e6)
    assert note is None


def test_two_dimms_per_channel_count_once(tmp_path: Path) -> None:
    records = [
        smbios_memory_device(size_mb=16384, speed_mts=3200, device_locator=f"ChannelA-DIMM{n}", bank_locator="BANK 0")
        for n in (0, 1)
    ] + [
        smbios_memory_device(size_mb=16384, speed_mts=3200, device_locator=f"ChannelB-DIMM{n}", bank_locator="BANK 2")
        for n in (0, 1)
    ]
    bandwidth, _ = probe_memory_bandwidth(write_tree(tmp_path, smbios_tree(records)), "Linux")
    assert bandwidth == pytest.approx(2 * 8 * 3200e6)


def test_unlabelled_modules_count_as_one_channel_each(tmp_path: Path) -> None:
    records = [smbios_memory_device(size_mb=8192, speed_mts=3200, device_locator="Bottom", bank_locator="")] * 2
    bandwidth, _ = probe_memory_bandwidth(write_tree(tmp_path, smbios_tree(records)), "Linux")
    assert bandwidth == pytest.approx(2 * 8 * 3200e6)


def test_unreadable_tables_say_why(tmp_path: Path) -> None:
    (tmp_path / "sys/firmware/dmi/entries/17-0").mkdir(parents=True)  # present, but raw not readable
    bandwidth, note = probe_memory_bandwidth(write_tree(tmp_path, {}), "Linux")
    assert bandwidth is None and note is not None and "needs root" in note
    bandwidth, note = probe_memory_bandwidth(write_tree(tmp_path, {}), "Windows")
    assert bandwidth is None and note is not None and "only read" in note
