"""User settings: one typed TOML file under the platform config dir.

Written atomically (temp file + rename) so a crash never leaves a half-written file.
"""

from __future__ import annotations

import os
import tempfile
import tomllib
from pathlib import Path
from typing import Any

import tomli_w
from pydantic import BaseModel, ConfigDict, Field, ValidationError

from launcher.core import paths
from launcher.core.config import ServeConfig
from launcher.core.errors import ConfigError


class WindowGeometry(BaseModel):
    """Where the main window was, so it reopens there."""

    x: int = 100
    y: int = 100
    width: int = 1200
    height: int = 800
    maximized: bool = False


class Settings(BaseModel):
    """Everything the user can set and that must survive a restart."""

    model_config = ConfigDict(extra="ignore")

    models_dir: str | None = Field(None, description="Hugging Face cache to use (default: the standard one)")
    hf_token: str | None = Field(None, description="token for gated/private repos (HF_TOKEN wins)")
    serve: ServeConfig = Field(default_factory=ServeConfig)
    window: WindowGeometry = Field(default_factory=WindowGeometry)
    last_model: str | None = None
    last_project_dir: str | None = Field(None, description="the folder an agent was last launched in")
    allow_network: bool = False
    check_for_updates: bool = Field(
        True,
        description="read the release feed at start and once a day (never offline; nothing downloads unasked)",
    )


def load(path: Path | None = None) -> Settings:
    """Read settings; a missing file gives defaults, a broken one a clear ConfigError."""
    path = path or paths.settings_file()
    if not path.exists():
        return Settings()
    try:
        data = tomllib.loads(path.read_text(encoding="utf-8"))
        return Settings.model_validate(data)
    except (tomllib.TOMLDecodeError, ValidationError) as err:
        raise ConfigError(f"Settings file {path} is invalid ({err}). Fix or delete it.") from err


def save(settings: Settings, path: Path | None = None) -> Path:
    """Write settings atomically and return the path."""
    path = path or paths.settings_file()
    write_toml(path, settings.model_dump(mode="json", exclude_none=True))
    return path


def write_toml(path: Path, data: dict[str, Any], *, private: bool = False) -> None:
    """Write a TOML file atomically: a crash or a full disk never leaves half a file.

    `private`: the file holds secrets and must be readable by this user only (mode 0600) from the
    first byte. mkstemp already creates the temp file 0600 whatever the umask; the explicit fchmod
    keeps that a promise of this function rather than a detail of mkstemp. The temp file is then
    renamed over `path`, so there is no instant at which the secret sits in a wider-open file.
    """
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.stem}.", suffix=".tmp")
    try:
        if private and os.name != "nt":  # Windows keeps the per-user profile private by its ACLs instead
            os.fchmod(fd, 0o600)
        with os.fdopen(fd, "wb") as handle:
            tomli_w.dump(data, handle)
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
