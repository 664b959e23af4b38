"""Embeddings from a model that declares a pooling head, on a small context of its own.

Only models whose GGUF declares a pooling type (embedding models such as nomic-embed, bge,
gte-Qwen) can embed: a plain chat model's mean-pooled hidden states are not useful embeddings,
so we say no instead of returning numbers that look right and are not.
Runs on the scheduler thread (via Scheduler.run_task), so it never races a decode step.
"""

from __future__ import annotations

import ctypes
from types import ModuleType
from typing import Any

import numpy as np

from launcher.core.errors import EngineError
from launcher.engines.llamacpp._batch import TokenBatch


class Embedder:
    """One embedding context (one sequence, whole input in one micro-batch)."""

    def __init__(self, llama_cpp: ModuleType, model_pointer: Any, n_ctx: int, threads: int) -> None:
        self._ll = llama_cpp
        params = llama_cpp.llama_context_default_params()
        params.n_ctx = n_ctx
        params.n_batch = n_ctx
        params.n_ubatch = n_ctx  # non-causal pooling needs the whole input in one micro-batch
        params.n_seq_max = 1
        params.n_threads = threads
        params.n_threads_batch = threads
        params.embeddings = True
        params.no_perf = True
        self._ctx = llama_cpp.llama_init_from_model(model_pointer, params)
        if not self._ctx:
            raise EngineError("llama.cpp could not create the embedding context (out of memory?)")
        self.max_tokens = n_ctx
        self._n_embd = int(llama_cpp.llama_model_n_embd(model_pointer))
        self._encoder_only = bool(llama_cpp.llama_model_has_encoder(model_pointer)) and not bool(
            llama_cpp.llama_model_has_decoder(model_pointer)
        )
        self._batch = TokenBatch(llama_cpp, n_ctx, 1, 0)

    def check_lengths(self, token_lists: list[list[int]]) -> None:
        """Raise a clear EngineError if an input is empty or longer than the embedding context."""
        for index, tokens in enumerate(token_lists):
            if not tokens:
                raise EngineError(f"input {index} is empty")
            if len(tokens) > self.max_tokens:
                raise EngineError(
                    f"input {index} is {len(tokens)} tokens; "
                    f"this model embeds at most {self.max_tokens} tokens per input"
                )

    def embed(self, token_lists: list[list[int]]) -> list[list[float]]:
        """L2-normalised pooled embeddings, one per token list (call on the scheduler thread)."""
        results: list[list[float]] = []
        memory = self._ll.llama_get_memory(self._ctx)
        for tokens in token_lists:
            batch = self._batch
            batch.clear()
            batch.add_chunk(np.asarray(tokens, dtype=np.int32), 0, 0, logits_last=True)
            batch.want_logits[: batch.size] = 1  # pooling reads every token's output
            run = self._ll.llama_encode if self._encoder_only else self._ll.llama_decode
            code = int(run(self._ctx, batch.prepared()))
            if memory:
                self._ll.llama_memory_clear(memory, True)
            if code != 0:
                raise EngineError(f"llama.cpp could not embed this input (code {code})")
            pointer = self._ll.llama_get_embeddings_seq(self._ctx, 0)
            if not pointer:
                raise EngineError("llama.cpp returned no pooled embedding for this model")
            values = np.ctypeslib.as_array(
                ctypes.cast(pointer, ctypes.POINTER(ctypes.c_float)), shape=(self._n_embd,)
            ).astype(np.float64)
            norm = float(np.linalg.norm(values))
            results.append((values / norm if norm > 0 else values).tolist())
        return results

    def close(self) -> None:
        """Free the embedding context."""
        if self._ctx:
            self._ll.llama_free(self._ctx)
            self._ctx = None
