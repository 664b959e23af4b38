"""Continuous batching over one llama.cpp context, on one thread that owns that context.

Each step builds ONE batch: a decode token for every generating sequence, then prompt chunks of
admitted requests (chunked prefill). How much of each prompt a step reads is `_pacing`'s policy:
while some sequences are generating, the prompt part is sized from measured step times so the
step takes about `prefill_stall_s` (a full 512-token chunk freezes running streams for a second
on a 2-core CPU, while a GPU reads it in milliseconds and still gets whole chunks); prompts that
fit are read whole, shortest first; with nobody generating the batch is filled, and an idle
scheduler waits a moment for the rest of a burst. After `llama_decode`, each sequence samples
from its own row (argmax for plain greedy requests, else its own sampler chain) and its events
go to the request's asyncio queue on the server's loop.

Slots are llama.cpp sequence ids. A slot keeps the tokens whose KV it holds after its request
ends, so a later request sharing a prefix (an agent resending its system prompt) starts after the
shared part: from the same slot, or by copying the prefix cells from another slot (`seq_cp`,
which shares cells in the unified KV cache instead of copying data). In a sliding-window model
the SWA layers keep only the window, so a prefix is reusable only while they still hold the
positions before its end; when they do not, the nearest checkpoint (`_sliding_window`) is restored
and the rest read. Prompt chunks stop at a request's checkpoint positions so it can save them.

The thread, the wait queue, admission and cancellation are `_scheduler_base`'s; this module is the
step (`_advance`), the choice of a slot for an admitted request (`_start`) and freeing it (`_finish`).
"""

from __future__ import annotations

import asyncio
import codecs
import logging
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from types import ModuleType
from typing import Any

import numpy as np
import numpy.typing as npt

from launcher.core.config import SpeculativeMode
from launcher.engines._jobs import refusal
from launcher.engines._scheduler_base import Occupancy, SchedulerThread
from launcher.engines.base import FinishReason, GenerationEvent, GenerationRequest, TokenLogprob
from launcher.engines.llamacpp._batch import TokenBatch
from launcher.engines.llamacpp._disk_tier import DiskTier
from launcher.engines.llamacpp._draft import DraftModel, DraftWant
from launcher.engines.llamacpp._lazy import WatchedGrammar
from launcher.engines.llamacpp._pacing import StepClock, burst_wait, prompt_takes
from launcher.engines.llamacpp._sampling import (
    ConstraintError,
    RequestSampler,
    build_sampler,
    greedy_token,
    plain_greedy,
    token_logprob,
)
from launcher.engines.llamacpp._sliding_window import CheckpointStore, SlidingWindow
from launcher.engines.prompt_cache import PromptDiskCache
from launcher.engines.speculation import MAX_DRAFT, DraftStats, Offer, Speculator, ngram_draft

log = logging.getLogger("launcher.engines.llamacpp")

_NO_DRAFT = np.zeros(0, dtype=np.int32)


@dataclass(eq=False)
class Job:
    """A request from submission to its last event."""

    request: GenerationRequest
    prompt: npt.NDArray[np.int32]
    grammar: str | None
    loop: asyncio.AbstractEventLoop
    queue: asyncio.Queue[GenerationEvent]
    submitted_at: float = field(default_factory=time.monotonic)
    cancelled: bool = False


@dataclass(eq=False)
class _Slot:
    seq_id: int
    cache: npt.NDArray[np.int32]  # cache[:n_cached] = the tokens whose KV this sequence holds
    n_cached: int = 0
    last_used: int = 0
    job: Job | None = None
    sampler: RequestSampler | None = None  # None for plain greedy requests (argmax)
    lazy: WatchedGrammar | None = None  # a lazy grammar still waiting for its trigger
    pending_token: int = -1  # sampled, not yet evaluated; -1 while the prompt is being read
    out_index: int = -1  # batch row whose logits this slot samples from this step
    step_tokens: int = 0
    n_generated: int = 0
    cached_prompt_tokens: int = 0
    disk_prompt_tokens: int = 0  # of cached_prompt_tokens, those put back from the prompt cache on disk
    checkpoint_at: list[int] = field(default_factory=list)  # prompt positions still to save a checkpoint at
    draft: npt.NDArray[np.int32] = field(default_factory=lambda: _NO_DRAFT)  # verified in this step after pending
    draft_index: int = -1  # batch row of the draft's first token
    draft_stats: DraftStats = field(default_factory=DraftStats)  # n-gram drafts'
    model_draft_stats: DraftStats = field(default_factory=DraftStats)  # the draft model's
    draft_from_model: bool = False  # where this step's draft came from
    drafted: int = 0  # this request's draft tokens verified ...
    accepted: int = 0  # ... and accepted
    decoder: codecs.IncrementalDecoder = field(default_factory=lambda: codecs.getincrementaldecoder("utf-8")("replace"))


class Scheduler(SchedulerThread[Job]):
    """Owns the llama context on its own thread; `submit` is called from the server's event loop."""

    def __init__(
        self,
        llama_cpp: ModuleType,
        context_pointer: Any,
        vocab: Any,
        *,
        n_vocab: int,
        parallel: int,
        context: int,
        n_batch: int,
        max_queue: int,
        prefix_cache_tokens: int | None,
        prefill_stall_s: float,
        eog_tokens: frozenset[int],
        piece: Callable[[int], bytes],
        swa_window: int = 0,
        checkpoints: CheckpointStore | None = None,
        disk_cache: PromptDiskCache | None = None,
        speculative: SpeculativeMode = "auto",
        can_speculate: bool = True,
        draft: DraftModel | None = None,
    ) -> None:
        super().__init__(
            label="llama.cpp", thread_name="llamacpp-scheduler", log=log, parallel=parallel, max_queue=max_queue
        )
        self._ll = llama_cpp
        self._ctx = context_pointer
        self._mem = llama_cpp.llama_get_memory(context_pointer)
        self._vocab = vocab
        self._n_vocab = n_vocab
        self._prefix_budget = prefix_cache_tokens
        self._stall_s = prefill_stall_s
        self._clock = StepClock()
        self._eog = eog_tokens
        self._is_eog = np.zeros(n_vocab, dtype=bool)
        self._is_eog[list(eog_tokens)] = True
        self._piece = piece
        self._window = SlidingWindow(llama_cpp, self._mem, swa_window, checkpoints)
        self._disk = None
        if disk_cache is not None and disk_cache.enabled:
            self._disk = DiskTier(llama_cpp, context_pointer, disk_cache, self._window, context)
        self._batch = TokenBatch(llama_cpp, n_batch, parallel, context)
        self._slots = [_Slot(seq_id=i, cache=np.zeros(context, dtype=np.int32)) for i in range(parallel)]
        self._running: list[_Slot] = []  # admission order = prefill priority (FIFO)
        self._tick = 0
        self._context = context
        # A recurrent or hybrid model cannot drop the KV of rejected draft tokens (its state is not per position).
        self._speculative: SpeculativeMode = speculative if can_speculate else "off"
        self._can_speculate = can_speculate
        self._speculator = Speculator()
        self._draft_model = draft if can_speculate else None

    # ----- the scheduler base's hooks ------------------------------------------------------------

    def _running_jobs(self) -> list[Job]:
        # read from other threads too: each slot's job is read once, as the scheduler may clear it
        return [job for slot in self._slots if (job := slot.job) is not None]

    def _occupancy(self) -> Occupancy:
        held = [slot for slot in self._slots if slot.job is not None]
        return Occupancy(running=len(held), kv_used_tokens=sum(slot.n_cached for slot in held))

    def _before_step(self) -> None:
        if self._waiting and not self._running:
            self._gather_burst()

    def _end_jobs(self, jobs: list[Job], reason: FinishReason, error: str | None = None) -> None:
        for slot in list(self._running):
            if slot.job in jobs:
                self._finish(slot, reason, error)

    # ----- the scheduler thread ----------------------------------------------------------------

    def _gather_burst(self) -> None:
        """Work arrived at an idle scheduler (lock held): while more requests keep arriving, wait a
        moment so that a burst (an agent's main turn, title and summary sent at once) is read in one
        batch instead of the first prompt alone and the rest one step later. One step for all is
        shorter than two, which lowers the burst's last first token and adds a few ms to a lone
        request (the wait ends once nothing new came for a third of it)."""
        prompt_tokens = sum(len(job.prompt) for job in self._waiting)
        longest = burst_wait(self._clock.per_prompt_token, prompt_tokens)
        if longest <= 0:
            return
        deadline = time.monotonic() + longest
        free = sum(1 for slot in self._slots if slot.job is None)
        count = len(self._waiting)
        while count < free and not self._stopping:
            left = deadline - time.monotonic()
            if left <= 0:
                break
            self._cv.wait(min(longest / 3, left))
            if len(self._waiting) == count:
                break  # a quiet spell: the burst is over
            count = len(self._waiting)

    def _advance(self) -> None:
        batch = self._batch
        batch.clear()
        for slot in self._running:
            slot.out_index, slot.step_tokens, slot.draft = -1, 0, _NO_DRAFT
            if slot.pending_token >= 0:
                slot.out_index = batch.add_one(slot.pending_token, slot.n_cached, slot.seq_id)
                slot.step_tokens = 1
        decode_tokens = batch.size
        drafts = self._plan_drafts(decode_tokens)
        room = (
            batch.free
            if decode_tokens == 0
            else self._clock.prompt_room(self._stall_s, decode_tokens + drafts, batch.free)
        )
        self._plan_prefill(batch, max(0, min(room, batch.free - drafts)))
        prompt_rows = batch.size - decode_tokens
        self._add_drafts(batch)
        started = time.perf_counter()
        if not self._decode(batch, drafts_from=decode_tokens + prompt_rows):
            return
        seconds = time.perf_counter() - started
        rows = batch.size - prompt_rows  # decode tokens and the drafts that stayed in the step
        self._clock.record(rows, prompt_rows, seconds)
        if prompt_rows == 0:
            self._speculator.cost.record(rows, seconds)
        self._tally.decode_tokens += decode_tokens
        self._tally.prefill_tokens += prompt_rows
        for slot in self._running:
            if slot.step_tokens == 0:
                continue
            start = slot.n_cached
            if slot.pending_token >= 0:
                slot.cache[start] = slot.pending_token
                slot.pending_token = -1
            else:
                assert slot.job is not None
                slot.cache[start : start + slot.step_tokens] = slot.job.prompt[start : start + slot.step_tokens]
            slot.n_cached = start + slot.step_tokens
            if slot.checkpoint_at and slot.n_cached == slot.checkpoint_at[0]:
                slot.checkpoint_at.pop(0)
                self._window.save(slot.seq_id, slot.n_cached)
        for slot in list(self._running):
            if slot.out_index >= 0:
                self._sample(slot)

    # ----- speculative decoding (launcher/engines/speculation.py) ----------------------------------

    def _plan_drafts(self, decode_tokens: int) -> int:
        """Choose each generating sequence's draft for this step (`slot.draft`): an n-gram draft where its
        text repeats, else the draft model's where one is loaded. Return the rows they take."""
        offers: list[tuple[_Slot, Offer]] = []
        from_model: list[tuple[_Slot, Offer]] = []
        for slot in self._running:
            job = slot.job
            if slot.pending_token < 0 or job is None:
                continue
            mode = job.request.speculative or self._speculative
            if mode == "off" or not self._can_speculate:
                continue
            # the reply's last token needs no draft after it, and every draft token needs a cell
            limit = min(MAX_DRAFT, job.request.max_tokens - slot.n_generated - 1, self._context - slot.n_cached - 2)
            if limit <= 0:
                continue
            slot.cache[slot.n_cached] = slot.pending_token  # the history ends with the token being decoded
            draft = ngram_draft(slot.cache, slot.n_cached + 1, limit) if mode != "draft" else _NO_DRAFT
            if len(draft):
                offers.append((slot, Offer(slot.draft_stats, draft, mode)))
            elif self._draft_model is not None and mode != "ngram":
                # sized before the draft model runs: its rounds cost time whether or not the tokens are used
                from_model.append((slot, Offer(slot.model_draft_stats, np.zeros(limit, dtype=np.int32), mode)))
        room = self._batch.free // 2
        sizes = self._speculator.plan([offer for _, offer in offers], streams=decode_tokens, room=room)
        for (slot, offer), size in zip(offers, sizes, strict=True):
            slot.draft, slot.draft_from_model = offer.draft[:size], False
        room -= sum(sizes)
        if from_model and self._draft_model is not None:
            extra = self._draft_model.round_seconds or 0.0
            wanted = self._speculator.plan([o for _, o in from_model], streams=decode_tokens, room=room, extra_s=extra)
            wants: list[DraftWant] = [
                (slot.seq_id, slot.cache, slot.n_cached + 1, size)
                for (slot, _), size in zip(from_model, wanted, strict=True)
                if size
            ]
            drafted = self._draft_model.draft(wants) if wants else {}
            for slot, _ in from_model:
                if slot.seq_id in drafted:
                    slot.draft, slot.draft_from_model = drafted[slot.seq_id], True
        return sum(len(slot.draft) for slot in self._running)

    def _add_drafts(self, batch: TokenBatch) -> None:
        for slot in self._running:
            if len(slot.draft):
                slot.draft_index = batch.add_draft(slot.draft, slot.n_cached + 1, slot.seq_id)

    def _plan_prefill(self, batch: TokenBatch, room: int) -> None:
        """Add the prompt chunks `prompt_takes` gives to the batch, in admission order."""
        reading = [slot for slot in self._running if slot.pending_token < 0]
        # a chunk ends at the next checkpoint position, so the state there can be saved after the step
        remaining = [self._read_until(slot) - slot.n_cached for slot in reading]
        for slot, take in zip(reading, prompt_takes(remaining, room, batch.free), strict=True):
            if take <= 0:
                continue
            assert slot.job is not None
            last = slot.n_cached + take == len(slot.job.prompt)
            chunk = slot.job.prompt[slot.n_cached : slot.n_cached + take]
            index = batch.add_chunk(chunk, slot.n_cached, slot.seq_id, logits_last=last)
            slot.out_index = index if last else -1
            slot.step_tokens = take

    def _read_until(self, slot: _Slot) -> int:
        assert slot.job is not None
        return slot.checkpoint_at[0] if slot.checkpoint_at else len(slot.job.prompt)

    def _decode(self, batch: TokenBatch, drafts_from: int) -> bool:
        result = int(self._ll.llama_decode(self._ctx, batch.prepared()))
        if result == 1 and self._evict_idle(budget=0):
            # No free KV cells: idle prefix caches are expendable, the running requests are not.
            result = int(self._ll.llama_decode(self._ctx, batch.prepared()))
        if result == 1 and batch.size > drafts_from:
            # ... nor are they to drafts: this step goes without them (a full KV left nothing is changed)
            batch.size = drafts_from
            for slot in self._running:
                slot.draft = _NO_DRAFT
            result = int(self._ll.llama_decode(self._ctx, batch.prepared()))
        if result == 0:
            return True
        log.error("llama_decode failed with code %d for a batch of %d tokens", result, batch.size)
        for slot in list(self._running):
            if slot.step_tokens:
                self._finish(slot, "error", f"llama.cpp could not decode this batch (code {result})")
        return False

    def _sample(self, slot: _Slot) -> None:
        """Sample the slot's row and, while the tokens sampled agree with its draft, the draft's rows;
        keep the KV of the draft tokens that agreed, drop the rest, and emit what was sampled."""
        draft = slot.draft
        rows = [slot.out_index]
        tokens = [self._pick(slot, slot.out_index)]
        while len(tokens) <= len(draft) and tokens[-1] == draft[len(tokens) - 1] and not self._ends(slot, tokens):
            rows.append(slot.draft_index + len(tokens) - 1)
            tokens.append(self._pick(slot, rows[-1]))
        if len(draft):
            kept = len(tokens) - 1  # draft tokens equal to the sampled tokens before the last: their KV stays
            accepted = kept + int(kept < len(draft) and tokens[-1] == draft[kept])
            (slot.model_draft_stats if slot.draft_from_model else slot.draft_stats).record(len(draft), accepted)
            slot.drafted += len(draft)
            slot.accepted += accepted
            self._tally.draft_tokens += len(draft)
            self._tally.accepted_draft_tokens += accepted
            self._tally.decode_tokens += kept
            slot.cache[slot.n_cached : slot.n_cached + kept] = draft[:kept]
            slot.n_cached += kept
            self._ll.llama_memory_seq_rm(self._mem, slot.seq_id, slot.n_cached, -1)
        for token, row in zip(tokens, rows, strict=True):
            if not self._emit(slot, token, row):
                return

    def _pick(self, slot: _Slot, row: int) -> int:
        if slot.sampler is None:
            token = greedy_token(self._ll.llama_get_logits_ith(self._ctx, row), self._n_vocab)
        else:
            token = slot.sampler.sample(self._ctx, row)
        if slot.lazy is not None:
            self._watch(slot, token)
        return token

    def _watch(self, slot: _Slot, token: int) -> None:
        """Feed a lazy grammar's trigger watch; once it fires, the grammar constrains the tokens after
        this one (a later row of this step's draft too: each row is picked after the one before)."""
        assert slot.lazy is not None and slot.job is not None
        grammar = slot.lazy.add(token)
        if not slot.lazy.waiting:
            slot.lazy = None
        if grammar is None:
            return
        banned = self._eog if slot.job.request.ignore_eos else frozenset()
        sampler = build_sampler(self._ll, self._vocab, self._n_vocab, slot.job.request.sampling, grammar, banned)
        if slot.sampler is not None:
            slot.sampler.free()
        slot.sampler = sampler

    def _ends(self, slot: _Slot, tokens: list[int]) -> bool:
        """Whether the reply ends at the last of `tokens` (sampled this step): an end-of-generation
        token, or the last one max_tokens allows."""
        job = slot.job
        assert job is not None
        return bool(self._is_eog[tokens[-1]] and not job.request.ignore_eos) or (
            slot.n_generated + len(tokens) >= job.request.max_tokens
        )

    def _emit(self, slot: _Slot, token: int, row: int) -> bool:
        """Send one sampled token (its logprobs from `row`); False when the reply ended with it."""
        job = slot.job
        assert job is not None
        if self._is_eog[token] and not job.request.ignore_eos:
            self._finish(slot, "stop")
            return False
        slot.n_generated += 1
        logprobs: tuple[TokenLogprob, ...] = ()
        if job.request.logprobs is not None:
            pointer = self._ll.llama_get_logits_ith(self._ctx, row)
            logprobs = (token_logprob(pointer, self._n_vocab, token, job.request.logprobs, self._piece_text),)
        text = slot.decoder.decode(self._piece(token))
        # the cached share rides on every token: the server counts the prompt it read at the first one
        event = GenerationEvent(
            token_ids=(token,), text=text, logprobs=logprobs, cached_prompt_tokens=slot.cached_prompt_tokens
        )
        self._events.emit(job, event)
        # check_prompt bounded max_tokens by the context, so the last token still has a cell
        if slot.n_generated >= job.request.max_tokens:
            self._finish(slot, "length")
            return False
        slot.pending_token = token
        return True

    def _piece_text(self, token: int) -> str:
        return self._piece(token).decode("utf-8", errors="replace")

    # ----- admission and prefix reuse ------------------------------------------------------------

    def _common_prefix(self, slot: _Slot, prompt: npt.NDArray[np.int32]) -> int:
        length = min(slot.n_cached, len(prompt))
        if length == 0:
            return 0
        same = slot.cache[:length] == prompt[:length]
        return length if bool(same.all()) else int(np.argmin(same))

    def _start(self, job: Job) -> None:
        banned = self._eog if job.request.ignore_eos else frozenset()
        sampler = lazy = None
        triggers = job.request.constraint.triggers if job.request.constraint is not None else ()
        grammar = job.grammar
        if grammar is not None and triggers:  # free until a trigger fires (see _lazy.py)
            lazy, grammar = WatchedGrammar(self._ll, self._vocab, grammar, triggers, self._piece), None
        if not plain_greedy(job.request.sampling, grammar, banned):
            try:
                sampler = build_sampler(self._ll, self._vocab, self._n_vocab, job.request.sampling, grammar, banned)
            except ConstraintError as err:
                self._events.emit(job, refusal(job.request, str(err)))
                return
        prompt = job.prompt
        shared = {slot.seq_id: self._common_prefix(slot, prompt) for slot in self._slots}
        free = [slot for slot in self._slots if slot.job is None]
        # The slot that gains the most: the tokens it shares with the prompt less the cached ones it would
        # drop (8 shared template tokens must not cost another prompt's 1,000: an empty slot is then better,
        # and the donor copy below still brings the shared part over); among equals the least recently used.
        slot = max(free, key=lambda s: (2 * shared[s.seq_id] - s.n_cached, -s.last_used))
        limit = len(prompt) - 1  # always evaluate the last prompt token to get its logits
        from_disk = self._restore_from_disk(prompt, shared, free, limit)
        if from_disk is not None:
            slot = from_disk[0]
        donor = max(self._slots, key=lambda s: shared[s.seq_id])
        reuse = min(shared[slot.seq_id], limit)
        if donor is not slot and min(shared[donor.seq_id], limit) > reuse:
            reuse = min(shared[donor.seq_id], limit)
            self._ll.llama_memory_seq_rm(self._mem, slot.seq_id, -1, -1)
            self._ll.llama_memory_seq_cp(self._mem, donor.seq_id, slot.seq_id, 0, reuse)
            slot.cache[:reuse] = prompt[:reuse]
            self._window.forget(slot.seq_id, 0)  # its checkpoints were of the tokens it held before
            shared[slot.seq_id] = 0
        elif not self._ll.llama_memory_seq_rm(self._mem, slot.seq_id, reuse, -1):
            reuse = 0
        if reuse > 0 and not self._window.holds(slot.seq_id, reuse):
            reuse = self._window.restore(slot.seq_id, reuse, shared)
        if reuse == 0:
            self._ll.llama_memory_seq_rm(self._mem, slot.seq_id, -1, -1)
        self._window.forget(slot.seq_id, reuse)
        slot.n_cached = reuse
        hints = job.request.checkpoint_hints
        slot.checkpoint_at = self._window.plan(len(prompt), reuse, self._batch.capacity, hints)
        self._tally.prefix_lookup(reuse)
        slot.job, slot.sampler, slot.lazy = job, sampler, lazy
        slot.pending_token, slot.out_index, slot.n_generated = -1, -1, 0
        slot.cached_prompt_tokens = reuse
        slot.disk_prompt_tokens = 0
        slot.draft_stats, slot.model_draft_stats, slot.drafted, slot.accepted = DraftStats(), DraftStats(), 0, 0
        if from_disk is not None and self._disk is not None:
            slot.disk_prompt_tokens = reuse
            self._disk.cache.record_restore(reuse, from_disk[1])
        slot.decoder.reset()
        self._running.append(slot)

    def _restore_from_disk(
        self, prompt: npt.NDArray[np.int32], shared: dict[int, int], free: list[_Slot], limit: int
    ) -> tuple[_Slot, float] | None:
        """When the prompt cache on disk holds more of `prompt` than memory does, put that entry into the
        least valuable free slot: that slot and the seconds it took (`shared` updated); None to go on
        from memory."""
        if self._disk is None:
            return None
        entry = self._disk.candidate(prompt, in_memory=min(max(shared.values()), limit))
        if entry is None:
            return None
        slot = min(free, key=lambda s: (shared[s.seq_id], s.last_used))
        restored = self._disk.restore(slot.seq_id, entry)
        if restored is None and self._evict_idle(budget=0):  # no free KV cells: idle caches go first
            restored = self._disk.restore(slot.seq_id, entry)
        count = 0 if restored is None else len(restored.tokens)
        if restored is not None:
            slot.cache[:count] = restored.tokens
        slot.n_cached = count
        for other in self._slots:  # the restore emptied the slot, and an eviction others
            shared[other.seq_id] = self._common_prefix(other, prompt)
        return None if restored is None else (slot, restored.seconds)

    def _finish(self, slot: _Slot, reason: FinishReason, error: str | None = None) -> None:
        job = slot.job
        assert job is not None
        tail = slot.decoder.decode(b"", final=True)
        final = self._final_event(
            job,
            reason,
            text=tail,
            cached_prompt_tokens=slot.cached_prompt_tokens,
            disk_prompt_tokens=slot.disk_prompt_tokens,
            completion_tokens=slot.n_generated,
            draft_tokens=slot.drafted,
            accepted_draft_tokens=slot.accepted,
            error=error,
        )
        self._events.emit(job, final)
        if slot.sampler is not None:
            slot.sampler.free()
        slot.job, slot.sampler, slot.lazy, slot.pending_token = None, None, None, -1
        slot.checkpoint_at = []
        self._running.remove(slot)
        self._tick += 1
        slot.last_used = self._tick
        self._pace.finished(job.submitted_at)
        if reason == "error":
            self._clear(slot)
        elif self._disk is not None and slot.n_cached:
            self._events.flush()  # the reply ends now; copying its state out for the disk takes a while
            self._disk.save(slot.seq_id, slot.cache[: slot.n_cached].copy())
        if self._prefix_budget is not None:
            self._evict_idle(self._prefix_budget)

    def _clear(self, slot: _Slot) -> None:
        self._ll.llama_memory_seq_rm(self._mem, slot.seq_id, -1, -1)
        slot.n_cached = 0
        self._window.forget(slot.seq_id, 0)

    def _evict_idle(self, budget: int) -> bool:
        """Drop least recently used idle prefix caches until they hold <= budget tokens."""
        idle = sorted((s for s in self._slots if s.job is None and s.n_cached), key=lambda s: s.last_used)
        held = sum(slot.n_cached for slot in idle)
        evicted = False
        for slot in idle:
            if held <= budget:
                break
            held -= slot.n_cached
            self._clear(slot)
            evicted = True
        return evicted
