"""One line of download progress for a label: bytes done of total, speed, time left and where a resumed
download picked up. The Models page and the update dialog both show it.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from launcher.core.units import format_bytes

if TYPE_CHECKING:  # the catalog loads in the background, after the window shows
    from launcher.catalog.progress import ProgressEvent


def progress_text(event: ProgressEvent) -> str:
    """'1.2 GiB of 4.5 GiB · 38.0 MiB/s · 1 min 30 s left'."""
    from launcher.catalog.progress import format_duration

    parts = [f"{format_bytes(event.bytes_done)} of {format_bytes(event.bytes_total)}"]
    if event.speed:
        parts.append(f"{format_bytes(event.speed)}/s")
    if event.eta_s is not None:
        parts.append(f"{format_duration(event.eta_s)} left")
    if event.resumed_bytes:
        parts.append(f"resumed from {format_bytes(event.resumed_bytes)}")
    if event.kind == "verify":
        parts = ["Verifying checksum…"]
    return " · ".join(parts)
