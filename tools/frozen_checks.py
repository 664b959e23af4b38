"""What the frozen-app checks share (tools/check_frozen_app.py, tests/updates/frozen_update.py): timed steps,
waiting with a deadline, and finding the processes a bundle runs. Standard library only: the frozen-app
check runs under the system's Python, outside the project's venv."""

from __future__ import annotations

import os
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

T0 = time.monotonic()


class CheckFailed(Exception):
    """A check did not hold; the message says what was seen."""


def step(text: str) -> None:
    """Print a step with the seconds since the check started."""
    print(f"[{time.monotonic() - T0:7.2f} s] {text}", flush=True)


def wait_for(what: str, probe: Callable[[], Any], timeout: float, interval: float = 0.1) -> Any:
    """`probe()`'s first truthy answer, asked every `interval` seconds; CheckFailed after `timeout`."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        result = probe()
        if result:
            return result
        time.sleep(interval)
    raise CheckFailed(f"timed out after {timeout:.0f} s waiting for {what}")


def processes_under(folder: Path) -> list[int]:
    """Pids of running processes whose program lies in `folder` (the unpacked bundle); zombies have ended."""
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            exe = os.readlink(entry / "exe")
            state = (entry / "stat").read_text().rsplit(")", 1)[1].split()[0]
        except OSError:
            continue
        if state != "Z" and exe.startswith(str(folder) + os.sep):
            found.append(int(entry.name))
    return found
