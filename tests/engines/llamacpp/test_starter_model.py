"""The real starter model (gemma-3-270m Q4_K_M): real text, and batching that does not change results."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from tests.engines.llamacpp.support import load
from tests.engines.support import greedy, run

pytestmark = pytest.mark.slow


async def test_starter_model_writes_real_text_and_batches_consistently(starter_gguf: Path) -> None:
    # Without prefix reuse: a cache hit next to other sequences can flip a near-tie greedy choice on
    # this real model (float rounding differs with the KV layout); see the engine report.
    # Nor speculation: its batch shapes follow step timings (tests/engines/llamacpp/test_speculation.py).
    model = load(starter_gguf, context=1024, parallel=4, prefix_cache_tokens=0, speculative="off")
    try:
        assert model.info.architecture == "gemma3"
        assert model.info.chat_template is None  # this GGUF ships without one: the server falls back
        assert model.info.add_bos_token
        prompt = model.tokenize("The capital of France is", add_special=True)
        alone = await run(model, greedy(prompt, 8, ignore_eos=False))
        words = alone.text.split()
        assert len(words) >= 3 and all(word.strip(".,;:!?'\"").isalpha() for word in words), alone.text
        others = [model.tokenize(t, add_special=True) for t in ("def fib(n):", "Once upon a time", "1, 2, 3,")]
        together = await asyncio.gather(
            run(model, greedy(prompt, 8, ignore_eos=False)), *(run(model, greedy(p, 8)) for p in others)
        )
        assert together[0].tokens == alone.tokens
    finally:
        model.close()


def test_the_memory_gauge_is_what_llama_cpp_allocated(starter_gguf: Path) -> None:
    # gemma-3-270m at 32k x 4: 3 full layers x 131,072 cells + 15 sliding layers x 2,560 cells
    # (512 x 4 + 512), 1 KiB per cell and layer: 421.5 MiB, as the advisor predicts; the full-size
    # cache would be 2,304 MiB.
    model = load(starter_gguf, context=32768, parallel=4)
    try:
        memory = model.stats().memory
    finally:
        model.close()
    assert memory["kv_cache"] == 1024 * (3 * 131072 + 15 * 2560)
    assert memory["compute"] > 0 and memory["weights"] > 200 * 1024 * 1024
