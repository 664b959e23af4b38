"""Sliding-window models: which cached prefixes are reusable, and checkpoints for the rest.

In a sliding-window (SWA) model most layers attend only to the last `window` tokens, and
llama.cpp's windowed cache keeps only those (the full-size alternative costs a gigabyte for the
starter at 32k x 4, and decides fit for Gemma 3 27B). Reusing a cached prefix that ends
earlier than the window's start is then impossible from the cache alone: the SWA layers no
longer hold the positions the next token must see. A checkpoint is the SWA part of one
sequence's state (`llama_state_seq_get_data_ext` with the partial-only flag) taken when the
sequence had read exactly `n_tokens` tokens. Restoring it into a slot whose full-attention
layers hold at least those tokens brings the slot back to that point; only the rest is read.

As llama.cpp's own server, a request saves one 4 tokens before its prompt's end: the next agent
turn repeats the prompt and diverges in the reply or the last few template tokens. A new session
(the same system prompt and tools, another question; or after a restart, from the prompt cache on
disk) diverges earlier, in the question, so a long prompt also saves them 64, 256, 1,024 and 4,096
tokens before that: a divergence in its last ~4k tokens costs at most 4x its distance from the
end. They are bounded per slot and in memory; the oldest (the earliest) go first.
All methods run on the scheduler thread, which owns the context; the totals are read from others.
"""

from __future__ import annotations

import ctypes
import itertools
import logging
from collections.abc import Iterable
from dataclasses import dataclass, field
from types import ModuleType
from typing import Any

import numpy as np
import numpy.typing as npt

log = logging.getLogger("launcher.engines.llamacpp")

_SWA_ONLY = 1  # LLAMA_STATE_SEQ_FLAGS_PARTIAL_ONLY (= SWA_ONLY): the parts that cannot be rolled back
TAIL_TOKENS = 4  # how far before a prompt's end the last checkpoint goes (as llama-server)
_BEFORE_TAIL = (64, 256, 1024, 4096)  # the earlier ones, in tokens before that

_order = itertools.count()


@dataclass(eq=False)
class Checkpoint:
    """The SWA state of one sequence after it had read `n_tokens` tokens."""

    n_tokens: int
    data: npt.NDArray[np.uint8]
    order: int = field(default_factory=lambda: next(_order))


def checkpoint_positions(prompt_tokens: int, start: int, batch_tokens: int, hints: Iterable[int] = ()) -> list[int]:
    """Where a request reading `prompt_tokens` from `start` saves checkpoints, in order (`hints`: the
    server's positions too, where the user's part of a chat begins)."""
    tail = prompt_tokens - TAIL_TOKENS
    del batch_tokens  # chunks end at these positions whatever the batch size
    wanted = {tail, *(tail - distance for distance in _BEFORE_TAIL), *(h for h in hints if h < tail)}
    return sorted(position for position in wanted if position > start)


class CheckpointStore:
    """Checkpoints per sequence, at most `per_slot` each and `budget_bytes` all together."""

    def __init__(self, llama_cpp: ModuleType, context_pointer: Any, *, per_slot: int, budget_bytes: int) -> None:
        self._ll = llama_cpp
        self._ctx = context_pointer
        self.per_slot = per_slot
        self.budget_bytes = budget_bytes
        self._by_seq: dict[int, list[Checkpoint]] = {}
        self.count = 0
        self.bytes = 0
        self.saved = 0
        self.restored = 0

    @property
    def enabled(self) -> bool:
        """False when the settings allow no checkpoint at all."""
        return self.per_slot > 0 and self.budget_bytes > 0

    def save(self, seq_id: int, n_tokens: int) -> bool:
        """Save `seq_id`'s SWA state as having read `n_tokens` tokens; False when it cannot be kept."""
        size = int(self._ll.llama_state_seq_get_size_ext(self._ctx, seq_id, _SWA_ONLY))
        if size <= 0 or size > self.budget_bytes:
            return False
        data = np.empty(size, dtype=np.uint8)
        written = int(self._ll.llama_state_seq_get_data_ext(self._ctx, byte_pointer(data), size, seq_id, _SWA_ONLY))
        if written <= 0:
            return False
        self.adopt(seq_id, n_tokens, data[:written])
        self.saved += 1
        return True

    def adopt(self, seq_id: int, n_tokens: int, data: npt.NDArray[np.uint8]) -> None:
        """Keep `data` as `seq_id`'s checkpoint after `n_tokens` tokens (saved now, or read from disk)."""
        written = len(data)
        if written > self.budget_bytes:
            return
        kept = self._by_seq.setdefault(seq_id, [])
        for old in [c for c in kept if c.n_tokens == n_tokens]:
            self._remove(seq_id, old)
        while len(kept) >= self.per_slot:
            self._remove(seq_id, kept[0])
        while self.bytes + written > self.budget_bytes and self._evict_oldest():
            pass
        kept.append(Checkpoint(n_tokens=n_tokens, data=data))
        self.count += 1
        self.bytes += written

    def held(self, seq_id: int) -> list[Checkpoint]:
        """`seq_id`'s checkpoints, oldest first."""
        return list(self._by_seq.get(seq_id, ()))

    def best(self, prefixes: Iterable[tuple[int, int]]) -> tuple[int, Checkpoint] | None:
        """The checkpoint reading the most tokens among those valid for a prompt: `prefixes` gives
        (seq_id, n) pairs, where that sequence's cached tokens equal the prompt's first n."""
        found: tuple[int, Checkpoint] | None = None
        for seq_id, usable in prefixes:
            for checkpoint in self._by_seq.get(seq_id, ()):
                if checkpoint.n_tokens <= usable and (found is None or checkpoint.n_tokens > found[1].n_tokens):
                    found = (seq_id, checkpoint)
        return found

    def restore(self, checkpoint: Checkpoint, seq_id: int) -> bool:
        """Put `checkpoint`'s SWA state into `seq_id` (its full-attention cells stay as they are)."""
        data = checkpoint.data
        read = int(self._ll.llama_state_seq_set_data_ext(self._ctx, byte_pointer(data), len(data), seq_id, _SWA_ONLY))
        if read > 0:
            self.restored += 1
        return read > 0

    def truncate(self, seq_id: int, n_tokens: int) -> None:
        """`seq_id` now holds only its first `n_tokens` tokens: drop checkpoints past them."""
        for checkpoint in [c for c in self._by_seq.get(seq_id, ()) if c.n_tokens > n_tokens]:
            self._remove(seq_id, checkpoint)

    def _remove(self, seq_id: int, checkpoint: Checkpoint) -> None:
        self._by_seq[seq_id].remove(checkpoint)
        self.count -= 1
        self.bytes -= len(checkpoint.data)

    def _evict_oldest(self) -> bool:
        everything = [(c.order, seq_id, c) for seq_id, kept in self._by_seq.items() for c in kept]
        if not everything:
            return False
        _, seq_id, checkpoint = min(everything, key=lambda item: item[0])
        self._remove(seq_id, checkpoint)
        return True


def byte_pointer(data: npt.NDArray[np.uint8]) -> Any:
    """A numpy byte buffer as the uint8 pointer llama.cpp's state functions take."""
    return data.ctypes.data_as(ctypes.POINTER(ctypes.c_uint8))


class SlidingWindow:
    """What the scheduler asks before it reuses a cached prefix: does the sequence's cache still
    hold what the next token attends to, and if not, which checkpoint brings it back."""

    def __init__(self, llama_cpp: ModuleType, memory: Any, window: int, store: CheckpointStore | None) -> None:
        self._ll = llama_cpp
        self._mem = memory
        self.window = window  # 0: no sliding-window layers
        self.store = store if window and store is not None and store.enabled else None

    def holds(self, seq_id: int, n_tokens: int) -> bool:
        """Whether the sequence's cache still holds what a token after its first `n_tokens` attends to.

        Sliding-window layers drop positions older than the window (lazily, when their cells are
        needed); full attention needs every position from 0. llama.cpp reports the oldest position
        the sequence still holds in any layer, as llama-server checks it, and keeps every position
        from there on: overwriting a cell purges the sequence's older ones, so there are no holes.
        """
        oldest = int(self._ll.llama_memory_seq_pos_min(self._mem, seq_id))
        if oldest < 0:
            return False
        return oldest <= (max(0, n_tokens - self.window) if self.window else 0)

    def restore(self, seq_id: int, reuse: int, shared: dict[int, int]) -> int:
        """`seq_id` holds `reuse` prompt tokens in full attention, but its window moved past them:
        restore the checkpoint that reads the most of them and return how many it covers (0: none).
        `shared` gives, per sequence, how many of its cached tokens equal the prompt's first ones."""
        store = self.store
        found = store.best((seq, min(n, reuse)) for seq, n in shared.items()) if store else None
        if store is not None and found is not None:
            _, checkpoint = found
            n_tokens = checkpoint.n_tokens
            if store.restore(checkpoint, seq_id):
                self._ll.llama_memory_seq_rm(self._mem, seq_id, n_tokens, -1)
                if self.holds(seq_id, n_tokens):
                    return n_tokens
        if not self.window:
            why = "the cache no longer holds its start"
        elif store is None:
            why = f"the sliding-window layers ({self.window} tokens) moved past it and checkpoints are off"
        else:
            why = f"the sliding-window layers ({self.window} tokens) moved past it and no checkpoint covers it"
        log.info("reading the whole prompt: it shares %d tokens with a cached one, but %s", reuse, why)
        return 0

    def plan(self, prompt_tokens: int, start: int, batch_tokens: int, hints: Iterable[int] = ()) -> list[int]:
        """Where a request reading its prompt from `start` saves checkpoints (none without a store)."""
        if self.store is None:
            return []
        return checkpoint_positions(prompt_tokens, start, batch_tokens, hints)

    def save(self, seq_id: int, n_tokens: int) -> None:
        """Save `seq_id`'s window as having read `n_tokens` tokens, if the bounds allow."""
        if self.store is not None and not self.store.save(seq_id, n_tokens):
            log.debug("no checkpoint at %d tokens for sequence %d (over the memory budget)", n_tokens, seq_id)

    def forget(self, seq_id: int, n_tokens: int) -> None:
        """`seq_id` now holds only its first `n_tokens` tokens."""
        if self.store is not None:
            self.store.truncate(seq_id, n_tokens)
