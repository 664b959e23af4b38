"""Reading an OpenAI-style `/v1/models` entry (a "card"), from any server: ours, vLLM, SGLang, llama-server."""

from __future__ import annotations

from typing import Any

CONTEXT_KEYS = ("context_length", "context_window", "max_model_len", "n_ctx", "max_context_length")
"""Keys under which OpenAI-compatible servers report a model's context length (vLLM: max_model_len)."""


def context_length_of_card(card: dict[str, Any]) -> int | None:
    """The context length a `/v1/models` entry reports, if any (also under `meta` or `metadata`)."""
    for source in (card, card.get("meta") or {}, card.get("metadata") or {}):
        if not isinstance(source, dict):
            continue
        for key in CONTEXT_KEYS:
            value = source.get(key)
            if isinstance(value, int) and value > 0:
                return value
    return None
