"""Helpers for the llama.cpp engine tests: load with the real engine (the rest is in tests.engines.support)."""

from __future__ import annotations

from pathlib import Path

from launcher.core.config import ServeConfig
from launcher.core.model_types import LocalModel
from launcher.engines.llamacpp.engine import LlamaCppEngine
from launcher.engines.llamacpp.model import LlamaCppModel


def load(path: Path, **config: object) -> LlamaCppModel:
    """Load `path` with the real engine (2 threads, small context unless overridden)."""
    settings = {"context": 4096, "parallel": 4, "threads": 2, **config}
    return LlamaCppEngine().load(LocalModel(path=path, format="gguf", name=path.stem), ServeConfig(**settings))
