"""`ExLlamaModel`: a loaded EXL3/EXL2 model behind the engine seam (tokenize, generate, stats, close).

The generator belongs to the scheduler thread; this object checks requests, turns them into
runtime-neutral `JobSpec`s and streams the events back. Tokenizing uses the runtime's tokenizer
(read-only, safe from the event loop thread).
"""

from __future__ import annotations

import asyncio
import dataclasses
from collections.abc import AsyncIterator, Mapping
from functools import lru_cache

from launcher.core.errors import EngineError
from launcher.engines._jobs import check_prompt
from launcher.engines.base import EngineStats, GenerationEvent, GenerationRequest, ModelInfo
from launcher.engines.exllama_common._backend import Backend, JobSpec
from launcher.engines.exllama_common._constraints import ConstraintError, checked_triggers, grammar_for
from launcher.engines.exllama_common._scheduler import Job, Scheduler
from launcher.engines.exllama_common._sizing import CachePlan


class ExLlamaModel:
    """An EXL3/EXL2 model whose dynamic generator runs up to `plan.parallel` requests at once."""

    def __init__(
        self,
        backend: Backend,
        info: ModelInfo,
        plan: CachePlan,
        *,
        max_queue: int,
        special_tokens: Mapping[str, int] | None = None,
    ) -> None:
        self.info = info
        self._special_tokens = dict(special_tokens or {})  # added tokens' text -> id, for grammars
        self._backend = backend
        # The server gives a lazy call grammar on tool_choice "auto" to models that say they run them.
        self.lazy_constraints = backend.lazy_constraints
        self._plan = plan
        self._closed = False
        self._eos = info.eos_token_ids
        self._piece = lru_cache(maxsize=65536)(lambda token: backend.decode([token]))
        self._scheduler = Scheduler(backend, parallel=plan.parallel, max_queue=max_queue, piece=self._piece)
        self._scheduler.start_thread()

    # ----- vocabulary ------------------------------------------------------------------------

    def tokenize(self, text: str, *, add_special: bool = False, parse_special: bool = True) -> list[int]:
        """Text to token ids with the model's tokenizer (BOS added when `add_special`)."""
        return self._backend.encode(text, add_bos=add_special, special=parse_special)

    def detokenize(self, tokens: list[int]) -> str:
        """Token ids back to text; special tokens are written out."""
        return self._backend.decode(tokens) if tokens else ""

    # ----- generation ------------------------------------------------------------------------

    def generate(self, request: GenerationRequest) -> AsyncIterator[GenerationEvent]:
        """Queue `request` and stream its events; raises QueueFullError when the wait queue is full.

        Requests that cannot run (empty or too-long prompt, bad constraint) get one event with
        finish_reason "error" and a message saying what to change.
        """
        checked = check_prompt(request, vocab_size=self.info.vocab_size, context=self.info.context_length)
        problem = checked.problem
        grammar: str | None = None
        triggers: tuple[str, ...] = ()
        if problem is None and request.constraint is not None:
            try:
                grammar = grammar_for(request.constraint, self._special_tokens)
                triggers = checked_triggers(request.constraint)
            except ConstraintError as err:
                problem = str(err)
            if triggers and not self.lazy_constraints:  # the server only sends them where the model says so
                problem = f"{self.info.engine} {self.info.engine_version} cannot run lazy grammars"
        spec = JobSpec(
            prompt=list(request.prompt_tokens),
            max_new_tokens=checked.request.max_tokens,
            stop_tokens=() if request.ignore_eos else self._eos,
            sampling=request.sampling,
            grammar=grammar,
            top_logprobs=request.logprobs,
            identifier=None,
            triggers=triggers,
        )
        job = Job(request=checked.request, spec=spec, loop=asyncio.get_running_loop(), queue=asyncio.Queue())
        job.spec = dataclasses.replace(spec, identifier=job)
        return self._scheduler.stream(job, problem, closed=self._closed, fault=checked.fault)

    async def embed(self, texts: list[str]) -> list[list[float]]:
        """ExLlama models are text generators: always raises EngineError."""
        raise EngineError(
            f"{self.info.id} is served by {self.info.engine}, which only generates text. "
            "Serve an embedding model (a GGUF with a pooling type) with llama.cpp for /v1/embeddings."
        )

    # ----- status and shutdown -----------------------------------------------------------------

    def stats(self) -> EngineStats:
        """Live numbers for /metrics (cheap; called from the event loop)."""
        return self._scheduler.engine_stats(
            kv_total_tokens=self._plan.cache_tokens, memory=self._backend.memory(), kv_cap=self._plan.cache_tokens
        )

    def close(self) -> None:
        """Stop the scheduler (open requests end as cancelled) and free the model."""
        if self._closed:
            return
        self._closed = True
        self._scheduler.stop()
        self._backend.close()
