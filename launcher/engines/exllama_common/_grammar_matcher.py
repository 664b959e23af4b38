"""An llguidance matcher over a model's HF tokenizer, for runtimes without a built-in llguidance filter.

ExLlamaV2's filters answer "which tokens may come next?" as a set (ExLlamaV2Filter.next in
exllamav2/generator/filters/base.py); this turns llguidance's bitmask into that set.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np


class GrammarMatcher:
    """Tracks one generation against a Lark grammar (see _constraints.grammar_for)."""

    def __init__(self, ll_tokenizer: object, grammar: str, vocab_size: int, eos_ids: tuple[int, ...]) -> None:
        import llguidance

        self._grammar = llguidance.grammar_from("lark", grammar)
        problem = llguidance.LLMatcher.validate_grammar(self._grammar, ll_tokenizer)  # type: ignore[arg-type]
        if problem:
            raise ValueError(f"invalid grammar for this tokenizer: {problem}")
        self._matcher = llguidance.LLMatcher(ll_tokenizer, self._grammar)  # type: ignore[arg-type]
        self._vocab_size = vocab_size
        self._eos = frozenset(eos_ids)

    def reset(self) -> None:
        """Back to the start of the grammar."""
        self._matcher.reset()

    def consume(self, token: int) -> None:
        """Advance over a sampled token (an EOS after completion is ignored)."""
        if token in self._eos and (self._matcher.is_stopped() or self._matcher.is_accepting()):
            return
        if not self._matcher.consume_token(token):
            raise ValueError(f"token {token} breaks the grammar: {self._matcher.get_error()}")

    def allowed(self) -> tuple[frozenset[int], frozenset[int]]:
        """(tokens allowed next, tokens that end the constrained output)."""
        if self._matcher.is_stopped():
            return self._eos, self._eos
        mask = np.frombuffer(self._matcher.compute_bitmask(), dtype=np.uint8)
        bits = np.unpackbits(mask, bitorder="little")[: self._vocab_size]
        allowed = frozenset(int(t) for t in np.flatnonzero(bits))
        ending = self._eos if self._matcher.is_accepting() else frozenset()
        return allowed | ending, ending


def load_ll_tokenizer(directory: Path, eos_ids: tuple[int, ...]) -> object:
    """An llguidance tokenizer from the model's tokenizer.json (about a second for 150k tokens: build once)."""
    import llguidance

    path = directory / "tokenizer.json"
    if not path.is_file():
        raise ValueError(
            f"{directory.name} has no tokenizer.json, which constrained output (JSON schema, tool calls) needs"
        )
    return llguidance.LLTokenizer(path.read_text(encoding="utf-8"), eos_token=list(eos_ids) or None)
