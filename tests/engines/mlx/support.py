"""Helpers for the MLX engine tests: load with the real engine (the rest is in tests.engines.support)."""

from __future__ import annotations

from pathlib import Path

from launcher.core.config import ServeConfig
from launcher.core.model_types import LocalModel
from launcher.engines.mlx.engine import MlxEngine
from launcher.engines.mlx.model import MlxModel

CHAT_PROMPT = "<|im_start|>user\nHello there, how are you today?<|im_end|>\n<|im_start|>assistant\n"


def load(path: Path, **config: object) -> MlxModel:
    """Load `path` with the real engine (small context unless overridden)."""
    settings = {"context": 1024, "parallel": 4, **config}
    return MlxEngine().load(LocalModel(path=path, format="mlx", name=path.name), ServeConfig(**settings))
