"""Human-readable sizes and rates."""

from __future__ import annotations

GIB = 1024**3
MIB = 1024**2


def format_bytes(size: float | None) -> str:
    """1536 -> '1.5 KiB'; None -> 'unknown'."""
    if size is None:
        return "unknown"
    value = float(size)
    for unit in ("B", "KiB", "MiB", "GiB", "TiB"):
        if abs(value) < 1024 or unit == "TiB":
            return f"{value:.0f} {unit}" if unit == "B" else f"{value:.1f} {unit}"
        value /= 1024
    raise AssertionError("unreachable")


def format_rate(bytes_per_s: float | None) -> str:
    """Bandwidth as GB/s (decimal, as vendors quote it)."""
    if bytes_per_s is None:
        return "unknown"
    return f"{bytes_per_s / 1e9:.0f} GB/s"


_SIZE_UNITS = {
    "": 1,
    "b": 1,
    "k": 1000,
    "kb": 1000,
    "m": 1000**2,
    "mb": 1000**2,
    "g": 1000**3,
    "gb": 1000**3,
    "t": 1000**4,
    "tb": 1000**4,
    "kib": 1024,
    "mib": 1024**2,
    "gib": 1024**3,
    "tib": 1024**4,
}


def parse_bytes(text: str) -> int:
    """'12GiB', '512 MiB', '8G', '8GB' or a plain byte count as bytes (a ValueError says what it takes)."""
    import re

    match = re.fullmatch(r"\s*([0-9]+(?:\.[0-9]+)?)\s*([a-zA-Z]*)\s*", text)
    unit = match.group(2).lower() if match else ""
    if match is None or unit not in _SIZE_UNITS:
        raise ValueError(f"{text!r} is not a size; write it like 12GiB, 512MiB or 8GB")
    return int(float(match.group(1)) * _SIZE_UNITS[unit])
