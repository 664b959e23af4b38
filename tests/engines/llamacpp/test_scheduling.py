"""Scheduler behaviour: cancellation, the wait queue, chunked prefill, prefix caching, shutdown."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from launcher.engines.base import GenerationEvent, QueueFullError
from launcher.engines.llamacpp.model import LlamaCppModel
from tests.engines.llamacpp.support import load
from tests.engines.support import (
    cancel_a_consuming_task,
    close_a_stream_and_check_its_sequence_is_freed,
    exact,
    greedy,
    run,
    until,
)


async def test_closing_a_stream_frees_its_sequence(tiny_model: LlamaCppModel, text_prompt: list[int]) -> None:
    await close_a_stream_and_check_its_sequence_is_freed(tiny_model, text_prompt, long=3000)


async def test_a_cancelled_task_frees_its_sequence(tiny_model: LlamaCppModel, text_prompt: list[int]) -> None:
    await cancel_a_consuming_task(tiny_model, greedy(text_prompt, 3000))
    await until(lambda: tiny_model.stats().requests_running == 0, "the cancelled task's request to end")


async def test_full_queue_raises_queue_full(tiny_gguf: Path) -> None:
    model = load(tiny_gguf, parallel=1, max_queue=1)
    try:
        prompt = model.tokenize("Hello world!")
        running = model.generate(greedy(prompt, 3000))
        waiting = model.generate(greedy(prompt, 3))
        with pytest.raises(QueueFullError) as caught:
            model.generate(greedy(prompt, 3))
        assert caught.value.retry_after_s >= 1.0
        await anext(running)
        await running.aclose()  # type: ignore[attr-defined]
        rest = [event async for event in waiting]
        assert rest[-1].finish_reason == "length"
        assert model.stats().requests_waiting == 0
    finally:
        model.close()


async def test_short_prompt_is_not_stuck_behind_a_long_one(tiny_model: LlamaCppModel) -> None:
    long_prompt = tiny_model.tokenize("The quick brown fox jumps over the lazy dog. " * 200)[:2000]
    short_prompt = tiny_model.tokenize("Hello there")
    order: list[str] = []

    async def follow(name: str, prompt: list[int]) -> None:
        async for event in tiny_model.generate(greedy(prompt, 2)):
            if event.token_ids:
                order.append(name)

    await asyncio.gather(follow("long", long_prompt), follow("short", short_prompt))
    assert order.index("short") < order.index("long")


async def tokens_streamed_while_read(model: LlamaCppModel, prompts: list[list[int]]) -> int:
    """Tokens a running stream receives between sending `prompts` together and the last of their
    first tokens: one per scheduler step, give or take the event loop's timing."""
    received: list[int] = []

    async def drain(stream: AsyncIterator[GenerationEvent]) -> None:
        async for event in stream:
            received.extend(event.token_ids)

    # A 100-token prompt first, so the scheduler has timed a prompt step before the others come.
    background = model.tokenize("Tell me a story about the sea. " * 20)[:100]
    running = asyncio.ensure_future(drain(model.generate(greedy(background, 3000))))
    try:
        await until(lambda: len(received) >= 5, "the first stream to be generating")
        before = len(received)
        streams = [model.generate(greedy(prompt, 1)) for prompt in prompts]
        for stream in streams:
            assert (await anext(stream)).token_ids
            await stream.aclose()  # type: ignore[attr-defined]
        return len(received) - before
    finally:
        running.cancel()


async def test_running_stream_keeps_streaming_while_a_long_prompt_is_read(tiny_gguf: Path) -> None:
    # A 0 ms stall target reads new prompts in the smallest chunks while another stream generates,
    # so the running stream gets a token every step instead of waiting out 512-token chunks.
    model = load(tiny_gguf, parallel=2, prefill_stall_ms=0)
    try:
        long_prompt = model.tokenize("The quick brown fox jumps over the lazy dog. " * 200)[:2000]
        during = await tokens_streamed_while_read(model, [long_prompt])
    finally:
        model.close()
    # 2,000 prompt tokens take 4 steps in 512-token chunks and ~60 in 32-token ones.
    assert during >= 30


async def test_prefix_cache_hit_gives_the_same_tokens(tiny_model: LlamaCppModel) -> None:
    system = tiny_model.tokenize("You are a helpful assistant. Please explain the following code. " * 40)
    first_prompt = system + tiny_model.tokenize("What does def add(a, b) do?")
    before = tiny_model.stats()
    first = await run(tiny_model, exact(first_prompt, 10))
    again = await run(tiny_model, exact(first_prompt, 10))
    after = tiny_model.stats()
    assert again.tokens == first.tokens
    assert again.last.cached_prompt_tokens == len(first_prompt) - 1
    # ... and so does the first token's event, which the server's prefill figures read
    assert again.events[0].token_ids and again.events[0].cached_prompt_tokens == len(first_prompt) - 1
    assert after.prefix_cache_hits >= before.prefix_cache_hits + 1
    assert after.prefix_cache_hit_tokens >= before.prefix_cache_hit_tokens + len(first_prompt) - 1

    other_prompt = system + tiny_model.tokenize("Tell me about the weather.")
    shared = await run(tiny_model, exact(other_prompt, 10))
    assert shared.last.cached_prompt_tokens >= len(system) - 1
    fresh = load(Path(tiny_model.info.path), parallel=1, prefix_cache_tokens=0)
    try:
        cold = await run(fresh, exact(other_prompt, 10))
    finally:
        fresh.close()
    assert cold.last.cached_prompt_tokens == 0
    assert cold.tokens == shared.tokens


async def test_prompts_sharing_only_a_template_keep_their_own_caches(tiny_gguf: Path) -> None:
    # Four different files behind the same few template tokens, each read once, then each again: every
    # one is served from its own slot. (A slot was once chosen by the most shared tokens alone, so each
    # new file overwrote the last one's slot to save the template's tokens, and the second round read
    # every file again.)
    model = load(tiny_gguf, parallel=4, prompt_cache_gb=0)
    try:
        files = [model.tokenize(f"Here is a file:\n{word * 60}") for word in ("alpha ", "beta ", "gamma ", "delta ")]
        for prompt in files:
            await run(model, greedy(prompt, 1))
        again = [await run(model, greedy(prompt, 4)) for prompt in files]
    finally:
        model.close()
    assert [outcome.last.cached_prompt_tokens for outcome in again] == [len(p) - 1 for p in files]


async def test_concurrent_requests_share_a_prefix_in_flight(tiny_model: LlamaCppModel) -> None:
    system = tiny_model.tokenize("Tool calls are JSON objects with a name and arguments. " * 30)
    prompts = [system + tiny_model.tokenize(q) for q in ("Hello world!", "The weather in London")]
    first_stream = tiny_model.generate(greedy(prompts[0], 50))
    await anext(first_stream)  # the first request's prompt is now in its slot
    second = await run(tiny_model, greedy(prompts[1], 6))
    rest: list[GenerationEvent] = [event async for event in first_stream]
    assert rest[-1].finish_reason == "length"
    assert second.last.cached_prompt_tokens >= len(system) - 1


async def test_prefix_cache_budget_evicts(tiny_gguf: Path) -> None:
    model = load(tiny_gguf, parallel=2, prefix_cache_tokens=0)
    try:
        prompt = model.tokenize("Hello world! " * 30)
        await run(model, greedy(prompt, 4))
        again = await run(model, greedy(prompt, 4))
        assert again.last.cached_prompt_tokens == 0
        assert model.stats().prefix_cache_hits == 0
        assert model.stats().prefix_cache_misses == 2
    finally:
        model.close()


async def test_close_ends_streams_and_joins_the_thread(tiny_gguf: Path) -> None:
    threads_before = set(threading.enumerate())
    model = load(tiny_gguf, parallel=1)
    assert len(set(threading.enumerate()) - threads_before) == 1  # the scheduler thread
    prompt = model.tokenize("Hello world!")
    running = model.generate(greedy(prompt, 3000))
    queued = model.generate(greedy(prompt, 3000))
    await anext(running)
    model.close()
    assert set(threading.enumerate()) - threads_before == set()
    running_rest = [event async for event in running]
    queued_rest = [event async for event in queued]
    assert running_rest[-1].finish_reason == "cancelled"
    assert queued_rest[-1].finish_reason == "cancelled"
    model.close()  # idempotent
