"""Continuous batching for the MLX engine, on the one thread that owns the model.

MLX arrays and streams are not meant to be shared between threads, so this thread loads the
model, runs every step and frees everything at the end; other threads only queue work here.

Batching is mlx-lm's own `BatchGenerator` (the one `mlx_lm.server` uses): it takes per-sequence
samplers, logits processors, stop tokens, max_tokens and a starting KV cache, accepts new
sequences between steps (their prompts are read in chunks while the others keep decoding) and
removes sequences mid-flight. We keep admission (at most `parallel` sequences), the wait queue,
cancellation and event delivery (`_scheduler_base`). Prompt caching is mlx-lm's `LRUPromptCache`:
a finished request's KV cache is kept under its tokens, and a later prompt starts from the longest
cached prefix (trimmed with mlx-lm's cache trimming when the cached entry runs past the shared part).
Under it, the prompt cache on disk (`_disk_tier`): a finished sequence's KV cache is also written
there, and a prompt that memory serves much less of than the disk starts from a stored entry.
Speculative decoding (`_speculative`: n-gram drafts, and a `--draft` model's) replaces the
BatchGenerator's generation step with one that verifies each sequence's draft in the same batched
forward, where the model's caches allow it.

Known limitation of mlx's Linux CPU build (0.32): once a non-main thread has run ops large enough
to be split across CPU workers (e.g. a prompt longer than one prefill step), the process may abort
at interpreter exit ("terminate called without an active exception", exit code 134), after all
work and output are done. mlx-lm's BatchGenerator driven from a thread shows it without this engine.
"""

from __future__ import annotations

import asyncio
import logging
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from launcher.core.config import SpeculativeMode
from launcher.engines._scheduler_base import Occupancy, SchedulerThread
from launcher.engines.base import FinishReason, GenerationEvent, GenerationRequest, TokenLogprob
from launcher.engines.mlx._disk_tier import DiskTier, reusable
from launcher.engines.mlx._sampling import GrammarProcessor, make_processors, make_sampler
from launcher.engines.mlx._tokens import IncrementalText, TokenizerAccess
from launcher.engines.prompt_cache import PromptDiskCache

if TYPE_CHECKING:  # the modules import mlx, which is loaded on the scheduler thread
    from launcher.engines.mlx._draft import MlxDraftModel
    from launcher.engines.mlx._speculative import SpeculativeBatch

log = logging.getLogger("launcher.engines.mlx")

PREFILL_STEP_TOKENS = 512  # prompt tokens read per step: bounds how long one step stalls the others
_CACHE_KEY = "model"  # LRUPromptCache keys entries by model; we have one


@dataclass(eq=False)
class Job:
    """A request from submission to its last event."""

    request: GenerationRequest
    loop: asyncio.AbstractEventLoop
    queue: asyncio.Queue[GenerationEvent]
    submitted_at: float = field(default_factory=time.monotonic)
    cancelled: bool = False
    uid: int = -1
    text: IncrementalText | None = None
    grammar: GrammarProcessor | None = None  # the request's constraint, compiled when it was made
    generated: int = 0
    cached_prompt_tokens: int = 0
    disk_prompt_tokens: int = 0  # of cached_prompt_tokens, those put back from the prompt cache on disk


@dataclass(frozen=True)
class Loaded:
    """What the loader hands the scheduler: the model and the facts it needs to run it."""

    model: Any
    tokenizer: Any  # mlx-lm TokenizerWrapper
    config: dict[str, Any]
    draft: MlxDraftModel | None = None  # `--draft`: a small model guessing the next tokens (`_draft`)


class Scheduler(SchedulerThread[Job]):
    """Owns the MLX model on its own thread; `submit` is called from the server's event loop."""

    def __init__(
        self,
        loader: Callable[[], Loaded],
        *,
        parallel: int,
        max_queue: int,
        cache_bytes: int,
        speculative: SpeculativeMode = "auto",
    ) -> None:
        super().__init__(label="MLX", thread_name="mlx-scheduler", log=log, parallel=parallel, max_queue=max_queue)
        self._loader = loader
        self._cache_bytes = cache_bytes
        self._running: dict[int, Job] = {}  # by mlx-lm's uid
        self._generator: Any = None  # mlx-lm BatchGenerator, made and used on the scheduler thread only
        self._cache: Any = None  # mlx-lm LRUPromptCache, likewise
        self._ready = threading.Event()
        self._load_error: BaseException | None = None
        self.loaded: Loaded | None = None
        self._tokens: TokenizerAccess | None = None
        self._eos: list[list[int]] = []
        self._n_vocab = 0
        self._disk: DiskTier | None = None
        self._layer_classes: list[str] = []  # of a fresh KV cache of the model, and whether all can be cut back
        self._trimmable = True
        self._speculative: SpeculativeMode = speculative  # the server's setting; a request may override it
        self._speculation: SpeculativeBatch | None = None  # None: this model decodes one token per step
        self.memory: dict[str, int] = {}

    # ----- called from other threads -----------------------------------------------------------

    def start(self) -> Loaded:
        """Start the thread, wait until it has loaded the model; re-raise the loader's error."""
        self.start_thread()
        self._ready.wait()
        if self._load_error is not None:
            self._thread.join()
            raise self._load_error
        assert self.loaded is not None
        return self.loaded

    def configure(
        self, tokens: TokenizerAccess, eos_ids: list[int], n_vocab: int, disk_cache: PromptDiskCache | None = None
    ) -> None:
        """Facts the steps need, known once the model and tokenizer are loaded (before any submit)."""
        self._tokens = tokens
        self._eos = [[t] for t in eos_ids]
        self._n_vocab = n_vocab
        if disk_cache is not None and disk_cache.enabled:
            self._disk = DiskTier(disk_cache, self._layer_classes, self._trimmable)

    @property
    def cache_layout(self) -> str:
        """The model's KV cache kinds, for the prompt cache's key (known once started)."""
        kinds = ", ".join(sorted(set(self._layer_classes)))
        return f"{len(self._layer_classes)} layers: {kinds}"

    # ----- the scheduler base's hooks ------------------------------------------------------------

    def _running_jobs(self) -> list[Job]:
        return list(self._running.values())

    def _occupancy(self) -> Occupancy:
        running = list(self._running.values())
        return Occupancy(
            running=len(running), kv_used_tokens=sum(len(j.request.prompt_tokens) + j.generated for j in running)
        )

    def _thread_start(self) -> bool:
        import mlx.core as mx
        from mlx_lm.generate import BatchGenerator
        from mlx_lm.models.cache import LRUPromptCache, can_trim_prompt_cache, make_prompt_cache

        try:
            self.loaded = self._loader()
        except BaseException as err:  # handed to start(), which raises it on the loading thread
            self._load_error = err
            self._ready.set()
            return False
        # A stream made on this thread, as mlx_lm.server does: all generation runs on it.
        stream = mx.default_stream(mx.default_device())
        self._generator = BatchGenerator(
            self.loaded.model,
            completion_batch_size=self._parallel,
            prefill_batch_size=self._parallel,
            prefill_step_size=PREFILL_STEP_TOKENS,
            stream=stream,
        )
        self._cache = LRUPromptCache(max_size=max(4, 2 * self._parallel), max_bytes=self._cache_bytes)
        template = make_prompt_cache(self.loaded.model)
        self._layer_classes = [type(layer).__name__ for layer in template]
        self._trimmable = bool(can_trim_prompt_cache(template))
        self._install_speculation(template)
        self._update_memory()
        self._ready.set()
        return True

    def _install_speculation(self, template: list[Any]) -> None:
        """Speculative decoding (`_speculative`), where every layer's cache can take back rejected
        draft tokens; otherwise (sliding-window or recurrent layers) none, whatever the setting."""
        from launcher.engines.mlx._speculative import SpeculativeBatch, supported

        draft = self.loaded.draft if self.loaded is not None else None
        if not supported(template):
            log.info("speculative decoding off for this model: its %s cannot drop draft tokens", self.cache_layout)
            if draft is not None:
                log.warning("the draft model is not used: this model cannot take back the tokens it rejects")
            return
        self._speculation = SpeculativeBatch.install(self._generator, draft)
        if self._speculation is None:
            log.warning("speculative decoding off: mlx-lm's BatchGenerator is not built as this engine expects")

    def _thread_exit(self) -> None:
        import mlx.core as mx

        self._generator.close()
        self._generator = self._cache = None
        self.loaded = None
        mx.clear_cache()

    def _end_jobs(self, jobs: list[Job], reason: FinishReason, error: str | None = None) -> None:
        if not self._stopping:  # when stopping, the whole generator is closed after this instead
            self._generator.remove([job.uid for job in jobs])
        for job in jobs:
            self._finish(job, reason, error)

    # ----- the scheduler thread ----------------------------------------------------------------

    def _advance(self) -> None:
        _prompt_responses, responses = self._generator.next()
        self._tally.decode_tokens += len(responses)  # accepted draft tokens included: one response each
        if self._speculation is not None:
            drafted, accepted = self._speculation.take_counts()
            self._tally.draft_tokens += drafted
            self._tally.accepted_draft_tokens += accepted
        failed: list[int] = []
        finished: list[tuple[list[int], Any]] = []
        for response in responses:
            owner = self._running.get(response.uid)
            if owner is None:
                continue
            if response.finish_reason is not None and response.prompt_cache is not None:
                # all_tokens are exactly what the KV cache holds: mlx-lm runs each token it returns through
                # the model before returning it, the last one included.
                tokens = list(response.all_tokens)
                self._cache.insert_cache(_CACHE_KEY, tokens, response.prompt_cache)
                finished.append((tokens, response.prompt_cache))
            if not self._deliver(owner, response):
                failed.append(owner.uid)
        if failed:
            self._generator.remove(failed)
        if finished and self._disk is not None:
            self._events.flush()  # the replies end now; copying their states out for the disk takes a while
            for tokens, caches in finished:
                self._disk.save(tokens, caches)
        self._update_memory()

    def _deliver(self, job: Job, response: Any) -> bool:
        """Turn one generated token into events; False when the job ended but mlx-lm still runs it."""
        if job.grammar is not None and job.grammar.failed:
            self._finish(job, "error", f"constrained decoding failed: {job.grammar.failed}")
            return response.finish_reason is not None
        if response.finish_reason == "stop":  # an end-of-generation token: not part of the text
            self._finish(job, "stop")
            return True
        token = int(response.token)
        job.generated += 1
        assert job.text is not None
        text = job.text.add(token)
        logprobs: tuple[TokenLogprob, ...] = ()
        if job.request.logprobs is not None:
            logprobs = (self._logprob(token, response.logprobs, job.request.logprobs),)
        # the cached share rides on every token: the server counts the prompt it read at the first one
        event = GenerationEvent(
            token_ids=(token,), text=text, logprobs=logprobs, cached_prompt_tokens=job.cached_prompt_tokens
        )
        self._events.emit(job, event)
        if response.finish_reason is not None:
            self._finish(job, "length")
        return True

    def _logprob(self, token: int, logprobs: Any, top_n: int) -> TokenLogprob:
        import mlx.core as mx
        import numpy as np

        assert self._tokens is not None
        values = np.array(logprobs.astype(mx.float32), dtype=np.float64)
        top: tuple[tuple[str, float], ...] = ()
        if top_n > 0:
            count = min(top_n, values.shape[0])
            candidates = np.argpartition(values, -count)[-count:]
            ordered = candidates[np.argsort(values[candidates])[::-1]]
            top = tuple((self._tokens.decode([int(t)]), float(values[t])) for t in ordered)
        return TokenLogprob(token_id=token, text=self._tokens.decode([token]), logprob=float(values[token]), top=top)

    # ----- admission and prefix reuse ------------------------------------------------------------

    def _start(self, job: Job) -> None:
        from mlx_lm.generate import StopSequences
        from mlx_lm.models.cache import can_trim_prompt_cache, trim_prompt_cache

        assert self._tokens is not None
        request = job.request
        prompt = list(request.prompt_tokens)
        prompt_cache, rest = self._cache.fetch_nearest_cache(_CACHE_KEY, prompt)
        disk_seconds: float | None = None
        from_disk = self._restore_from_disk(prompt, in_memory=len(prompt) - len(rest))
        if from_disk is not None:
            (prompt_cache, rest), disk_seconds = from_disk
        if prompt_cache is not None and not rest:
            # The whole prompt is cached; read its last token again to get the next-token logits.
            if can_trim_prompt_cache(prompt_cache):
                trim_prompt_cache(prompt_cache, 1)
                rest = prompt[-1:]
            else:
                prompt_cache, rest = None, prompt
        reused = len(prompt) - len(rest)
        job.disk_prompt_tokens = 0
        if disk_seconds is not None and self._disk is not None:
            job.disk_prompt_tokens = reused
            self._disk.cache.record_restore(reused, disk_seconds)
        self._tally.prefix_lookup(reused)
        self._tally.prefill_tokens += len(rest)
        processors = make_processors(request.sampling, self._n_vocab, self._flat_eos() if request.ignore_eos else ())
        if job.grammar is not None:
            processors.append(job.grammar)
        (uid,) = self._generator.insert(
            [rest],
            max_tokens=[request.max_tokens],
            caches=[prompt_cache] if prompt_cache is not None else None,
            all_tokens=[prompt[:reused]],
            samplers=[make_sampler(request.sampling)],
            logits_processors=[processors],
            stop_sequences=[StopSequences(None if request.ignore_eos else self._eos)],
        )
        job.uid, job.generated, job.cached_prompt_tokens = uid, 0, reused
        mode = request.speculative or self._speculative
        if self._speculation is not None and mode != "off":
            from launcher.engines.mlx._speculative import Drafting

            self._speculation.rows[uid] = Drafting(mode)
        job.text = IncrementalText(self._tokens, prompt)
        self._running[uid] = job

    def _restore_from_disk(self, prompt: list[int], in_memory: int) -> tuple[tuple[list[Any], list[int]], float] | None:
        """When the prompt cache on disk holds more of `prompt` than memory does: that entry's caches, cut
        to `prompt`, the tokens left to read, and the seconds it took; None to go on from memory. The
        entry also goes into the LRUPromptCache, so the next prompts sharing it start from memory."""
        if self._disk is None:
            return None
        entry = self._disk.candidate(prompt, in_memory)
        if entry is None:
            return None
        restored = self._disk.restore(entry)
        usable = None if restored is None else reusable(restored, prompt)
        if restored is None or usable is None or len(usable[1]) >= len(prompt) - in_memory:
            self._disk.cache.record_miss()
            return None
        self._cache.insert_cache(_CACHE_KEY, restored.tokens, restored.caches)
        return usable, restored.seconds

    def _flat_eos(self) -> list[int]:
        return [seq[0] for seq in self._eos]

    def _finish(self, job: Job, reason: FinishReason, error: str | None = None) -> None:
        tail = job.text.flush() if job.text is not None else ""
        drafting = self._speculation.drop(job.uid) if self._speculation is not None else None
        final = self._final_event(
            job,
            reason,
            text=tail,
            cached_prompt_tokens=job.cached_prompt_tokens,
            disk_prompt_tokens=job.disk_prompt_tokens,
            completion_tokens=job.generated,
            draft_tokens=drafting.drafted if drafting is not None else 0,
            accepted_draft_tokens=drafting.accepted if drafting is not None else 0,
            error=error,
        )
        self._events.emit(job, final)
        self._running.pop(job.uid, None)
        self._pace.finished(job.submitted_at)

    def _update_memory(self) -> None:
        import mlx.core as mx

        self.memory = {
            "mlx_active": int(mx.get_active_memory()),
            "mlx_peak": int(mx.get_peak_memory()),
            "mlx_cache": int(mx.get_cache_memory()),
        }
        if self.loaded is not None and self.loaded.draft is not None:
            self.memory["draft_model"] = self.loaded.draft.weights_bytes  # part of mlx_active, shown apart
