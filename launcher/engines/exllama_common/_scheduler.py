"""One thread owns the ExLlama dynamic generator: it enqueues jobs, iterates, and routes results.

The generator is not thread-safe, so every call into it happens here. The server's event loop
only touches thread-safe state: `submit` appends to an inbox under a lock, a closed stream sets
`job.cancelled` and wakes the thread, which calls `generator.cancel(job)` before its next
`iterate()` (so a cancelled request frees its pages within one step). Results travel back with
`loop.call_soon_threadsafe`, one wake-up per loop per step.

Batching is the generator's own: it runs up to `max_batch_size` jobs and keeps the rest pending;
the launcher bounds how many may wait (`max_queue`) and answers QueueFullError beyond that.
"""

from __future__ import annotations

import asyncio
import logging
import math
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from launcher.engines._jobs import EventOutbox, RequestPace, SchedulerCounters, Tally
from launcher.engines.base import FinishReason, GenerationEvent, GenerationRequest, TokenLogprob
from launcher.engines.exllama_common._backend import Backend, JobSpec

log = logging.getLogger("launcher.engines.exllama")

# eos_reason values of the result dicts (generator.iterate docstrings in both runtimes).
_LENGTH_REASONS = frozenset({"max_new_tokens"})


@dataclass(eq=False)
class Job:
    """A request from `submit` to its last event."""

    request: GenerationRequest
    spec: JobSpec
    loop: asyncio.AbstractEventLoop
    queue: asyncio.Queue[GenerationEvent]
    submitted_at: float = field(default_factory=time.monotonic)
    cancelled: bool = False
    native: Any = None
    started: bool = False
    prefilled: int = 0
    generated: int = 0


def flat_list(value: Any) -> list[Any]:
    """A tensor (or nested list) of shape (1, n[, k]) as a list over n (of lists over k)."""
    if value is None:
        return []
    if hasattr(value, "tolist"):
        value = value.tolist()
    if isinstance(value, list) and len(value) == 1 and isinstance(value[0], list):
        value = value[0]  # drop the batch dimension (one sequence per job)
    return value if isinstance(value, list) else [value]


class Scheduler:
    """The generator's owner thread; `submit`, `wake`, `counters` and `stop` are called from other threads."""

    def __init__(self, backend: Backend, *, parallel: int, max_queue: int, piece: Callable[[int], str]) -> None:
        self._backend = backend
        self._parallel = parallel
        self._max_queue = max_queue
        self._piece = piece
        self._cv = threading.Condition()
        self._inbox: list[Job] = []
        self._live: list[Job] = []  # enqueued in the generator, in submission order
        self._stopping = False
        self._events = EventOutbox()
        self._tally = Tally()
        self._pace = RequestPace()
        self._thread = threading.Thread(target=self._run, name="exllama-scheduler", daemon=True)

    # ----- called from other threads -----------------------------------------------------------

    def start(self) -> None:
        """Start the scheduler thread."""
        self._thread.start()

    def submit(self, job: Job) -> None:
        """Hand a job to the generator; raise QueueFullError when `max_queue` requests already wait."""
        with self._cv:
            if self._stopping:
                raise RuntimeError("the model is closed")
            if self._waiting_with_one_more() > self._max_queue:
                self._inbox = [j for j in self._inbox if not j.cancelled]
                if self._waiting_with_one_more() > self._max_queue:
                    raise self._pace.queue_full(self._parallel)
            self._inbox.append(job)
            self._cv.notify()

    def _waiting_with_one_more(self) -> int:
        open_jobs = sum(1 for j in self._live if not j.cancelled) + len(self._inbox) + 1
        return max(0, open_jobs - self._parallel)

    def wake(self) -> None:
        """Make the thread look at cancellations now."""
        with self._cv:
            self._cv.notify()

    def counters(self) -> SchedulerCounters:
        """Live numbers for stats()."""
        live = list(self._live)
        running = [j for j in live if j.started]
        return self._tally.snapshot(
            running=len(running),
            waiting=len(live) - len(running) + sum(1 for job in list(self._inbox) if not job.cancelled),
            kv_used_tokens=sum(j.prefilled + j.generated for j in running),
        )

    def stop(self) -> None:
        """Stop the thread; open requests end as cancelled."""
        with self._cv:
            self._stopping = True
            self._cv.notify()
        if self._thread.is_alive():
            self._thread.join()

    # ----- the scheduler thread ----------------------------------------------------------------

    def _run(self) -> None:
        try:
            while True:
                with self._cv:
                    while not (self._stopping or self._inbox or self._live):
                        self._cv.wait()
                    if self._stopping:
                        break
                    arrivals, self._inbox = self._inbox, []
                try:
                    self._step(arrivals)
                finally:
                    self._events.flush()
        except Exception:
            log.exception("ExLlama scheduler crashed")
        finally:
            self._shutdown()

    def _step(self, arrivals: list[Job]) -> None:
        for job in arrivals:
            self._enqueue(job)
        for job in [j for j in self._live if j.cancelled]:
            self._drop(job, "cancelled")
        if not self._live:
            return
        try:
            results = self._backend.iterate()
        except Exception as err:  # a CUDA error or OOM ends the jobs in flight, not the server
            log.exception("generator.iterate failed")
            for job in list(self._live):
                self._drop(job, "error", f"the generator failed: {err}")
            return
        for result in results:
            owner = result.get("identifier")
            if isinstance(owner, Job) and owner in self._live:
                self._route(owner, result)

    def _enqueue(self, job: Job) -> None:
        if job.cancelled:
            return
        try:
            job.native = self._backend.make_job(job.spec)
            self._backend.enqueue(job.native)
        except Exception as err:  # a grammar the tokenizer cannot follow, a job the cache cannot hold
            self._events.emit(
                job,
                GenerationEvent(
                    finish_reason="error", error=str(err) or type(err).__name__, prompt_tokens=len(job.spec.prompt)
                ),
            )
            return
        self._live.append(job)

    def _drop(self, job: Job, reason: FinishReason, error: str | None = None) -> None:
        """End a job early: free its pages in the generator and tell the listener (if any)."""
        try:
            self._backend.cancel(job.native)
        except Exception:
            log.exception("generator.cancel failed")
        self._live.remove(job)
        self._events.emit(job, self._final(job, reason, error=error))

    def _final(
        self,
        job: Job,
        reason: FinishReason,
        *,
        cached: int = 0,
        error: str | None = None,
        tokens: tuple[int, ...] = (),
        text: str = "",
        logprobs: tuple[TokenLogprob, ...] = (),
    ) -> GenerationEvent:
        return GenerationEvent(
            token_ids=tokens,
            text=text,
            logprobs=logprobs,
            finish_reason=reason,
            prompt_tokens=len(job.spec.prompt),
            cached_prompt_tokens=cached,
            completion_tokens=job.generated,
            error=error,
        )

    def _route(self, job: Job, result: dict[str, Any]) -> None:
        stage = result.get("stage")
        if stage == "started":
            job.started = True
            return
        if stage == "prefill":
            job.started = True
            progress = int(result.get("curr_progress", job.prefilled))
            self._tally.prefill_tokens += max(0, progress - job.prefilled)
            job.prefilled = max(job.prefilled, progress)
            return
        if stage != "streaming":
            return
        if not job.started or job.prefilled < len(job.spec.prompt):
            self._tally.prefill_tokens += max(0, len(job.spec.prompt) - job.prefilled)
            job.started, job.prefilled = True, len(job.spec.prompt)
        tokens = tuple(int(t) for t in flat_list(result.get("token_ids")))
        job.generated += len(tokens)
        self._tally.decode_tokens += len(tokens)
        text = str(result.get("text", ""))
        logprobs = self._logprobs(job, tokens, result) if job.spec.top_logprobs is not None else ()
        if not result.get("eos"):
            if tokens or text:
                self._events.emit(job, GenerationEvent(token_ids=tokens, text=text, logprobs=logprobs))
            return
        reason: FinishReason = "length" if result.get("eos_reason") in _LENGTH_REASONS else "stop"
        cached = int(result.get("cached_tokens", 0) or 0)
        self._tally.prefix_lookup(cached)
        self._live.remove(job)
        self._pace.finished(job.submitted_at)
        self._events.emit(job, self._final(job, reason, cached=cached, tokens=tokens, text=text, logprobs=logprobs))

    def _logprobs(self, job: Job, tokens: tuple[int, ...], result: dict[str, Any]) -> tuple[TokenLogprob, ...]:
        probs = flat_list(result.get("token_probs"))
        top_tokens = flat_list(result.get("top_k_tokens"))
        top_probs = flat_list(result.get("top_k_probs"))
        out = []
        for i, token in enumerate(tokens):
            prob = float(probs[i]) if i < len(probs) else 1.0
            top: tuple[tuple[str, float], ...] = ()
            if i < len(top_tokens) and i < len(top_probs):
                row_tokens, row_probs = top_tokens[i], top_probs[i]
                row_tokens = row_tokens if isinstance(row_tokens, list) else [row_tokens]
                row_probs = row_probs if isinstance(row_probs, list) else [row_probs]
                top = tuple((self._piece(int(t)), _log(float(p))) for t, p in zip(row_tokens, row_probs, strict=False))
            out.append(TokenLogprob(token_id=token, text=self._piece(token), logprob=_log(prob), top=top))
        return tuple(out)

    def _shutdown(self) -> None:
        with self._cv:
            self._stopping = True
            waiting, self._inbox = self._inbox, []
        for job in list(self._live):
            self._drop(job, "cancelled", "the model was unloaded")
        for job in waiting:
            self._events.emit(job, self._final(job, "cancelled", error="the model was unloaded"))
        self._events.flush()


def _log(probability: float) -> float:
    # A finite floor: JSON has no -Infinity, and a zero probability only comes from rounding.
    return math.log(probability) if probability > 0 else -9999.0
