"""A draft model for speculative decoding: a small GGUF with the served model's vocabulary, in its own
llama.cpp context, guessing the next tokens of each generating sequence (`--draft MODEL`).

The scheduler (`_scheduler._plan_drafts`) asks it for up to k tokens per sequence where the sequence's
own text offers no n-gram draft. Per sequence id it keeps the tokens its own KV holds, and before
drafting catches up with the sequence's history (prompt and output so far) from the longest common
prefix: rejected draft tokens, and a new request in the slot, are just a shorter common prefix. The
catch-up of a long prompt is spread over steps (`CATCH_UP_TOKENS` per step), so it never stalls the
running streams for long; a sequence gets model drafts once caught up. Drafting is greedy, batched
over the sequences, and a sequence stops at the first token the draft model is not confident in
(`MIN_CONFIDENCE`): such guesses are rarely accepted and each costs a row to verify.

The draft context keeps full-size sliding-window caches (`swa_full`), so dropping rejected tokens is
always possible; the draft model is small, so that costs little.
"""

from __future__ import annotations

import logging
import time
from types import ModuleType
from typing import Any

import numpy as np
import numpy.typing as npt

from launcher.engines.llamacpp._batch import TokenBatch
from launcher.engines.llamacpp._sampling import logits_row
from launcher.engines.speculation import CATCH_UP_TOKENS, MIN_CONFIDENCE, kept_prefix, vocabulary_mismatch

log = logging.getLogger("launcher.engines.llamacpp")

_TOKENS_COMPARED = 2_000  # vocabulary entries compared to check that the two models share a vocabulary

DraftWant = tuple[int, npt.NDArray[np.int32], int, int]
"""A sequence that wants a draft: (sequence id, its history buffer, the history's length, tokens at most)."""


def check_same_vocabulary(llama_cpp: ModuleType, main_vocab: Any, draft_vocab: Any, draft_name: str) -> None:
    """Raise ModelFormatError unless the draft model's tokens are the served model's: same size, same
    special tokens, and the same text for a spread of token ids."""
    size = int(llama_cpp.llama_vocab_n_tokens(main_vocab))
    draft_size = int(llama_cpp.llama_vocab_n_tokens(draft_vocab))
    problem = None
    if size != draft_size:
        problem = f"its vocabulary has {draft_size} tokens, the served model's {size}"
    elif int(llama_cpp.llama_vocab_type(main_vocab)) != int(llama_cpp.llama_vocab_type(draft_vocab)):
        problem = "its tokenizer is of another type"
    else:
        specials = ("llama_vocab_bos", "llama_vocab_eos")
        ids = np.unique(np.linspace(0, size - 1, num=min(size, _TOKENS_COMPARED)).astype(int))
        if any(int(getattr(llama_cpp, f)(main_vocab)) != int(getattr(llama_cpp, f)(draft_vocab)) for f in specials):
            problem = "its begin/end-of-text tokens differ"
        elif any(_text(llama_cpp, main_vocab, t) != _text(llama_cpp, draft_vocab, t) for t in ids):
            problem = "its tokens spell different text"
    if problem:
        raise vocabulary_mismatch(draft_name, problem)


def _text(llama_cpp: ModuleType, vocab: Any, token: int) -> bytes:
    return bytes(llama_cpp.llama_vocab_get_text(vocab, int(token)) or b"")


class DraftModel:
    """The draft model's context, drafting for up to `parallel` sequences of `context` tokens each."""

    def __init__(
        self, llama_cpp: ModuleType, model_pointer: Any, context_pointer: Any, *, parallel: int, context: int
    ) -> None:
        self._ll = llama_cpp
        self._model = model_pointer
        self._ctx = context_pointer
        self._mem = llama_cpp.llama_get_memory(context_pointer)
        self._n_vocab = int(llama_cpp.llama_vocab_n_tokens(llama_cpp.llama_model_get_vocab(model_pointer)))
        self._held = [np.zeros(context, dtype=np.int32) for _ in range(parallel)]
        self._n_held = [0] * parallel
        self._batch = TokenBatch(llama_cpp, CATCH_UP_TOKENS + parallel, parallel, context)
        self.weights_bytes = int(llama_cpp.llama_model_size(model_pointer))
        self.round_seconds: float | None = None  # a drafting round (one token for each sequence), moving average

    def draft(self, wants: list[DraftWant]) -> dict[int, npt.NDArray[np.int32]]:
        """Drafts for the sequences of `wants` that are caught up (the others read more of their history)."""
        batch = self._batch
        batch.clear()
        budget = CATCH_UP_TOKENS
        ready: list[tuple[int, int, int]] = []  # (seq id, batch row of its last history token, tokens at most)
        # the sequences that are caught up first: a long catch-up must not keep them from drafting
        synced = sorted(
            ((seq, history, length, limit, self._sync(seq, history, length)) for seq, history, length, limit in wants),
            key=lambda w: w[2] - w[4],
        )
        for seq, history, length, limit, common in synced:
            missing = length - common
            take = min(missing, budget)
            if take <= 0:
                continue
            last = take == missing
            row = batch.add_chunk(history[common : common + take], common, seq, logits_last=last)
            self._held[seq][common : common + take] = history[common : common + take]
            self._n_held[seq] = common + take
            budget -= take
            if last:
                ready.append((seq, row, limit))
        if batch.size == 0 or not self._decode():
            return {}
        drafts: dict[int, list[int]] = {seq: [] for seq, _, _ in ready}
        started = time.perf_counter()
        rounds = 0
        while ready:
            batch.clear()
            going: list[tuple[int, int, int]] = []
            for seq, row, limit in ready:
                token = self._confident_token(row)
                if token is None:
                    continue
                drafts[seq].append(token)
                if len(drafts[seq]) < limit:
                    position = self._n_held[seq]
                    going.append((seq, batch.add_one(token, position, seq), limit))
                    self._held[seq][position] = token
                    self._n_held[seq] = position + 1
            if not going or not self._decode():
                break
            rounds += 1
            ready = going
        if rounds:
            sample = (time.perf_counter() - started) / rounds
            self.round_seconds = sample if self.round_seconds is None else 0.8 * self.round_seconds + 0.2 * sample
        return {seq: np.array(tokens, dtype=np.int32) for seq, tokens in drafts.items() if tokens}

    def _sync(self, seq: int, history: npt.NDArray[np.int32], length: int) -> int:
        """Drop what this sequence's draft KV holds beyond what it keeps (`kept_prefix`); return that length."""
        held = self._n_held[seq]
        common = kept_prefix(self._held[seq][:held], history, length)
        if common < held:
            if not self._ll.llama_memory_seq_rm(self._mem, seq, common, -1):
                self._ll.llama_memory_seq_rm(self._mem, seq, -1, -1)
                common = 0
            self._n_held[seq] = common
        return common

    def _confident_token(self, row: int) -> int | None:
        logits = logits_row(self._ll.llama_get_logits_ith(self._ctx, row), self._n_vocab)
        token = int(logits.argmax())
        confidence = 1.0 / float(np.exp(logits - logits[token]).sum())
        return token if confidence >= MIN_CONFIDENCE else None

    def _decode(self) -> bool:
        result = int(self._ll.llama_decode(self._ctx, self._batch.prepared()))
        if result == 0:
            return True
        log.warning("the draft model could not decode a batch of %d tokens (code %d)", self._batch.size, result)
        for seq in range(len(self._n_held)):  # start its sequences afresh
            self._ll.llama_memory_seq_rm(self._mem, seq, -1, -1)
            self._n_held[seq] = 0
        return False

    def close(self) -> None:
        self._ll.llama_free(self._ctx)
        self._ll.llama_model_free(self._model)
