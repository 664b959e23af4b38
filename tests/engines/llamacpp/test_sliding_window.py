"""Sliding-window models: a windowed cache, prefix reuse across requests, checkpoints.

The tiny SWA model has one layer that sees the last 32 tokens and one that sees all. At 1,024
tokens x 1 slot llama.cpp gives the sliding layer 768 cells (window + a 512-token batch,
rounded up to 256), so after about 770 tokens it starts overwriting the oldest of them: a prefix
that ends more than 32 tokens before what it still holds can then only come from a checkpoint.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from launcher.engines.llamacpp._sliding_window import CheckpointStore
from launcher.engines.llamacpp.model import LlamaCppModel
from tests.engines.llamacpp.support import load
from tests.engines.support import exact, greedy, run
from tests.fixtures.models import TINY_SLIDING_WINDOW


@pytest.fixture(scope="module")
def swa_model(tiny_swa_gguf: Path) -> Iterator[LlamaCppModel]:
    model = load(tiny_swa_gguf, context=1024, parallel=1)
    yield model
    model.close()


@pytest.fixture(scope="module")
def cold_model(tiny_swa_gguf: Path) -> Iterator[LlamaCppModel]:
    """The same model with no prefix cache at all: every prompt is read from its first token."""
    model = load(tiny_swa_gguf, context=1024, parallel=1, prefix_cache_tokens=0, swa_checkpoints=0)
    yield model
    model.close()


def test_the_sliding_layers_get_a_windowed_cache(swa_model: LlamaCppModel, tiny_gguf: Path) -> None:
    assert swa_model.info.architecture == "gemma3"
    full_size = load(tiny_gguf, context=1024, parallel=1)  # the same shapes, every layer sees all
    try:
        # full layer 1,024 cells + sliding layer 768 cells, vs 2 x 1,024 cells
        assert swa_model.stats().memory["kv_cache"] < 0.9 * full_size.stats().memory["kv_cache"]
    finally:
        full_size.close()


async def test_an_agent_turn_reuses_a_prompt_longer_than_the_window(swa_model: LlamaCppModel) -> None:
    system = swa_model.tokenize("You are a helpful assistant. Please explain the following code. " * 20)
    turn_1 = system + swa_model.tokenize("<|im_start|>user\nWhat does def add(a, b) do?<|im_end|>\n")
    first = await run(swa_model, greedy(turn_1, 40))
    assert first.last.cached_prompt_tokens == 0
    reply = swa_model.tokenize(first.text + "<|im_end|>\n")
    turn_2 = turn_1 + reply + swa_model.tokenize("<|im_start|>user\nAnd def sub(a, b)?<|im_end|>\n")
    second = await run(swa_model, greedy(turn_2, 8))
    assert len(turn_1) > 5 * TINY_SLIDING_WINDOW
    assert second.last.cached_prompt_tokens >= len(turn_1)


async def test_a_checkpoint_restore_gives_the_cold_read_tokens(
    swa_model: LlamaCppModel, cold_model: LlamaCppModel
) -> None:
    prompt = swa_model.tokenize("Tool calls are JSON objects with a name and arguments. " * 9)
    # A long answer pushes the sliding layer's cells far past the prompt's end.
    await run(swa_model, greedy(prompt, 1024 - len(prompt) - 8))
    before = swa_model.stats()
    assert before.swa_checkpoints >= 1 and before.memory["swa_checkpoints"] > 0

    # The next request shares all but the prompt's last 2 tokens: the window there is gone, so the
    # checkpoint taken 4 tokens before the end is restored and only the rest is read.
    diverging = prompt[:-2] + swa_model.tokenize(" The weather in Paris is sunny.")
    warm = await run(swa_model, exact(diverging, 24))
    cold = await run(cold_model, exact(diverging, 24))
    after = swa_model.stats()
    assert after.swa_checkpoint_restores == before.swa_checkpoint_restores + 1
    assert warm.last.cached_prompt_tokens == len(prompt) - 4
    assert cold.last.cached_prompt_tokens == 0
    assert warm.tokens == cold.tokens


async def test_without_a_checkpoint_the_prompt_is_read_again(
    tiny_swa_gguf: Path, cold_model: LlamaCppModel, caplog: pytest.LogCaptureFixture
) -> None:
    model = load(tiny_swa_gguf, context=1024, parallel=1, swa_checkpoints=0)
    try:
        prompt = model.tokenize("Tool calls are JSON objects with a name and arguments. " * 9)
        await run(model, greedy(prompt, 1024 - len(prompt) - 8))
        diverging = prompt[:-2] + model.tokenize(" The weather in Paris is sunny.")
        with caplog.at_level("INFO", logger="launcher.engines.llamacpp"):
            again = await run(model, exact(diverging, 24))
        cold = await run(cold_model, exact(diverging, 24))
        assert model.stats().swa_checkpoints == 0
    finally:
        model.close()
    assert again.last.cached_prompt_tokens == 0
    assert again.tokens == cold.tokens
    assert "reading the whole prompt" in caplog.text and "checkpoints are off" in caplog.text


async def test_checkpoints_are_bounded_per_slot(tiny_swa_gguf: Path) -> None:
    model = load(tiny_swa_gguf, context=1024, parallel=2, swa_checkpoints=2)
    try:
        for text in ("Hello world! ", "The weather in London is rainy. ", "Write a function. ", "def add(a, b): "):
            prompt = model.tokenize(text * 300)[:700]  # 2 checkpoints each: 512 + 4 and 4 before the end
            await run(model, greedy(prompt, 4))
        stats = model.stats()
    finally:
        model.close()
    assert stats.swa_checkpoints_max == 4
    assert stats.swa_checkpoints == 4
    assert stats.memory["swa_checkpoints"] > 0


async def test_checkpoints_stay_within_their_memory_budget(swa_model: LlamaCppModel) -> None:
    await run(swa_model, greedy(swa_model.tokenize("Hello world! " * 100), 4))
    one = swa_model.stats().memory["swa_checkpoints"] // max(1, swa_model.stats().swa_checkpoints)
    store = CheckpointStore(swa_model._ll, swa_model._ctx, per_slot=8, budget_bytes=int(2.5 * one))
    for n_tokens in (100, 200, 300, 400):
        assert store.save(0, n_tokens)
    assert store.count == 2 and store.bytes <= 2.5 * one  # the oldest went first
    assert store.best([(0, 1000)]) is not None and store.best([(0, 1000)])[1].n_tokens == 400
    assert store.best([(0, 250)]) is None
