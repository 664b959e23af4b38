"""Scheduler behaviour: cancellation, the wait queue, prefix caching, memory stats, shutdown."""

from __future__ import annotations

import threading
from pathlib import Path

import pytest

from launcher.engines.base import QueueFullError
from launcher.engines.mlx.model import MlxModel
from tests.engines.mlx.support import CHAT_PROMPT, load
from tests.engines.support import (
    cancel_a_consuming_task,
    close_a_stream_and_check_its_sequence_is_freed,
    exact,
    greedy,
    run,
    until,
)


async def test_closing_a_stream_frees_its_sequence(mlx_model: MlxModel, chat_prompt: list[int]) -> None:
    await close_a_stream_and_check_its_sequence_is_freed(mlx_model, chat_prompt, long=900)


async def test_a_cancelled_task_frees_its_sequence(mlx_model: MlxModel, chat_prompt: list[int]) -> None:
    await cancel_a_consuming_task(mlx_model, greedy(chat_prompt, 900))
    await until(lambda: mlx_model.stats().requests_running == 0, "the cancelled task's request to end")


async def test_full_queue_raises_queue_full_and_a_freed_slot_serves_the_next(tiny_mlx_model: Path) -> None:
    model = load(tiny_mlx_model, parallel=1, max_queue=1)
    try:
        prompt = model.tokenize("Hello world!")
        running = model.generate(greedy(prompt, 900))
        waiting = model.generate(greedy(prompt, 3))
        with pytest.raises(QueueFullError) as caught:
            model.generate(greedy(prompt, 3))
        assert caught.value.retry_after_s >= 1.0
        first = await anext(running)
        assert first.token_ids
        assert model.stats().requests_waiting == 1
        await running.aclose()  # type: ignore[attr-defined]
        events = [event async for event in waiting]
        assert events[-1].finish_reason == "length"
        assert sum(len(event.token_ids) for event in events) == 3
    finally:
        model.close()


async def test_a_repeated_prompt_hits_the_prefix_cache_with_identical_output(tiny_mlx_model: Path) -> None:
    model = load(tiny_mlx_model, parallel=2)
    try:
        prompt = model.tokenize(CHAT_PROMPT)
        cold = await run(model, exact(prompt, 10))
        assert cold.last.cached_prompt_tokens == 0
        assert model.stats().prefix_cache_misses == 1 and model.stats().prefix_cache_hits == 0
        warm = await run(model, exact(prompt, 10))
        assert warm.tokens == cold.tokens
        assert warm.last.cached_prompt_tokens == len(prompt) - 1
        # ... and so does the first token's event, which the server's prefill figures read
        assert warm.events[0].token_ids and warm.events[0].cached_prompt_tokens == len(prompt) - 1
        stats = model.stats()
        assert stats.prefix_cache_hits == 1 and stats.prefix_cache_hit_tokens == len(prompt) - 1
        longer = prompt + model.tokenize("<|im_start|>user\nAnd tomorrow?<|im_end|>\n<|im_start|>assistant\n")
        follow_up = await run(model, exact(longer, 6))
        assert follow_up.last.cached_prompt_tokens >= len(prompt)
        fresh = load(tiny_mlx_model, parallel=1)
        try:
            assert (await run(fresh, exact(longer, 6))).tokens == follow_up.tokens
        finally:
            fresh.close()
    finally:
        model.close()


async def test_stats_report_mlx_memory_and_token_counters(mlx_model: MlxModel, chat_prompt: list[int]) -> None:
    await run(mlx_model, greedy(chat_prompt, 5))
    stats = mlx_model.stats()
    assert {"mlx_active", "mlx_peak", "mlx_cache", "process_rss"} <= set(stats.memory)
    assert stats.memory["mlx_active"] > 0 and stats.memory["mlx_peak"] >= stats.memory["mlx_active"]
    assert stats.memory["process_rss"] > stats.memory["mlx_active"]
    assert stats.decode_tokens_total >= 5 and stats.prefill_tokens_total > 0
    assert stats.kv_cache_total_tokens == 1024 * 4


async def test_close_ends_open_requests_and_leaves_no_threads(tiny_mlx_model: Path) -> None:
    before = set(threading.enumerate())
    model = load(tiny_mlx_model, parallel=1)
    prompt = model.tokenize("Hello world!")
    running = model.generate(greedy(prompt, 900))
    waiting = model.generate(greedy(prompt, 900))
    assert (await anext(running)).token_ids
    model.close()
    assert [event async for event in running][-1].finish_reason == "cancelled"
    assert [event async for event in waiting][-1].finish_reason == "cancelled"
    assert set(threading.enumerate()) <= before
    late = [event async for event in model.generate(greedy(prompt, 3))]
    assert late[-1].finish_reason == "cancelled" and late[-1].error  # the server answers 503: not loaded
