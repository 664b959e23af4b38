"""An llguidance matcher over a model's HF tokenizer, for the ExLlama engines' grammar filters.

ExLlamaV2's filters answer "which tokens may come next?" as a set (ExLlamaV2Filter.next in
exllamav2/generator/filters/base.py); `allowed` turns llguidance's bitmask into that set. ExLlamaV3's
filters answer with the packed bitmask itself (`bitmask`, Filter.get_next_logit_mask in exllamav3's
generator/filter/filter.py). `LazyGrammarMatcher` (a lazy constraint, `Constraint.triggers`) lets
every token through until the output matches a trigger, then constrains as this one does.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from pathlib import Path

import numpy as np

from launcher.engines.lazy_grammar import Handover, TriggerWatch, catch_up

log = logging.getLogger("launcher.engines.exllama")


class GrammarMatcher:
    """Tracks one generation against a Lark grammar (see _constraints.grammar_for)."""

    def __init__(self, ll_tokenizer: object, grammar: str, vocab_size: int, eos_ids: tuple[int, ...]) -> None:
        import llguidance

        self._grammar = llguidance.grammar_from("lark", grammar)
        problem = llguidance.LLMatcher.validate_grammar(self._grammar, ll_tokenizer)  # type: ignore[arg-type]
        if problem:
            raise ValueError(f"invalid grammar for this tokenizer: {problem}")
        self._table = ll_tokenizer
        self._matcher = llguidance.LLMatcher(ll_tokenizer, self._grammar)  # type: ignore[arg-type]
        self._vocab_size = vocab_size
        self._eos = frozenset(eos_ids)

    def reset(self) -> None:
        """Back to the start of the grammar."""
        if self._matcher.is_error():  # an error survives LLMatcher.reset; the compiled grammar is reused
            import llguidance

            self._matcher = llguidance.LLMatcher(self._table, self._grammar)  # type: ignore[arg-type]
        else:
            self._matcher.reset()

    def consume(self, token: int) -> None:
        """Advance over a sampled token (an EOS after completion is ignored)."""
        if token in self._eos and (self._matcher.is_stopped() or self._matcher.is_accepting()):
            return
        if not self._matcher.consume_token(token):
            raise ValueError(f"token {token} breaks the grammar: {self._matcher.get_error()}")

    def catch_up(self, handover: Handover) -> bool:
        """From the start of the grammar, advance over the output a lazy trigger handed over;
        False when that output already breaks the grammar."""
        self.reset()
        return catch_up(self._matcher, self._table, handover)

    def token_bytes(self, token: int) -> bytes:
        """A token's bytes as llguidance spells them (an added token as its text)."""
        return bytes(self._table.decode_bytes([token]))  # type: ignore[attr-defined]

    @property
    def completed(self) -> bool:
        """The grammar is complete and allows nothing more but the end of the output."""
        return bool(self._matcher.is_stopped())

    def bitmask(self) -> np.ndarray:
        """Tokens allowed next as 32-bit words, token t at bit t % 32 of word t // 32 (llguidance's layout),
        the model's end-of-generation tokens included once the output may end."""
        if self._matcher.is_stopped():
            words = np.zeros(-(-self._vocab_size // 32), dtype=np.uint32)
        else:
            words = np.frombuffer(self._matcher.compute_bitmask(), dtype=np.uint32).copy()
        if self._matcher.is_stopped() or self._matcher.is_accepting():
            for token in self._eos:
                if token // 32 < len(words):
                    words[token // 32] |= np.uint32(1 << (token % 32))
        return words

    def allowed(self) -> tuple[frozenset[int], frozenset[int]]:
        """(tokens allowed next, tokens that end the constrained output)."""
        bits = np.unpackbits(self.bitmask().view(np.uint8), bitorder="little")[: self._vocab_size]
        ending = self._eos if self._matcher.is_stopped() or self._matcher.is_accepting() else frozenset()
        return frozenset(int(t) for t in np.flatnonzero(bits)) | ending, ending


class LazyGrammarMatcher:
    """A lazy constraint's matcher: no constraint until the output matches one of `triggers`; then it
    catches up with the output from the match on (launcher/engines/lazy_grammar.py) and constrains the
    following tokens as its GrammarMatcher says.

    While it waits, `allowed` and `bitmask` return None ("no constraint"): both runtimes skip a filter
    that says so, so free text costs a regex search per token, not a vocabulary-wide mask.
    """

    def __init__(self, matcher: GrammarMatcher, triggers: Sequence[str]) -> None:
        self._matcher = matcher
        self._triggers = tuple(triggers)
        self._watch: TriggerWatch | None = TriggerWatch(self._triggers, matcher.token_bytes)
        self.constraining = False  # a trigger matched and the grammar took over

    def reset(self) -> None:
        """Back to waiting for a trigger, at the start of the output."""
        self._matcher.reset()
        self._watch = TriggerWatch(self._triggers, self._matcher.token_bytes)
        self.constraining = False

    def consume(self, token: int) -> None:
        """Take a sampled token: watch for a trigger, or advance the grammar once one matched."""
        if self.constraining:
            self._matcher.consume(token)
            return
        if self._watch is None:  # the output after a trigger broke the grammar: it stays free
            return
        handover = self._watch.add(token)
        if handover is None:
            return
        self._watch = None
        if self._matcher.catch_up(handover):
            self.constraining = True
        else:
            # What follows the trigger is no call the grammar allows (the trigger matched inside text
            # the model is still writing): the output stays free, as the reply parsers read it as text.
            log.info("lazy constraint: the output after its trigger breaks the grammar; left free")

    @property
    def completed(self) -> bool:
        """The grammar took over and is complete (only the end of the output may follow)."""
        return self.constraining and self._matcher.completed

    def allowed(self) -> tuple[frozenset[int], frozenset[int]] | None:
        """As GrammarMatcher.allowed once constraining; None (anything goes) before."""
        return self._matcher.allowed() if self.constraining else None

    def bitmask(self) -> np.ndarray | None:
        """As GrammarMatcher.bitmask once constraining; None (anything goes) before."""
        return self._matcher.bitmask() if self.constraining else None


def load_ll_tokenizer(directory: Path, eos_ids: tuple[int, ...]) -> object:
    """An llguidance tokenizer from the model's tokenizer.json (about a second for 150k tokens: build once)."""
    import llguidance

    path = directory / "tokenizer.json"
    if not path.is_file():
        raise ValueError(
            f"{directory.name} has no tokenizer.json, which constrained output (JSON schema, tool calls) needs"
        )
    return llguidance.LLTokenizer(path.read_text(encoding="utf-8"), eos_token=list(eos_ids) or None)
