"""`LlamaCppModel`: a loaded GGUF behind the engine seam (tokenize, generate, embed, stats, close).

The llama context belongs to the scheduler thread; this object only queues work for it and
hands events back on the caller's asyncio loop. Tokenizing reads the vocabulary only, which
llama.cpp allows from any thread (its own server tokenizes on its HTTP threads).
"""

from __future__ import annotations

import asyncio
import contextlib
import ctypes
import dataclasses
import logging
from collections.abc import AsyncIterator
from dataclasses import dataclass
from types import ModuleType
from typing import Any

import numpy as np

from launcher.core.config import SpeculativeMode
from launcher.core.errors import EngineError
from launcher.engines._jobs import check_prompt
from launcher.engines.base import (
    REPLY_MARKERS,
    Constraint,
    EngineStats,
    GenerationEvent,
    GenerationRequest,
    ModelInfo,
)
from launcher.engines.llamacpp._draft import DraftModel
from launcher.engines.llamacpp._embedding import Embedder
from launcher.engines.llamacpp._sampling import ConstraintError, check_grammar, compile_constraint
from launcher.engines.llamacpp._scheduler import Job, Scheduler
from launcher.engines.llamacpp._sliding_window import CheckpointStore
from launcher.engines.prompt_cache import PromptDiskCache, with_cache_stats

log = logging.getLogger("launcher.engines.llamacpp")


@dataclass(frozen=True)
class RuntimeSettings:
    """How the context was built; the scheduler and stats need these numbers."""

    parallel: int
    context: int  # tokens per sequence
    n_ctx: int  # KV cells in the shared cache
    n_batch: int
    max_queue: int
    prefix_cache_tokens: int | None
    prefill_stall_s: float
    memory: dict[str, int]
    swa_window: int = 0  # tokens the sliding-window layers see; 0 when the model has none
    speculative: SpeculativeMode = "auto"  # the server's setting; a request may override it


class LlamaCppModel:
    """A GGUF loaded into one llama.cpp context shared by up to `parallel` sequences."""

    def __init__(
        self,
        llama_cpp: ModuleType,
        model_pointer: Any,
        context_pointer: Any,
        info: ModelInfo,
        settings: RuntimeSettings,
        eog_tokens: frozenset[int],
        embedder: Embedder | None,
        checkpoints: CheckpointStore | None = None,
        disk_cache: PromptDiskCache | None = None,
        draft: DraftModel | None = None,
    ) -> None:
        self.info = info
        self._draft = draft
        self._ll = llama_cpp
        self._model = model_pointer
        self._ctx = context_pointer
        self._vocab = llama_cpp.llama_model_get_vocab(model_pointer)
        self._n_vocab = info.vocab_size
        self._settings = settings
        self._pieces: list[bytes | None] = [None] * self._n_vocab
        self._markers = self._marker_tokens()
        self._embedder = embedder
        self._closed = False
        self._checkpoints = checkpoints if settings.swa_window else None
        self._disk_cache = disk_cache
        self._scheduler = Scheduler(
            llama_cpp,
            context_pointer,
            self._vocab,
            n_vocab=self._n_vocab,
            parallel=settings.parallel,
            context=settings.context,
            n_batch=settings.n_batch,
            max_queue=settings.max_queue,
            prefix_cache_tokens=settings.prefix_cache_tokens,
            prefill_stall_s=settings.prefill_stall_s,
            eog_tokens=eog_tokens,
            piece=self.token_bytes,
            swa_window=settings.swa_window,
            checkpoints=self._checkpoints,
            disk_cache=disk_cache,
            speculative=settings.speculative,
            draft=draft,
            can_speculate=not (
                llama_cpp.llama_model_is_recurrent(model_pointer) or llama_cpp.llama_model_is_hybrid(model_pointer)
            ),
        )
        self._scheduler.start_thread()

    # ----- vocabulary ------------------------------------------------------------------------

    def tokenize(self, text: str, *, add_special: bool = False, parse_special: bool = True) -> list[int]:
        """Text to token ids (special-token text like `<|im_end|>` parsed when `parse_special`)."""
        data = text.encode("utf-8")
        capacity = len(data) + 16
        while True:
            buffer = (self._ll.llama_token * capacity)()
            count = self._ll.llama_tokenize(self._vocab, data, len(data), buffer, capacity, add_special, parse_special)
            if count >= 0:
                return list(buffer[:count])
            capacity = -count

    def detokenize(self, tokens: list[int]) -> str:
        """Token ids back to text; special tokens are written out as their text."""
        if not tokens:
            return ""
        array = (self._ll.llama_token * len(tokens))(*tokens)
        capacity = len(tokens) * 8 + 32
        while True:
            buffer = ctypes.create_string_buffer(capacity)
            count = self._ll.llama_detokenize(self._vocab, array, len(tokens), buffer, capacity, False, True)
            if count >= 0:
                return buffer.raw[:count].decode("utf-8", errors="replace")
            capacity = -count

    def _marker_tokens(self) -> frozenset[int]:
        """This vocabulary's control tokens that are reply markers (see REPLY_MARKERS)."""
        found = set()
        for marker in REPLY_MARKERS:
            ids = self.tokenize(marker, parse_special=True)
            if len(ids) == 1 and self._ll.llama_vocab_is_control(self._vocab, ids[0]):
                found.add(ids[0])
        return frozenset(found)

    def token_bytes(self, token: int) -> bytes:
        """The raw bytes a generated token adds to the text: control tokens add nothing, except
        reply markers (gpt-oss channels, [TOOL_CALLS], ...), which the server's parsers read."""
        piece = self._pieces[token]
        if piece is None:
            special = token in self._markers
            buffer = ctypes.create_string_buffer(64)
            count = self._ll.llama_token_to_piece(self._vocab, token, buffer, 64, 0, special)
            if count < 0:
                buffer = ctypes.create_string_buffer(-count)
                count = self._ll.llama_token_to_piece(self._vocab, token, buffer, -count, 0, special)
            piece = buffer.raw[:count]
            self._pieces[token] = piece
        return piece

    # ----- generation ------------------------------------------------------------------------

    # Lazy constraints (`Constraint.triggers`: tool calls on `tool_choice: auto`): the trigger is watched in
    # Python and llama.cpp's grammar sampler takes over from it (_lazy.py says why not llama.cpp's own).
    lazy_constraints = True

    @property
    def wants_checkpoint_hints(self) -> bool:
        """True when the server's checkpoint positions are used: a sliding-window model with checkpoints."""
        return self._checkpoints is not None and self._checkpoints.enabled

    def prepare_constraint(self, constraint: Constraint) -> None:
        """Compile `constraint` ahead, on the caller's worker thread: `generate`, which runs on the event
        loop, then finds its grammar in the cache. A constraint that cannot compile is left for
        `generate` to refuse, as a request's error."""
        with contextlib.suppress(ConstraintError):
            compile_constraint(constraint)

    def generate(self, request: GenerationRequest) -> AsyncIterator[GenerationEvent]:
        """Queue `request` and stream its events; raises QueueFullError when the wait queue is full.

        Requests the engine cannot run (empty or too-long prompt, bad constraint) get a single
        event with finish_reason "error" and a message that says what to change.
        """
        loop = asyncio.get_running_loop()
        checked = check_prompt(request, vocab_size=self._n_vocab, context=self._settings.context)
        problem = checked.problem
        grammar = None
        if problem is None and request.constraint is not None:
            try:
                grammar = compile_constraint(request.constraint)
                check_grammar(self._ll, self._vocab, grammar)
            except ConstraintError as err:
                grammar = None
                if not request.constraint.triggers:
                    problem = str(err)
                else:  # a lazy tool-call grammar only helps: without it the call is parsed as before
                    log.info("the tool-call grammar is not used for this request: %s", err)
        # a refused prompt may hold ids that do not fit an int32
        prompt = np.asarray(request.prompt_tokens if problem is None else [], dtype=np.int32)
        admitted = checked.request
        if grammar is not None and admitted.ignore_eos:
            # a constrained reply ends where its grammar does: past that point the grammar allows only the
            # end of generation, and a token it refuses would abort llama.cpp
            admitted = dataclasses.replace(admitted, ignore_eos=False)
        job = Job(request=admitted, prompt=prompt, grammar=grammar, loop=loop, queue=asyncio.Queue())
        return self._scheduler.stream(job, problem, closed=self._closed, fault=checked.fault)

    async def embed(self, texts: list[str]) -> list[list[float]]:
        """Mean/CLS-pooled, L2-normalised embeddings; raises EngineError if this model cannot embed."""
        if self._embedder is None:
            raise EngineError(
                f"{self.info.id} is a text-generation model without a pooling head, so it cannot produce "
                "embeddings. Serve an embedding model (a GGUF with a pooling type) for /v1/embeddings."
            )
        if self._closed:
            raise EngineError("the model has been unloaded")
        embedder = self._embedder
        token_lists = [self.tokenize(text, add_special=True, parse_special=False) for text in texts]
        embedder.check_lengths(token_lists)
        loop = asyncio.get_running_loop()
        future: asyncio.Future[list[list[float]]] = loop.create_future()

        def task() -> None:
            try:
                result = embedder.embed(token_lists)
            except Exception as err:  # handed to the awaiting coroutine, not lost on this thread
                loop.call_soon_threadsafe(_set_exception, future, err)
            else:
                loop.call_soon_threadsafe(_set_result, future, result)

        self._scheduler.run_task(task)
        return await future

    # ----- status and shutdown -----------------------------------------------------------------

    def stats(self) -> EngineStats:
        """Live numbers for /metrics (cheap; called from the event loop)."""
        memory = dict(self._settings.memory)
        stats = self._scheduler.engine_stats(kv_total_tokens=self._settings.n_ctx, memory=memory)
        stats = with_cache_stats(stats, self._disk_cache)
        store = self._checkpoints
        if store is None:
            return stats
        memory["swa_checkpoints"] = store.bytes
        return dataclasses.replace(
            stats,
            swa_checkpoints=store.count,
            swa_checkpoints_max=store.per_slot * self._settings.parallel,
            swa_checkpoint_budget_bytes=store.budget_bytes,
            swa_checkpoint_restores=store.restored,
        )

    def close(self) -> None:
        """Stop the scheduler thread (open requests end as cancelled, and what every sequence holds goes
        to the prompt cache), free the model, then wait for the prompt cache's last writes."""
        if self._closed:
            return
        self._closed = True
        self._scheduler.stop()
        if self._embedder is not None:
            self._embedder.close()
        self._ll.llama_free(self._ctx)
        self._ll.llama_model_free(self._model)
        if self._draft is not None:
            self._draft.close()
        if self._disk_cache is not None:
            self._disk_cache.close()


def _set_result(future: asyncio.Future[list[list[float]]], result: list[list[float]]) -> None:
    if not future.done():
        future.set_result(result)


def _set_exception(future: asyncio.Future[list[list[float]]], error: Exception) -> None:
    if not future.done():
        future.set_exception(error)
