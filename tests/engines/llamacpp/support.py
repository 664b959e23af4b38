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


class LazyGrammarProbe(GrammarProbe):
    """The grammar probe run the way the engine runs a lazy grammar (`Constraint.triggers`): tokens are
    free while `_lazy.WatchedGrammar` waits for a trigger, then checked against the grammar it caught up."""

    def tokens(self, text: str) -> list[int]:
        """`text` as a model writes it: a control token's text (`[TOOL_CALLS]`) is that token."""
        raw = text.encode()
        buffer = (self._ll.llama_token * (len(raw) + 8))()
        count = self._ll.llama_tokenize(self._vocab, raw, len(raw), buffer, len(buffer), False, True)
        assert count >= 0
        return list(buffer[:count])

    def piece(self, token: int) -> bytes:
        buffer = ctypes.create_string_buffer(64)
        size = self._ll.llama_token_to_piece(self._vocab, token, buffer, len(buffer), 0, True)
        assert size >= 0
        return buffer.raw[:size]

    def refused_at(self, grammar: str, triggers: tuple[str, ...], text: str) -> int | None:
        """Where the grammar refuses the model's next token as it writes `text` (the offset of that token's
        text; `len(text)` when it may not end there), or None when all of it passes and may end."""
        from launcher.engines.llamacpp._lazy import WatchedGrammar
        from launcher.engines.llamacpp._sampling import grammar_allows

        watch: WatchedGrammar | None = WatchedGrammar(self._ll, self._vocab, grammar, triggers, self.piece)
        sampler = None
        try:
            written = 0
            for token in self.tokens(text):
                if sampler is not None:
                    if not grammar_allows(self._ll, sampler, token):
                        return written
                    self._ll.llama_sampler_accept(sampler, token)
                elif watch is not None:
                    sampler = watch.add(token)
                    watch = watch if watch.waiting else None
                written += len(self.piece(token).decode(errors="replace"))
            return None if sampler is None or grammar_allows(self._ll, sampler, self._eos) else len(text)
        finally:
            if sampler is not None:
                self._ll.llama_sampler_free(sampler)
