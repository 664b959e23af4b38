"""The ExLlama tests' request helper (the rest is in tests.engines.support)."""

from __future__ import annotations

from launcher.engines.base import GenerationRequest
from tests.engines import support


def greedy(prompt: list[int], max_tokens: int, **kwargs: object) -> GenerationRequest:
    """A temperature-0 request that stops at end-of-generation tokens unless told otherwise."""
    return support.greedy(prompt, max_tokens, **{"ignore_eos": False, **kwargs})
