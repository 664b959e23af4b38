"""One logging setup for the CLI and the server process."""

from __future__ import annotations

import logging
import sys


def setup(level: str = "INFO") -> None:
    """Log to stderr with timestamps; stdout stays free for machine-readable lines."""
    logging.basicConfig(
        level=getattr(logging, level.upper(), logging.INFO),
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
        stream=sys.stderr,
        force=True,
    )
