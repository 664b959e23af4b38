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
