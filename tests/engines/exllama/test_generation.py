"""Job lifecycle of both ExLlama engines: enqueue -> iterate -> eos, concurrency, cancellation, the queue bound.

THESE ENGINES ARE VERIFIED ONLY ON AN NVIDIA GPU (scripts/gpu-check). Here the runtime is the
CPU stand-in (standin.py) with upstream's class names and keyword arguments; what is tested is
everything above the runtime calls.
"""

from __future__ import annotations

import asyncio

import pytest

from launcher.engines.base import GenerationRequest, QueueFullError, SamplingParams
from tests.engines.exllama.conftest import LoadFn
from tests.engines.exllama.standin import Behaviour, Runtime
from tests.engines.exllama.support import greedy
from tests.engines.support import cancel_a_consuming_task, run, until

CHAT = "<|im_start|>user\nHello there, how are you today?<|im_end|>\n<|im_start|>assistant\n"
KINDS = ["exl3", "exl2"]


@pytest.mark.parametrize("kind", KINDS)
async def test_a_request_streams_tokens_and_ends_at_max_tokens(load: LoadFn, kind: str) -> None:
    model = load(kind)
    prompt = model.tokenize(CHAT)
    outcome = await run(model, greedy(prompt, 6))
    assert outcome.last.finish_reason == "length"
    assert len(outcome.tokens) == 6
    assert outcome.last.completion_tokens == 6
    assert outcome.last.prompt_tokens == len(prompt)
    assert outcome.text == model.detokenize(outcome.tokens)


@pytest.mark.parametrize("kind", KINDS)
async def test_the_models_end_of_turn_token_stops_generation(load: LoadFn, kind: str) -> None:
    runtime = Runtime(Behaviour(stop_after=3))
    model = load(kind, runtime=runtime)
    eos = model.tokenize("<|im_end|>")
    assert model.info.eos_token_ids == tuple(eos)
    outcome = await run(model, greedy(model.tokenize(CHAT), 50))
    assert outcome.last.finish_reason == "stop"
    assert len(outcome.tokens) == 3
    assert eos[0] not in outcome.tokens and "<|im_end|>" not in outcome.text
    job = runtime.log.jobs[-1]
    assert job.stop_tokens == list(eos)


async def test_ignore_eos_passes_no_stop_tokens(load: LoadFn) -> None:
    runtime = Runtime(Behaviour(stop_after=1))
    model = load(runtime=runtime)
    request = greedy(model.tokenize(CHAT), 5, ignore_eos=True)
    outcome = await run(model, request)
    assert outcome.last.finish_reason == "length" and len(outcome.tokens) == 5
    assert runtime.log.jobs[-1].stop_tokens == []


async def test_concurrent_requests_run_as_jobs_of_one_generator(load: LoadFn) -> None:
    runtime = Runtime(Behaviour(step_delay_s=0.001))
    model = load(runtime=runtime, parallel=4)
    prompts = [model.tokenize(CHAT + f"Answer {i}:") for i in range(4)]
    alone = [await run(model, greedy(p, 8)) for p in prompts]
    together = await asyncio.gather(*(run(model, greedy(p, 8)) for p in prompts))
    assert [o.tokens for o in together] == [o.tokens for o in alone]  # no cross-talk between jobs
    assert runtime.log.max_active == 4  # all four were active in the generator at once
    assert runtime.log.generator_kwargs[0]["max_batch_size"] == 4


async def test_more_requests_than_parallel_wait_in_the_generator_queue(load: LoadFn) -> None:
    runtime = Runtime(Behaviour(step_delay_s=0.001))
    model = load(runtime=runtime, parallel=2, max_queue=8)
    prompt = model.tokenize(CHAT)
    outcomes = await asyncio.gather(*(run(model, greedy(prompt, 4)) for _ in range(5)))
    assert all(o.last.finish_reason == "length" for o in outcomes)
    assert runtime.log.max_active == 2


@pytest.mark.parametrize("kind", KINDS)
async def test_closing_a_stream_cancels_the_job_and_frees_its_slot(load: LoadFn, kind: str) -> None:
    runtime = Runtime(Behaviour(step_delay_s=0.002))
    model = load(kind, runtime=runtime, parallel=1, max_queue=0)
    prompt = model.tokenize(CHAT)
    stream = model.generate(greedy(prompt, 2000))
    seen = [await anext(stream) for _ in range(3)]
    assert all(event.token_ids for event in seen)
    assert model.stats().requests_running == 1
    await stream.aclose()  # type: ignore[attr-defined]
    await until(lambda: model.stats().requests_running == 0, "the cancelled job to leave the generator")
    assert runtime.log.cancelled == [runtime.log.jobs[0]]
    generator_jobs = runtime.log.jobs[0]
    assert generator_jobs.new_tokens < 2000
    after = await run(model, greedy(prompt, 3))  # the slot is free again (parallel=1, no queue)
    assert after.last.finish_reason == "length"


async def test_a_cancelled_task_cancels_its_job(load: LoadFn) -> None:
    runtime = Runtime(Behaviour(step_delay_s=0.002))
    model = load(runtime=runtime, parallel=1)
    prompt = model.tokenize(CHAT)
    await cancel_a_consuming_task(model, greedy(prompt, 2000))
    await until(lambda: len(runtime.log.cancelled) == 1, "generator.cancel")
    await until(lambda: model.stats().requests_running == 0, "the slot to free")


async def test_a_full_wait_queue_answers_queue_full(load: LoadFn) -> None:
    runtime = Runtime(Behaviour(step_delay_s=0.002))
    model = load(runtime=runtime, parallel=1, max_queue=1)
    prompt = model.tokenize(CHAT)
    first = model.generate(greedy(prompt, 2000))
    await anext(first)
    second = model.generate(greedy(prompt, 2000))  # waits in the queue
    with pytest.raises(QueueFullError) as caught:
        model.generate(greedy(prompt, 5))
    assert caught.value.retry_after_s >= 1
    assert model.stats().requests_waiting == 1
    await first.aclose()  # type: ignore[attr-defined]
    await second.aclose()  # type: ignore[attr-defined]
    await until(lambda: model.stats().requests_running + model.stats().requests_waiting == 0, "both to end")
    outcome = await run(model, greedy(prompt, 2))
    assert outcome.last.finish_reason == "length"


async def test_requests_the_engine_cannot_run_get_an_error_event(load: LoadFn) -> None:
    model = load(context=512)
    for request, words in [
        (greedy([], 4), "empty"),
        (greedy([1] * 600, 4), "context is 512"),
        (greedy([10**6], 4), "outside this model's vocabulary"),
    ]:
        outcome = await run(model, request)
        assert outcome.last.finish_reason == "error"
        assert words in (outcome.last.error or "")


async def test_max_tokens_is_capped_by_the_context_share(load: LoadFn, runtime: Runtime) -> None:
    model = load(runtime=runtime, context=512)
    prompt = model.tokenize(CHAT)
    outcome = await run(model, greedy(prompt, 100_000))
    assert outcome.last.finish_reason == "length"
    assert len(prompt) + len(outcome.tokens) == 512
    assert runtime.log.jobs[0].max_new_tokens == 512 - len(prompt)


async def test_a_generator_failure_ends_the_requests_in_flight_with_an_error(load: LoadFn) -> None:
    runtime = Runtime(Behaviour())
    model = load(runtime=runtime)
    runtime.behaviour.fail_iterate = RuntimeError("CUDA error: an illegal memory access was encountered")
    outcome = await run(model, greedy(model.tokenize(CHAT), 5))
    assert outcome.last.finish_reason == "error"
    assert "illegal memory access" in (outcome.last.error or "")
    again = await run(model, greedy(model.tokenize(CHAT), 2))  # the server keeps serving
    assert again.last.finish_reason == "length"


async def test_logprobs_come_from_the_generators_probabilities(load: LoadFn) -> None:
    model = load()
    outcome = await run(model, greedy(model.tokenize(CHAT), 3, logprobs=2))
    first = outcome.events[0].logprobs[0]
    assert first.token_id == outcome.tokens[0]
    assert first.logprob == pytest.approx(-0.6931, abs=1e-3)  # the stand-in reports p = 0.5
    assert len(first.top) == 2 and first.top[0][0] == first.text


async def test_stats_count_tokens_and_prefix_cache_hits(load: LoadFn) -> None:
    model = load(context=2048)
    shared = model.tokenize("You are a helpful assistant. " * 60)  # more than one 256-token page
    assert len(shared) > 300
    await run(model, greedy(shared + model.tokenize("First?"), 4))
    await run(model, greedy(shared + model.tokenize("Second?"), 4))
    stats = model.stats()
    assert stats.prefix_cache_misses == 1 and stats.prefix_cache_hits == 1
    assert stats.prefix_cache_hit_tokens == 256
    assert stats.decode_tokens_total == 8
    assert stats.prefill_tokens_total == 2 * len(shared) + len(model.tokenize("First?")) + len(
        model.tokenize("Second?")
    )
    assert stats.kv_cache_total_tokens == 2048 * 4
    assert stats.memory == {"cuda_allocated": 1024 * 1024}


async def test_seed_and_sampling_reach_the_sampler(load: LoadFn, runtime: Runtime) -> None:
    model = load(runtime=runtime)
    sampling = SamplingParams(
        temperature=0.7,
        top_p=0.9,
        top_k=40,
        min_p=0.05,
        seed=7,
        repeat_penalty=1.1,
        presence_penalty=0.5,
        frequency_penalty=0.25,
        logit_bias={5: -100.0},
    )
    request = GenerationRequest(prompt_tokens=model.tokenize(CHAT), max_tokens=2, sampling=sampling)
    await run(model, request)
    job = runtime.log.jobs[-1]
    assert job.seed == 7
    assert job.sampler.settings == {
        "rep_p": 1.1,
        "freq_p": 0.25,
        "pres_p": 0.5,
        "rep_sustain_range": int(10e7),
        "rep_decay_range": 0,
        "temperature": 0.7,
        "min_p": 0.05,
        "top_k": 40,
        "top_p": 0.9,
        "temp_last": False,
        "adaptive_target": 1.0,
        "adaptive_decay": 0.9,
        "logit_bias": {5: -100.0},
    }


async def test_closing_the_model_ends_open_requests_and_unloads(load: LoadFn) -> None:
    runtime = Runtime(Behaviour(step_delay_s=0.002))
    model = load(runtime=runtime)
    stream = model.generate(greedy(model.tokenize(CHAT), 2000))
    await anext(stream)
    await asyncio.to_thread(model.close)
    events = [event async for event in stream]
    assert events[-1].finish_reason == "cancelled"
    assert runtime.log.unloaded == 1
