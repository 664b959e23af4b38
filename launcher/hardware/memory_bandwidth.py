"""System RAM bandwidth estimate from the SMBIOS memory-device tables (Linux, readable as root).

Peak bytes/s = channels x bytes per transfer x MT/s. The SMBIOS type 17 records give each
module's data width, DDR type and configured speed; channels come from the locator strings
("DIMM_A1", "P0 CHANNEL B") and fall back to the number of populated modules. Without the
tables (not root, not Linux, a VM) the answer is None and the reason goes to `unseen`.
"""

from __future__ import annotations

import re
import struct
from dataclasses import dataclass

from launcher.hardware.sources import FileReader

DMI_ENTRIES = "/sys/firmware/dmi/entries"
MEMORY_TYPES = {0x18: "DDR3", 0x1A: "DDR4", 0x1D: "LPDDR3", 0x1E: "LPDDR4", 0x22: "DDR5", 0x23: "LPDDR5"}


@dataclass(frozen=True)
class MemoryDevice:
    """One populated SMBIOS type 17 memory device."""

    data_width_bits: int
    speed_mts: int
    memory_type: str
    device_locator: str
    bank_locator: str


def _strings(raw: bytes, length: int) -> list[str]:
    return [part.decode("ascii", "replace") for part in raw[length:].split(b"\x00")]


def parse_memory_device(raw: bytes) -> MemoryDevice | None:
    """Decode one /sys/firmware/dmi/entries/17-N/raw record; None for an empty slot."""
    if len(raw) < 0x22 or raw[0] != 17:
        return None
    length = raw[1]
    data_width, size = struct.unpack_from("<HH", raw, 0x0A)
    if size == 0 or data_width in (0, 0xFFFF):
        return None  # empty slot / unknown width
    speed = struct.unpack_from("<H", raw, 0x15)[0]
    configured = struct.unpack_from("<H", raw, 0x20)[0] if length >= 0x22 else 0
    speed_mts = configured if configured not in (0, 0xFFFF) else speed
    if speed_mts in (0, 0xFFFF):
        return None
    strings = _strings(raw, length)

    def string(index: int) -> str:
        return strings[index - 1] if 0 < index <= len(strings) else ""

    return MemoryDevice(
        data_width_bits=data_width,
        speed_mts=speed_mts,
        memory_type=MEMORY_TYPES.get(raw[0x12], "DDR"),
        device_locator=string(raw[0x10]),
        bank_locator=string(raw[0x11]),
    )


def _channel(device: MemoryDevice) -> str | None:
    found = re.search(r"CHANNEL\s*([A-Z0-9]+)", device.bank_locator, re.IGNORECASE)
    if found is None:
        found = re.search(r"(?:CHANNEL|DIMM[_ ]?)([A-H])\d?", device.device_locator, re.IGNORECASE)
    if found is None:
        return None
    socket = re.search(r"(?:CPU|P|NODE)\s*(\d)", device.bank_locator + " " + device.device_locator)
    return f"{socket.group(1) if socket else 0}:{found.group(1).upper()}"


def estimate_bandwidth(devices: list[MemoryDevice]) -> tuple[float, str]:
    """(peak bytes/s, how it was worked out) for the populated modules."""
    channels = {_channel(device) for device in devices}
    count = len(devices) if None in channels else len(channels)
    slowest = min(device.speed_mts for device in devices)  # all channels run at the slowest module's speed
    width = min(device.data_width_bits for device in devices)
    bandwidth = count * width / 8 * slowest * 1e6
    kind = devices[0].memory_type
    return bandwidth, f"{kind}-{slowest}, {count} channel{'s' if count != 1 else ''} x {width} bit"


def probe_memory_bandwidth(files: FileReader, system: str) -> tuple[float | None, str | None]:
    """(bytes/s or None, a note for `unseen` or None)."""
    if system != "Linux":
        return None, "CPU memory bandwidth: unknown (only read from SMBIOS tables on Linux)"
    entries = [name for name in files.list_dir(DMI_ENTRIES) if name.startswith("17-")]
    devices = []
    for entry in entries:
        raw = files.read_bytes(f"{DMI_ENTRIES}/{entry}/raw")
        device = parse_memory_device(raw) if raw else None
        if device is not None:
            devices.append(device)
    if not devices:
        reason = "not readable (needs root)" if entries else "not available (no SMBIOS tables, e.g. a VM)"
        return None, f"CPU memory bandwidth: unknown; SMBIOS memory tables {reason}"
    bandwidth, _ = estimate_bandwidth(devices)
    return bandwidth, None
