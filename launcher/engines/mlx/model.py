"""`MlxModel`: an MLX model behind the engine seam (tokenize, generate, stats, close).

The model belongs to the scheduler thread; this object only checks requests, queues them and
hands events back on the caller's asyncio loop. Tokenizing uses the Rust tokenizer, which any
thread may use.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import AsyncIterator

import psutil

from launcher.core.errors import EngineError
from launcher.engines._jobs import check_prompt
from launcher.engines.base import Constraint, EngineStats, GenerationEvent, GenerationRequest, ModelInfo
from launcher.engines.mlx._sampling import ConstraintError, GrammarCompiler, GrammarProcessor
from launcher.engines.mlx._scheduler import Job, Scheduler
from launcher.engines.mlx._tokens import TokenizerAccess
from launcher.engines.prompt_cache import PromptDiskCache, with_cache_stats

log = logging.getLogger("launcher.engines.mlx")


class MlxModel:
    """An MLX model served by one scheduler thread with up to `parallel` sequences per step."""

    # Lazy constraints (`Constraint.triggers`: tool calls on `tool_choice: auto`): free output until a
    # trigger matches, then the grammar (`_sampling.LazyGrammarProcessor`).
    lazy_constraints = True

    def __init__(
        self,
        scheduler: Scheduler,
        info: ModelInfo,
        tokens: TokenizerAccess,
        grammars: GrammarCompiler,
        n_vocab: int,
        disk_cache: PromptDiskCache | None = None,
    ) -> None:
        self.info = info
        self._scheduler = scheduler
        self._tokens = tokens
        self._grammars = grammars
        self._n_vocab = n_vocab
        self._closed = False
        self._process = psutil.Process()
        self._disk_cache = disk_cache
        scheduler.configure(tokens, list(info.eos_token_ids), n_vocab, disk_cache)

    # ----- vocabulary ------------------------------------------------------------------------

    def tokenize(self, text: str, *, add_special: bool = False, parse_special: bool = True) -> list[int]:
        """Text to token ids (special-token text like `<|im_end|>` parsed when `parse_special`)."""
        return self._tokens.encode(text, add_special=add_special, parse_special=parse_special)

    def detokenize(self, tokens: list[int]) -> str:
        """Token ids back to text; special tokens are written out as their text."""
        return self._tokens.decode(tokens) if tokens else ""

    # ----- generation ------------------------------------------------------------------------

    def generate(self, request: GenerationRequest) -> AsyncIterator[GenerationEvent]:
        """Queue `request` and stream its events; raises QueueFullError when the wait queue is full.

        Requests the engine cannot run (empty or too-long prompt, a constraint that cannot be
        compiled) get a single event with finish_reason "error" and a message that says what to
        change, at once: a bad schema is found here, not after the request waited for a slot.
        """
        checked = check_prompt(request, vocab_size=self._n_vocab, context=self.info.context_length)
        problem = checked.problem
        grammar = None
        if problem is None and request.constraint is not None and not self._closed:
            try:
                grammar = self._compile(request.constraint)
            except ConstraintError as err:
                problem = str(err)
        job = Job(request=checked.request, loop=asyncio.get_running_loop(), queue=asyncio.Queue(), grammar=grammar)
        return self._scheduler.stream(job, problem, closed=self._closed, fault=checked.fault)

    def _compile(self, constraint: Constraint) -> GrammarProcessor:
        """A grammar processor for one request (milliseconds: schemas are bounded, the token table is
        built at load); raises ConstraintError."""
        return self._grammars.processor(
            constraint, lambda text: self._tokens.encode(text, add_special=False, parse_special=True)
        )

    async def embed(self, texts: list[str]) -> list[list[float]]:
        """MLX chat models have no pooling head here: always raises EngineError."""
        del texts
        raise EngineError(
            f"{self.info.id} is served by the MLX engine, which generates text but does not produce "
            "embeddings. Serve an embedding model (a GGUF with a pooling type) with the llama.cpp engine "
            "for /v1/embeddings."
        )

    # ----- status and shutdown -----------------------------------------------------------------

    def stats(self) -> EngineStats:
        """Live numbers for /metrics (cheap; called from the event loop)."""
        memory = dict(self._scheduler.memory)
        with contextlib.suppress(psutil.Error):  # the gauge simply lacks this entry for one scrape
            memory["process_rss"] = int(self._process.memory_info().rss)
        stats = self._scheduler.engine_stats(
            kv_total_tokens=self.info.context_length * self.info.parallel, memory=memory
        )
        return with_cache_stats(stats, self._disk_cache)

    def close(self) -> None:
        """Stop the scheduler thread (open requests end as cancelled; the thread frees the model), then
        wait for the prompt cache's last writes."""
        if self._closed:
            return
        self._closed = True
        self._scheduler.stop()
        if self._disk_cache is not None:
            self._disk_cache.close()
