"""The scheduler thread every engine runs its model on; each engine subclasses it with its own steps.

No runtime here may be driven from two threads, so one thread owns the model and the server's
event loop only touches what this class guards with its lock: `submit` queues a job (FIFO,
refused with QueueFullError beyond `max_queue`), a closed stream sets `job.cancelled` and calls
`wake`. Each pass of the thread:

1. waits for work (a queued job, a running one, a task from `run_task`), then lets the engine
   hold the lock a moment longer (`_before_step`, where llama.cpp gathers a burst);
2. runs the tasks, which need the model and so run here, between two steps;
3. steps: first ends the running jobs whose streams closed (`_end_jobs`), so a cancelled request
   frees its sequence before the next decode; then admits waiting jobs while the engine has room
   (`_admission_room`, `_start`); then runs one batched prefill/decode step (`_advance`);
4. hands the step's events to each request's loop, one wake-up per loop.

On `stop` (or a crash) the running and waiting requests end as "cancelled" and `_thread_exit`
frees what the thread owns. This module is runtime-neutral: it must not import any engine runtime.
"""

from __future__ import annotations

import logging
import threading
from abc import ABC, abstractmethod
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass
from typing import Generic, Protocol, TypeVar

from launcher.engines._jobs import UNLOADED, EventOutbox, RequestPace, Tally, refusal
from launcher.engines._streaming import EventStream, StreamJob
from launcher.engines.base import (
    EngineStats,
    FinishReason,
    GenerationEvent,
    GenerationRequest,
    PromptFault,
    TokenLogprob,
)

UNLOADED_WHILE_OPEN = "the model was unloaded"
"""The error of a request still running or waiting when the model is closed."""


class SchedulerJob(StreamJob, Protocol):
    """The part of an engine's job the scheduler base uses."""

    request: GenerationRequest
    submitted_at: float  # time.monotonic() at submission, for the Retry-After estimate


JobT = TypeVar("JobT", bound=SchedulerJob)


@dataclass(frozen=True)
class Occupancy:
    """What the engine holds right now, for stats."""

    running: int
    kv_used_tokens: int
    pending: int = 0  # handed to the runtime but not started by it yet: counted as waiting


class SchedulerThread(ABC, Generic[JobT]):
    """A daemon thread that owns a model; the engine's subclass says how its runtime steps."""

    def __init__(self, *, label: str, thread_name: str, log: logging.Logger, parallel: int, max_queue: int) -> None:
        self._label = label  # the engine, as the log names it
        self._log = log
        self._parallel = parallel
        self._max_queue = max_queue
        self._cv = threading.Condition()
        self._waiting: deque[JobT] = deque()
        self._tasks: deque[Callable[[], None]] = deque()
        self._stopping = False
        self._tally = Tally()
        self._pace = RequestPace()
        self._events = EventOutbox()
        self._thread = threading.Thread(target=self._run, name=thread_name, daemon=True)

    # ----- called from other threads -----------------------------------------------------------

    def start_thread(self) -> None:
        """Start the scheduler thread."""
        self._thread.start()

    def stream(
        self, job: JobT, problem: str | None = None, *, closed: bool = False, fault: PromptFault | None = None
    ) -> EventStream:
        """`job`'s events: queued for the thread, or a single refusal for `problem` (`fault`: the prompt
        check's, `_jobs.PromptCheck`) or UNLOADED once the model is `closed`, without queueing. Raises
        QueueFullError when too many already wait."""
        if closed or problem is not None:
            job.queue.put_nowait(UNLOADED if closed else refusal(job.request, problem or "", fault))
            return EventStream(job, None)
        self.submit(job)
        return EventStream(job, self)

    def submit(self, job: JobT) -> None:
        """Queue a job (FIFO); raise QueueFullError when `max_queue` requests already wait for a slot."""
        with self._cv:
            if self._stopping:
                raise RuntimeError("the model is closed")
            free = self._parallel - self._occupied()
            if len(self._waiting) - free >= self._max_queue:
                # Clients that left while queued do not count: prune them before refusing.
                open_jobs = [waiting for waiting in self._waiting if not waiting.cancelled]
                self._waiting.clear()
                self._waiting.extend(open_jobs)
                if len(self._waiting) - free >= self._max_queue:
                    raise self._pace.queue_full(self._parallel)
            self._waiting.append(job)
            self._cv.notify()

    def run_task(self, task: Callable[[], None]) -> None:
        """Run `task` on the scheduler thread between two steps (for work that needs the model)."""
        with self._cv:
            if self._stopping:
                raise RuntimeError("the model is closed")
            self._tasks.append(task)
            self._cv.notify()

    def wake(self) -> None:
        """Make the scheduler look at cancellations now."""
        with self._cv:
            self._cv.notify()

    def engine_stats(self, *, kv_total_tokens: int, memory: dict[str, int], kv_cap: int | None = None) -> EngineStats:
        """Live numbers for /metrics, read without the lock (`kv_cap` bounds an estimated used count)."""
        held = self._occupancy()
        # a client that left while queued is not waiting any more
        queued = sum(1 for job in list(self._waiting) if not job.cancelled)
        tally = self._tally
        return EngineStats(
            requests_running=held.running,
            requests_waiting=held.pending + queued,
            kv_cache_used_tokens=held.kv_used_tokens if kv_cap is None else min(held.kv_used_tokens, kv_cap),
            kv_cache_total_tokens=kv_total_tokens,
            prefix_cache_hits=tally.prefix_hits,
            prefix_cache_misses=tally.prefix_misses,
            prefix_cache_hit_tokens=tally.prefix_hit_tokens,
            memory=memory,
            prefill_tokens_total=tally.prefill_tokens,
            decode_tokens_total=tally.decode_tokens,
            speculative_draft_tokens_total=tally.draft_tokens,
            speculative_accepted_tokens_total=tally.accepted_draft_tokens,
        )

    def stop(self) -> None:
        """Stop the thread, end every open request as cancelled, and wait for the thread to exit."""
        with self._cv:
            self._stopping = True
            self._cv.notify()
        if self._thread.is_alive():
            self._thread.join()

    # ----- what each engine's runtime does its own way -------------------------------------------

    @abstractmethod
    def _running_jobs(self) -> list[JobT]:
        """The jobs handed to the runtime and not ended yet (any thread may call this)."""

    @abstractmethod
    def _occupancy(self) -> Occupancy:
        """Running jobs and the KV cache they hold, for stats (called from the event loop)."""

    @abstractmethod
    def _start(self, job: JobT) -> None:
        """Hand an admitted job to the runtime (or emit its refusal, e.g. a constraint it cannot run)."""

    @abstractmethod
    def _advance(self) -> None:
        """Run one batched prefill/decode step of the running jobs and emit their events."""

    @abstractmethod
    def _end_jobs(self, jobs: list[JobT], reason: FinishReason, error: str | None = None) -> None:
        """End running jobs early: free their sequences in the runtime and emit their final events."""

    def _occupied(self) -> int:
        """How many of the `parallel` places are taken, for the queue limit (lock held)."""
        return len(self._running_jobs())

    def _admission_room(self) -> int:
        """How many waiting jobs this step may admit (lock held)."""
        return self._parallel - len(self._running_jobs())

    def _before_step(self) -> None:
        """Called with the lock held once there is work, before the tasks and the step run."""

    def _thread_start(self) -> bool:
        """First thing on the thread (a runtime that must be set up there); False: do not run."""
        return True

    def _thread_exit(self) -> None:
        """Last thing on the thread, after every request has ended: free what the thread owns."""

    def _unloaded_event(self, job: JobT) -> GenerationEvent:
        """The final event of a job still waiting when the model is closed."""
        del job
        return GenerationEvent(finish_reason="cancelled", error=UNLOADED_WHILE_OPEN)

    # ----- the scheduler thread ----------------------------------------------------------------

    def _run(self) -> None:
        if not self._thread_start():
            return
        try:
            while True:
                with self._cv:
                    while not (self._stopping or self._waiting or self._tasks or self._running_jobs()):
                        self._cv.wait()
                    if not self._stopping:
                        self._before_step()  # may wait on the lock, so stop may have come meanwhile
                    if self._stopping:
                        break
                    tasks = list(self._tasks)
                    self._tasks.clear()
                for task in tasks:
                    task()
                try:
                    self._step()
                finally:
                    self._events.flush()
        except Exception:
            self._log.exception("%s scheduler crashed", self._label)
        finally:
            self._shutdown()

    def _step(self) -> None:
        closed = [job for job in self._running_jobs() if job.cancelled]
        if closed:
            self._end_jobs(closed, "cancelled")
        self._admit()
        if self._running_jobs():
            self._advance()

    def _admit(self) -> None:
        jobs: list[JobT] = []
        with self._cv:
            room = self._admission_room()
            while self._waiting and len(jobs) < room:
                job = self._waiting.popleft()
                if not job.cancelled:
                    jobs.append(job)
        for job in jobs:
            self._start(job)

    def _shutdown(self) -> None:
        with self._cv:
            self._stopping = True
            waiting = list(self._waiting)
            self._waiting.clear()
        running = self._running_jobs()
        if running:
            self._end_jobs(running, "cancelled", UNLOADED_WHILE_OPEN)
        for job in waiting:
            self._events.emit(job, self._unloaded_event(job))
        self._events.flush()
        self._thread_exit()

    def _final_event(
        self,
        job: JobT,
        reason: FinishReason,
        *,
        completion_tokens: int,
        cached_prompt_tokens: int = 0,
        disk_prompt_tokens: int = 0,
        draft_tokens: int = 0,
        accepted_draft_tokens: int = 0,
        error: str | None = None,
        text: str = "",
        token_ids: tuple[int, ...] = (),
        logprobs: tuple[TokenLogprob, ...] = (),
    ) -> GenerationEvent:
        """A job's last event, with its usage counts."""
        return GenerationEvent(
            token_ids=token_ids,
            text=text,
            logprobs=logprobs,
            finish_reason=reason,
            prompt_tokens=len(job.request.prompt_tokens),
            cached_prompt_tokens=cached_prompt_tokens,
            disk_prompt_tokens=disk_prompt_tokens,
            completion_tokens=completion_tokens,
            draft_tokens=draft_tokens,
            accepted_draft_tokens=accepted_draft_tokens,
            error=error,
        )
