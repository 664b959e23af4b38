"""Recorded machines (launcher/resources/hardware/machines/*.json, `Machine.to_json` format), loadable by name.

The UI screenshots, the advisor tests and `launcher detect --recorded NAME` replay these
instead of the machine they run on.
"""

from __future__ import annotations

import json
from pathlib import Path

from launcher.core.errors import ConfigError
from launcher.core.paths import resources_dir
from launcher.hardware.machine import Machine


def recorded_dir() -> Path:
    """The folder holding the recorded machines."""
    return resources_dir() / "hardware" / "machines"


def recorded_names() -> list[str]:
    """Names of every recorded machine, sorted ("rtx4090-desktop", ...)."""
    return sorted(path.stem for path in recorded_dir().glob("*.json"))


def load_recorded(name: str) -> Machine:
    """The recorded machine called `name`; raises ConfigError listing the known names."""
    path = recorded_dir() / f"{name}.json"
    if not path.is_file():
        known = ", ".join(recorded_names())
        raise ConfigError(f"No recorded machine named {name!r}. Known: {known}.")
    return Machine.from_json(json.loads(path.read_text(encoding="utf-8")))
