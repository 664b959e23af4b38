"""The scheduler thread every engine subclasses, driven by a counting stand-in engine, and the one
prompt check every engine makes before queueing."""

from __future__ import annotations

import asyncio
import logging
import threading
import time
from collections.abc import AsyncIterator
from dataclasses import dataclass, field

import pytest

from launcher.engines._jobs import UNLOADED, check_prompt
from launcher.engines._scheduler_base import UNLOADED_WHILE_OPEN, Occupancy, SchedulerThread
from launcher.engines.base import FinishReason, GenerationEvent, GenerationRequest, QueueFullError


@dataclass(eq=False)
class CountingJob:
    request: GenerationRequest
    loop: asyncio.AbstractEventLoop
    queue: asyncio.Queue[GenerationEvent]
    submitted_at: float = field(default_factory=time.monotonic)
    cancelled: bool = False
    generated: int = 0


class CountingScheduler(SchedulerThread[CountingJob]):
    """An engine whose every step gives each running job one more token (its count so far)."""

    def __init__(self, *, parallel: int = 1, max_queue: int = 1) -> None:
        super().__init__(
            label="counting",
            thread_name="counting-scheduler",
            log=logging.getLogger("tests.counting"),
            parallel=parallel,
            max_queue=max_queue,
        )
        self.running: list[CountingJob] = []
        self.freed: list[CountingJob] = []

    def job(self, prompt: list[int], max_tokens: int) -> CountingJob:
        request = GenerationRequest(prompt_tokens=prompt, max_tokens=max_tokens)
        return CountingJob(request=request, loop=asyncio.get_running_loop(), queue=asyncio.Queue())

    def _running_jobs(self) -> list[CountingJob]:
        return list(self.running)

    def _occupancy(self) -> Occupancy:
        running = list(self.running)
        return Occupancy(
            running=len(running), kv_used_tokens=sum(len(j.request.prompt_tokens) + j.generated for j in running)
        )

    def _start(self, job: CountingJob) -> None:
        self.running.append(job)

    def _advance(self) -> None:
        time.sleep(0.002)  # a decode step takes a moment, so a test can close a stream between two
        for job in list(self.running):
            job.generated += 1
            self._events.emit(job, GenerationEvent(token_ids=(job.generated,), text="x"))
            if job.generated >= job.request.max_tokens:
                self.running.remove(job)
                self._events.emit(job, self._final_event(job, "length", completion_tokens=job.generated))

    def _end_jobs(self, jobs: list[CountingJob], reason: FinishReason, error: str | None = None) -> None:
        for job in jobs:
            self.running.remove(job)
            self.freed.append(job)
            self._events.emit(job, self._final_event(job, reason, completion_tokens=job.generated, error=error))


async def events_of(stream: AsyncIterator[GenerationEvent]) -> list[GenerationEvent]:
    return [event async for event in stream]


# ----- the prompt check --------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("prompt", "max_tokens", "problem"),
    [
        ([], 4, "the prompt is empty"),
        ([5, 100], 4, "outside this model's vocabulary (0..99)"),
        ([-1], 4, "outside this model's vocabulary"),
        (list(range(16)), 4, "the prompt is 16 tokens but the context is 16 tokens per request"),
        ([1, 2], 0, "max_tokens must be at least 1"),
    ],
)
def test_the_prompt_check_says_what_to_change(prompt: list[int], max_tokens: int, problem: str) -> None:
    checked = check_prompt(GenerationRequest(prompt_tokens=prompt, max_tokens=max_tokens), vocab_size=100, context=16)
    assert checked.problem is not None and problem in checked.problem


def test_the_prompt_check_bounds_max_tokens_by_the_room_left_in_the_context() -> None:
    asked = GenerationRequest(prompt_tokens=[1, 2, 3], max_tokens=50, request_id="r1")
    checked = check_prompt(asked, vocab_size=100, context=16)
    assert checked.problem is None
    assert checked.request.max_tokens == 13 and checked.request.request_id == "r1"
    assert asked.max_tokens == 50  # the caller's request is left as it was
    fits = GenerationRequest(prompt_tokens=[1, 2, 3], max_tokens=13)
    assert check_prompt(fits, vocab_size=100, context=16).request is fits


# ----- the scheduler thread ----------------------------------------------------------------------


async def test_a_job_runs_to_its_length_with_usage_counts() -> None:
    scheduler = CountingScheduler()
    scheduler.start_thread()
    try:
        events = await events_of(scheduler.stream(scheduler.job([1, 2, 3], 4)))
        assert [event.token_ids for event in events[:-1]] == [(1,), (2,), (3,), (4,)]
        last = events[-1]
        assert (last.finish_reason, last.prompt_tokens, last.completion_tokens) == ("length", 3, 4)
        stats = scheduler.engine_stats(kv_total_tokens=64, memory={})
        assert (stats.requests_running, stats.requests_waiting, stats.kv_cache_total_tokens) == (0, 0, 64)
    finally:
        scheduler.stop()


async def test_a_refused_or_late_request_gets_one_event_and_is_never_queued() -> None:
    scheduler = CountingScheduler()
    refused = await events_of(scheduler.stream(scheduler.job([1], 4), "the prompt is bad"))
    assert len(refused) == 1 and refused[0].request_error and refused[0].error == "the prompt is bad"
    assert await events_of(scheduler.stream(scheduler.job([1], 4), closed=True)) == [UNLOADED]
    assert scheduler.engine_stats(kv_total_tokens=0, memory={}).requests_waiting == 0


async def test_the_queue_refuses_beyond_max_queue_but_not_for_clients_that_left() -> None:
    scheduler = CountingScheduler(parallel=1, max_queue=1)  # not started: everything waits
    # kept, as a stream dropped unread counts as closed
    first = scheduler.stream(scheduler.job([1], 4))
    second = scheduler.stream(scheduler.job([1], 4))  # one place, one waiting beyond it
    with pytest.raises(QueueFullError) as caught:
        scheduler.stream(scheduler.job([1], 4))
    assert caught.value.retry_after_s >= 1.0
    await first.aclose()
    third = scheduler.stream(scheduler.job([1], 4))  # the closed one is pruned, so this one fits
    assert scheduler.engine_stats(kv_total_tokens=0, memory={}).requests_waiting == 2
    del second, third
    scheduler.stop()


async def test_closing_a_stream_frees_the_job_at_the_next_step_and_admits_the_next() -> None:
    scheduler = CountingScheduler(parallel=1, max_queue=1)
    scheduler.start_thread()
    try:
        long = scheduler.stream(scheduler.job([1, 2], 10_000))
        waiting = scheduler.stream(scheduler.job([1], 3))
        assert (await anext(long)).token_ids == (1,)
        await long.aclose()
        events = await events_of(waiting)
        assert events[-1].finish_reason == "length" and events[-1].completion_tokens == 3
        (closed,) = scheduler.freed
        assert closed.generated < 10_000
        # its final event was delivered in the step that freed it, before the next job's first token
        leftover = [closed.queue.get_nowait() for _ in range(closed.queue.qsize())]
        assert (leftover[-1].finish_reason, leftover[-1].error) == ("cancelled", None)
    finally:
        scheduler.stop()


async def test_stop_ends_running_and_waiting_requests_and_joins_the_thread() -> None:
    scheduler = CountingScheduler(parallel=1, max_queue=1)
    scheduler.start_thread()
    running = scheduler.stream(scheduler.job([1], 10_000))
    waiting = scheduler.stream(scheduler.job([1], 10_000))
    assert (await anext(running)).token_ids
    await asyncio.to_thread(scheduler.stop)
    assert "counting-scheduler" not in {thread.name for thread in threading.enumerate()}
    for stream in (running, waiting):
        last = (await events_of(stream))[-1]
        assert (last.finish_reason, last.error) == ("cancelled", UNLOADED_WHILE_OPEN)
    with pytest.raises(RuntimeError, match="closed"):
        scheduler.submit(scheduler.job([1], 4))


async def test_a_task_runs_on_the_scheduler_thread_between_steps() -> None:
    scheduler = CountingScheduler()
    scheduler.start_thread()
    try:
        ran_on: list[str] = []
        done = threading.Event()

        def task() -> None:
            ran_on.append(threading.current_thread().name)
            done.set()

        scheduler.run_task(task)
        assert await asyncio.to_thread(done.wait, 5.0)
        assert ran_on == ["counting-scheduler"]
    finally:
        scheduler.stop()
