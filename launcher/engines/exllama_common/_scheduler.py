"""One thread owns the ExLlama dynamic generator: it enqueues jobs, iterates, and routes results.

The generator is not thread-safe, so every call into it happens here. The server's event loop
only touches thread-safe state: `submit` appends to an inbox under a lock, a closed stream sets
`job.cancelled` and wakes the thread, which calls `generator.cancel(job)` before its next
`iterate()` (so a cancelled request frees its pages within one step). Results travel back with
`loop.call_soon_threadsafe`, one wake-up per loop per step.

Batching is the generator's own: it runs up to `max_batch_size` jobs and keeps the rest pending;
the launcher bounds how many may wait (`max_queue`) and answers QueueFullError beyond that. The
thread, the wait queue and cancellation are `_scheduler_base`'s; this module drives the generator.
"""

from __future__ import annotations

import asyncio
import logging
import math
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from launcher.engines._scheduler_base import UNLOADED_WHILE_OPEN, Occupancy, SchedulerThread
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


class Scheduler(SchedulerThread[Job]):
    """The generator's owner thread; `submit`, `wake`, `engine_stats` and `stop` are called from other threads."""

    def __init__(self, backend: Backend, *, parallel: int, max_queue: int, piece: Callable[[int], str]) -> None:
        super().__init__(
            label="ExLlama", thread_name="exllama-scheduler", log=log, parallel=parallel, max_queue=max_queue
        )
        self._backend = backend
        self._piece = piece
        self._live: list[Job] = []  # enqueued in the generator, in submission order

    # ----- the scheduler base's hooks ------------------------------------------------------------

    def _running_jobs(self) -> list[Job]:
        return list(self._live)

    def _occupied(self) -> int:
        # a job whose stream closed leaves the generator at the next step: its place is as good as free
        return sum(1 for job in self._live if not job.cancelled)

    def _admission_room(self) -> int:
        return len(self._waiting)  # the generator keeps jobs beyond its batch pending itself

    def _occupancy(self) -> Occupancy:
        live = list(self._live)
        running = [j for j in live if j.started]
        return Occupancy(
            running=len(running),
            pending=len(live) - len(running),
            kv_used_tokens=sum(j.prefilled + j.generated for j in running),
        )

    def _start(self, job: Job) -> None:
        try:
            job.native = self._backend.make_job(job.spec)
            self._backend.enqueue(job.native)
        except Exception as err:  # a grammar the tokenizer cannot follow, a job the cache cannot hold
            self._events.emit(
                job, self._final_event(job, "error", completion_tokens=0, error=str(err) or type(err).__name__)
            )
            return
        self._live.append(job)

    def _advance(self) -> None:
        try:
            results = self._backend.iterate()
        except Exception as err:  # a CUDA error or OOM ends the jobs in flight, not the server
            log.exception("generator.iterate failed")
            self._end_jobs(list(self._live), "error", f"the generator failed: {err}")
            return
        for result in results:
            owner = result.get("identifier")
            if isinstance(owner, Job) and owner in self._live:
                self._route(owner, result)

    def _end_jobs(self, jobs: list[Job], reason: FinishReason, error: str | None = None) -> None:
        """End jobs early: free their pages in the generator and tell the listeners (if any)."""
        for job in jobs:
            try:
                self._backend.cancel(job.native)
            except Exception:
                log.exception("generator.cancel failed")
            self._live.remove(job)
            self._events.emit(job, self._final_event(job, reason, completion_tokens=job.generated, error=error))

    def _unloaded_event(self, job: Job) -> GenerationEvent:
        return self._final_event(job, "cancelled", completion_tokens=job.generated, error=UNLOADED_WHILE_OPEN)

    # ----- the scheduler thread ----------------------------------------------------------------

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
        final = self._final_event(
            job,
            reason,
            completion_tokens=job.generated,
            cached_prompt_tokens=cached,
            token_ids=tokens,
            text=text,
            logprobs=logprobs,
        )
        self._events.emit(job, final)

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


def _log(probability: float) -> float:
    # A finite floor: JSON has no -Infinity, and a zero probability only comes from rounding.
    return math.log(probability) if probability > 0 else -9999.0
