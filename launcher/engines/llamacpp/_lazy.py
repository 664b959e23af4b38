"""Lazy grammars (`Constraint.triggers`: tool calls on `tool_choice: auto`) on llama.cpp, watched in Python.

llama.cpp has a lazy grammar sampler of its own, but when a trigger matches it replays the matched text
into the grammar and throws (a C++ exception through the C API: the process aborts) if the grammar
refuses it. A model whose call marker is not one token writes it in pieces, and the piece that completes
it may carry more: Gemma's tokenizer has `>{"`, so `<tool_call>{"name"` completes the trigger
`(<tool_call>)` with text the Hermes grammar (`<tool_call>\\n{...`) does not allow there. One such reply
would take the server down.

So the trigger is watched here (`engines/lazy_grammar.TriggerWatch`, as MLX and ExLlama do), the reply
samples with no grammar until it fires (a greedy reply keeps its argmax fast path), and then llama.cpp's
plain grammar sampler is caught up over the text from the handover, one token at a time, each checked
before it is accepted. Where the grammar refuses that text, the reply stays free and its call is parsed
as without a grammar.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from types import ModuleType
from typing import Any

from launcher.engines.lazy_grammar import Handover, TriggerWatch
from launcher.engines.llamacpp._sampling import GRAMMAR_ROOT, grammar_allows

log = logging.getLogger(__name__)


class WatchedGrammar:
    """One reply's lazy grammar: `add` each sampled token; once a trigger matched, the grammar sampler
    to constrain the rest with (caught up, owned by the caller from then on), or None."""

    def __init__(
        self,
        llama_cpp: ModuleType,
        vocab: Any,
        grammar: str,
        triggers: Sequence[str],
        token_bytes: Callable[[int], bytes],
    ) -> None:
        self._ll = llama_cpp
        self._vocab = vocab
        self._grammar = grammar
        self._watch: TriggerWatch | None = TriggerWatch(triggers, token_bytes)

    @property
    def waiting(self) -> bool:
        """Still watching for a trigger."""
        return self._watch is not None

    def add(self, token: int) -> Any | None:
        """Take a sampled token; the caught-up grammar sampler when a trigger matched with it, else None
        (also when the text from the trigger on already breaks the grammar: then the watch stops)."""
        if self._watch is None:
            return None
        handover = self._watch.add(token)
        if handover is None:
            return None
        self._watch = None
        return self._caught_up(handover)

    def _caught_up(self, handover: Handover) -> Any | None:
        sampler = self._ll.llama_sampler_init_grammar(self._vocab, self._grammar.encode(), GRAMMAR_ROOT.encode())
        if not sampler:
            log.info("the tool-call grammar is not used for this reply: llama.cpp rejected it")
            return None
        tokens = self._tokenize(handover.partial) + list(handover.tokens)
        for token in tokens:
            if not grammar_allows(self._ll, sampler, token):
                log.info("the tool-call grammar is not used for this reply: the call as started does not fit it")
                self._ll.llama_sampler_free(sampler)
                return None
            self._ll.llama_sampler_accept(sampler, token)
        return sampler

    def _tokenize(self, text: bytes) -> list[int]:
        if not text:
            return []
        buffer = (self._ll.llama_token * (len(text) + 8))()
        count = self._ll.llama_tokenize(self._vocab, text, len(text), buffer, len(buffer), False, True)
        return list(buffer[: max(count, 0)])
