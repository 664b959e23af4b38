"""A draft model for speculative decoding on MLX: a small MLX model with the served model's vocabulary,
guessing the next tokens of each generating sequence (`--draft MODEL`), as the llama.cpp engine's
`--draft` does, with mlx-lm's model and KV caches.

`SpeculativeBatch` (`_speculative`) asks it for up to k tokens for each sequence whose own text offers
no n-gram draft. Per sequence it keeps a KV cache (mlx-lm's `make_prompt_cache`) and the tokens that
cache holds; before drafting it catches up with the sequence's history from their longest common
prefix, trimming the rest (rejected draft tokens, or a history that changed). A long prompt's catch-up
is spread over steps (`CATCH_UP_TOKENS` per step over all sequences), so it never stalls the running
streams for long; a sequence gets model drafts once caught up. Drafting is greedy, and a draft ends
before the first token the draft model is not confident in (`MIN_CONFIDENCE`).

Each sequence runs its own forward passes: their caches hold different lengths, and the draft model is
small enough that one short pass per sequence and token costs little next to the served model's step
(mlx-lm's own speculative generation, `speculative_generate_step`, is one sequence only).
"""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass, field
from typing import Any

import mlx.core as mx
import numpy as np
import numpy.typing as npt
from mlx.utils import tree_flatten
from mlx_lm.models.cache import make_prompt_cache, trim_prompt_cache

from launcher.engines.speculation import CATCH_UP_TOKENS, MIN_CONFIDENCE, kept_prefix, vocabulary_mismatch

log = logging.getLogger("launcher.engines.mlx")

_TOKENS_COMPARED = 2_000  # vocabulary entries compared to check that the two models share a vocabulary

DraftWant = tuple[int, npt.NDArray[np.int32], int, int]
"""A sequence that wants a draft: (mlx-lm uid, its history buffer, the history's length, tokens at most)."""


def check_same_vocabulary(main_tokenizer: Any, draft_tokenizer: Any, draft_name: str) -> None:
    """Raise ModelFormatError unless the draft model's tokens are the served model's: same size, same
    end-of-text tokens, and the same text for a spread of token ids (Hugging Face tokenizers)."""
    size, draft_size = len(main_tokenizer), len(draft_tokenizer)
    problem = None
    if size != draft_size:
        problem = f"its vocabulary has {draft_size} tokens, the served model's {size}"
    elif main_tokenizer.eos_token_id != draft_tokenizer.eos_token_id:
        problem = "its end-of-text token differs"
    else:
        ids = np.unique(np.linspace(0, size - 1, num=min(size, _TOKENS_COMPARED)).astype(int)).tolist()
        if main_tokenizer.convert_ids_to_tokens(ids) != draft_tokenizer.convert_ids_to_tokens(ids):
            problem = "its tokens spell different text"
    if problem:
        raise vocabulary_mismatch(draft_name, problem)


@dataclass(eq=False)
class _Sequence:
    cache: list[Any]
    # held[:count]: the tokens whose KV `cache` holds (an array: compared with the history every step)
    held: npt.NDArray[np.int32] = field(default_factory=lambda: np.zeros(1024, dtype=np.int32))
    count: int = 0

    def append(self, tokens: list[int]) -> None:
        end = self.count + len(tokens)
        if end > len(self.held):
            grown = np.zeros(max(end, 2 * len(self.held)), dtype=np.int32)
            grown[: self.count] = self.held[: self.count]
            self.held = grown
        self.held[self.count : end] = tokens
        self.count = end


class MlxDraftModel:
    """The draft model and a KV cache per drafting sequence. Used on the scheduler thread only."""

    def __init__(self, model: Any, *, n_vocab: int) -> None:
        self._model = model
        self._n_vocab = n_vocab  # the served model's: a draft token past it could not be verified
        self._sequences: dict[int, _Sequence] = {}
        parameters: list[tuple[str, Any]] = tree_flatten(model.parameters())  # type: ignore[assignment]
        self.weights_bytes = sum(int(value.nbytes) for _, value in parameters)
        self.round_seconds: float | None = None  # drafting one token for one sequence, moving average

    def draft(self, wants: list[DraftWant]) -> dict[int, npt.NDArray[np.int32]]:
        """Drafts for the sequences of `wants` that are caught up (the others read more of their history)."""
        budget = CATCH_UP_TOKENS
        drafts: dict[int, npt.NDArray[np.int32]] = {}
        # the sequences that are caught up first: a long catch-up must not keep them from drafting
        synced = sorted(
            ((self._sync(uid, h, n), uid, h, n, limit) for uid, h, n, limit in wants), key=lambda w: w[3] - w[0]
        )
        started, rounds = time.perf_counter(), 0
        for common, uid, history, length, limit in synced:
            take = min(length - common, budget)
            if take <= 0:
                continue
            budget -= take
            sequence = self._sequences[uid]
            logits = self._forward(sequence, history[common : common + take].tolist())
            if common + take < length:
                mx.eval(logits)  # the chunk is read now (MLX is lazy), not piled onto the next step's graph
                continue  # still catching up: drafts from the next step on
            tokens: list[int] = []
            while True:
                token = self._confident_token(logits)
                if token is None:
                    break
                tokens.append(token)
                if len(tokens) >= limit:
                    break
                logits = self._forward(sequence, [token])
                rounds += 1
            if tokens:
                drafts[uid] = np.array(tokens, dtype=np.int32)
        if rounds:
            sample = (time.perf_counter() - started) / rounds
            self.round_seconds = sample if self.round_seconds is None else 0.8 * self.round_seconds + 0.2 * sample
        return drafts

    def forget(self, uid: int) -> None:
        """The sequence ended: drop its cache."""
        self._sequences.pop(uid, None)

    def _sync(self, uid: int, history: npt.NDArray[np.int32], length: int) -> int:
        """Trim what this sequence's cache holds beyond what it keeps (`kept_prefix`); return that length."""
        sequence = self._sequences.get(uid)
        if sequence is None:
            sequence = self._sequences[uid] = _Sequence(make_prompt_cache(self._model))
        common = kept_prefix(sequence.held[: sequence.count], history, length)
        if common < sequence.count:
            trim_prompt_cache(sequence.cache, sequence.count - common)
            sequence.count = common
        return common

    def _forward(self, sequence: _Sequence, tokens: list[int]) -> Any:
        """Read `tokens` into the sequence's cache; the logits after the last one."""
        logits = self._model(mx.array([tokens], dtype=mx.int32), cache=sequence.cache)[0, -1]
        sequence.append(tokens)
        return logits

    def _confident_token(self, logits: Any) -> int | None:
        probabilities = mx.softmax(logits.astype(mx.float32), axis=-1)
        best: Any = mx.argmax(probabilities).item()
        token = int(best)
        confidence: Any = probabilities[token].item()
        if token >= self._n_vocab or float(confidence) < MIN_CONFIDENCE:
            return None
        return token
