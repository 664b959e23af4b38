"""Fixtures for the llama.cpp engine tests: the real engine on the tiny generated GGUF."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from launcher.engines.llamacpp.model import LlamaCppModel
from tests.engines.llamacpp.support import GrammarProbe, load


@pytest.fixture(scope="module")
def tiny_model(tiny_gguf: Path) -> Iterator[LlamaCppModel]:
    """The tiny model with 4 parallel sequences and the default (unbounded) prefix cache."""
    model = load(tiny_gguf)
    yield model
    model.close()


@pytest.fixture
def text_prompt(tiny_model: LlamaCppModel) -> list[int]:
    """A short ChatML prompt as tokens."""
    return tiny_model.tokenize("<|im_start|>user\nHello there, how are you today?<|im_end|>\n<|im_start|>assistant\n")


@pytest.fixture(scope="module")
def probe(tiny_gguf: Path) -> Iterator[GrammarProbe]:
    """llama.cpp's grammar sampler over the tiny GGUF's vocabulary."""
    grammar_probe = GrammarProbe(tiny_gguf)
    yield grammar_probe
    grammar_probe.close()
