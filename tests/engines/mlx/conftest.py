"""Fixtures for the MLX engine tests: the real engine (mlx's CPU build here) on the tiny MLX model."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from launcher.engines.mlx.model import MlxModel
from tests.engines.mlx.support import CHAT_PROMPT, load


@pytest.fixture(scope="module")
def mlx_model(tiny_mlx_model: Path) -> Iterator[MlxModel]:
    """The tiny MLX model with 4 parallel sequences."""
    model = load(tiny_mlx_model)
    yield model
    model.close()


@pytest.fixture
def chat_prompt(mlx_model: MlxModel) -> list[int]:
    """A short ChatML prompt as tokens."""
    return mlx_model.tokenize(CHAT_PROMPT)
