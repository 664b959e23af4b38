"""Helpers for the llama.cpp engine tests: load with the real engine (the rest is in tests.engines.support)."""

from __future__ import annotations

import ctypes
import math
from pathlib import Path
from typing import Any

from launcher.core.config import ServeConfig
from launcher.core.model_types import LocalModel
from launcher.engines.llamacpp._sampling import GRAMMAR_ROOT
from launcher.engines.llamacpp.engine import LlamaCppEngine
from launcher.engines.llamacpp.model import LlamaCppModel


def load(path: Path, **config: object) -> LlamaCppModel:
    """Load `path` with the real engine (2 threads, small context unless overridden)."""
    settings = {"context": 4096, "parallel": 4, "threads": 2, **config}
    return LlamaCppEngine().load(LocalModel(path=path, format="gguf", name=path.stem), ServeConfig(**settings))


class GrammarProbe:
    """llama.cpp's grammar sampler over a GGUF's vocabulary (loaded alone, no weights)."""

    def __init__(self, gguf: Path) -> None:
        import llama_cpp

        self._ll = llama_cpp
        params = llama_cpp.llama_model_default_params()
        params.vocab_only = True
        self._model = llama_cpp.llama_model_load_from_file(str(gguf).encode(), params)
        assert self._model
        self._vocab = llama_cpp.llama_model_get_vocab(self._model)
        self._eos = llama_cpp.llama_vocab_eos(self._vocab)

    def close(self) -> None:
        self._ll.llama_model_free(self._model)

    def tokens(self, text: str) -> list[int]:
        raw = text.encode()
        buffer = (self._ll.llama_token * (len(raw) + 8))()
        count = self._ll.llama_tokenize(self._vocab, raw, len(raw), buffer, len(buffer), False, False)
        assert count >= 0
        return list(buffer[:count])

    def accepts(self, grammar: str, text: str) -> bool:
        """Whether the grammar lets a model write exactly `text` and stop."""
        sampler = self._ll.llama_sampler_init_grammar(self._vocab, grammar.encode(), GRAMMAR_ROOT.encode())
        assert sampler, "llama.cpp rejected the grammar"
        try:
            for token in self.tokens(text):
                if not self._allowed(sampler, token):
                    return False
                self._ll.llama_sampler_accept(sampler, token)
            return self._allowed(sampler, self._eos)
        finally:
            self._ll.llama_sampler_free(sampler)

    def _allowed(self, sampler: Any, token: int) -> bool:
        data = (self._ll.llama_token_data * 1)()
        data[0].id, data[0].logit, data[0].p = token, 0.0, 0.0
        candidates = self._ll.llama_token_data_array(data, 1, -1, False)
        self._ll.llama_sampler_apply(sampler, ctypes.byref(candidates))
        return not math.isinf(data[0].logit)
