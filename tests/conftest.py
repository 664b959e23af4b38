"""Test-wide fixtures: every test gets fresh launcher and Hugging Face dirs under tmp."""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import pytest

# Qt must never try to open a real display in tests.
os.environ.setdefault("QT_QPA_PLATFORM", "offscreen")

pytest_plugins: list[str] = ["tests.fixtures.models", "tests.fixtures.fake_hub", "tests.fixtures.mlx_models"]


@pytest.fixture(autouse=True)
def isolated_user_dirs(tmp_path_factory: pytest.TempPathFactory, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    """Point LAUNCHER_HOME and the HF cache at a fresh tmp dir so no test touches real user data."""
    home = tmp_path_factory.mktemp("home")
    monkeypatch.setenv("LAUNCHER_HOME", str(home / "launcher"))
    monkeypatch.setenv("HF_HOME", str(home / "hf"))
    monkeypatch.setenv("HF_HUB_CACHE", str(home / "hf" / "hub"))
    monkeypatch.setenv("HF_HUB_DISABLE_TELEMETRY", "1")
    monkeypatch.delenv("HF_TOKEN", raising=False)
    monkeypatch.delenv("HF_HUB_OFFLINE", raising=False)
    yield home
