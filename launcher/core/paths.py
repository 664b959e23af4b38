"""Where the launcher keeps things on disk (platformdirs; overridable for tests), and where it is.

`LAUNCHER_HOME` points every launcher-owned directory at one folder (tests use a tmp dir).
Models live in the standard Hugging Face cache so they are shared with other tools. The data the
launcher ships (catalog, hardware tables) is package data, found the same way from a source
checkout, an installed wheel and a frozen app bundle.
"""

from __future__ import annotations

import json
import os
import sys
from importlib import resources
from pathlib import Path
from typing import Any

import platformdirs

APP_NAME = "launcher"
BUILD_INFO_FILE = "build_info.json"
"""Written into a frozen app's `launcher/resources/` by scripts/build-app; never in the source tree."""


def _home_override() -> Path | None:
    value = os.environ.get("LAUNCHER_HOME")
    return Path(value) if value else None


def config_dir() -> Path:
    """Directory holding settings.toml."""
    home = _home_override()
    return home / "config" if home else Path(platformdirs.user_config_dir(APP_NAME))


def data_dir() -> Path:
    """Directory for launcher-owned data (the imported-models index, the starter model)."""
    home = _home_override()
    return home / "data" if home else Path(platformdirs.user_data_dir(APP_NAME))


def cache_dir() -> Path:
    """Directory for caches that can be rebuilt."""
    home = _home_override()
    return home / "cache" if home else Path(platformdirs.user_cache_dir(APP_NAME))


def state_dir() -> Path:
    """Directory for what describes this machine's running launchers (the servers' run files)."""
    home = _home_override()
    return home / "state" if home else Path(platformdirs.user_state_dir(APP_NAME))


def settings_file() -> Path:
    """The one typed settings file."""
    return config_dir() / "settings.toml"


def hf_cache_dir() -> Path:
    """The Hugging Face hub cache (honours HF_HUB_CACHE / HF_HOME like every HF tool)."""
    from huggingface_hub import constants

    return Path(os.environ.get("HF_HUB_CACHE") or constants.HF_HUB_CACHE)


def resources_dir() -> Path:
    """The package's `launcher/resources/` folder (catalog, hardware tables, recorded machines, icons).

    Asked of importlib.resources rather than built from `__file__`, so it is right wherever the
    package lives: a checkout, site-packages, or a PyInstaller bundle (whose importer answers with
    the folder inside the bundle). Every supported layout keeps the files on disk, so the answer is
    a real directory; a zipped install would not be, and is refused here instead of failing later.
    """
    folder = resources.files("launcher") / "resources"
    if not isinstance(folder, Path):
        raise RuntimeError(f"launcher's package data is not a folder on disk ({folder!r})")
    return folder


def is_frozen() -> bool:
    """True in a bundled app (PyInstaller sets `sys.frozen`): there is no pip and no Python to point users at.

    Hints that say `pip install ...` fit only a source or pip install; a frozen app should say
    which build of the app has the piece instead.
    """
    return bool(getattr(sys, "frozen", False))


def build_info() -> dict[str, Any]:
    """What scripts/build-app recorded about this app build: version, platform, which llama.cpp
    build it bundles, whether the starter model is inside, and release settings such as the GPU
    pack index (`gpu_pack_index`). Empty when running from source or a pip install."""
    try:
        data = json.loads((resources_dir() / BUILD_INFO_FILE).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return {}
    return data if isinstance(data, dict) else {}
