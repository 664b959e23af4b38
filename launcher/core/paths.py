"""Where the launcher keeps things on disk (platformdirs; overridable for tests).

`LAUNCHER_HOME` points every launcher-owned directory at one folder (tests use a tmp dir).
Models live in the standard Hugging Face cache so they are shared with other tools.
"""

from __future__ import annotations

import os
from pathlib import Path

import platformdirs

APP_NAME = "launcher"


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


def settings_file() -> Path:
    """The one typed settings file."""
    return config_dir() / "settings.toml"


def hf_cache_dir() -> Path:
    """The Hugging Face hub cache (honours HF_HUB_CACHE / HF_HOME like every HF tool)."""
    from huggingface_hub import constants

    return Path(os.environ.get("HF_HUB_CACHE") or constants.HF_HUB_CACHE)


def resources_dir() -> Path:
    """The repo's resources/ folder (catalog and hardware tables)."""
    return Path(__file__).resolve().parents[2] / "resources"
