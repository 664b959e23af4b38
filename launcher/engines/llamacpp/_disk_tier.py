"""The scheduler's side of the prompt cache on disk (`launcher.engines.prompt_cache`) for llama.cpp.

A sequence's state is exported with the per-sequence state API (`llama_state_seq_get_data_ext`,
all layers) when its request ends, together with its sliding-window checkpoints: the full state
holds every position in the full-attention layers but only the last window in the sliding ones,
so a later prompt that diverges before the window needs a checkpoint, as in memory. Putting an
entry back fills a free slot as if that slot had run the stored tokens itself; the scheduler's
usual prefix logic (truncate to the shared part, restore a checkpoint when the window moved past
it) then decides how much of it the prompt reuses.

Export copies the state into memory on the scheduler thread (a memcpy: ~20 ms for a 12k-token
prompt of the starter); the file is written on the cache's writer thread. All methods here run on
the scheduler thread, which owns the context.
"""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass
from types import ModuleType
from typing import Any

import numpy as np
import numpy.typing as npt

from launcher.engines.llamacpp._sliding_window import SlidingWindow, byte_pointer
from launcher.engines.prompt_cache import Entry, PromptDiskCache

log = logging.getLogger("launcher.engines.llamacpp")

_FULL_STATE = 0  # llama_state_seq_flags: every layer's cells of the sequence
_STATE = "state"
_CHECKPOINT = "swa@"  # + the token count a checkpoint was taken at


@dataclass(frozen=True)
class Restored:
    """An entry put back into a sequence: the tokens it now holds, and how long that took."""

    tokens: npt.NDArray[np.int32]
    seconds: float


class DiskTier:
    """Exports finished sequences to the prompt cache and puts stored ones back."""

    def __init__(
        self, llama_cpp: ModuleType, context_pointer: Any, cache: PromptDiskCache, window: SlidingWindow, context: int
    ) -> None:
        self._ll = llama_cpp
        self._ctx = context_pointer
        self._mem = llama_cpp.llama_get_memory(context_pointer)
        self.cache = cache
        self._window = window
        self._context = context

    def candidate(self, prompt: npt.NDArray[np.int32], in_memory: int) -> Entry | None:
        """The stored entry worth restoring for `prompt` when memory offers `in_memory` tokens of it: one
        that saves reading at least half the cache's minimum more (`PromptDiskCache.candidate`), and
        fits this context (one stored with a longer --context does not)."""
        return self.cache.candidate(prompt, in_memory, longest=self._context)

    def restore(self, seq_id: int, entry: Entry) -> Restored | None:
        """Put `entry`'s state into `seq_id` (emptied first); None when it could not be (it is then empty)."""
        started = time.perf_counter()
        parts = self.cache.load(entry)
        self._ll.llama_memory_seq_rm(self._mem, seq_id, -1, -1)
        self._window.forget(seq_id, 0)
        if parts is None or _STATE not in parts:
            return None
        state = np.frombuffer(parts[_STATE], dtype=np.uint8)
        pointer = byte_pointer(state)
        read = int(self._ll.llama_state_seq_set_data_ext(self._ctx, pointer, len(state), seq_id, _FULL_STATE))
        if read <= 0:
            self._ll.llama_memory_seq_rm(self._mem, seq_id, -1, -1)
            log.info("prompt cache: llama.cpp could not take a %d-token stored state back", len(entry.tokens))
            return None
        if self._window.store is not None:
            for name, data in parts.items():
                if name.startswith(_CHECKPOINT):
                    self._window.store.adopt(seq_id, int(name[len(_CHECKPOINT) :]), np.frombuffer(data, np.uint8))
        return Restored(tokens=entry.tokens, seconds=time.perf_counter() - started)

    def save(self, seq_id: int, tokens: npt.NDArray[np.int32]) -> None:
        """Export `seq_id`, which holds `tokens`, for the writer (skipped when an entry holds them already)."""
        cache = self.cache
        sliding = self._window.window > 0
        # Without sliding-window layers a state can be cut back to any prefix: an entry with more tokens
        # after these covers them, and this one supersedes shorter ones.
        if len(tokens) < cache.min_tokens or cache.covers(tokens, truncatable=not sliding):
            return
        size = int(self._ll.llama_state_seq_get_size_ext(self._ctx, seq_id, _FULL_STATE))
        if size <= 0 or size > cache.budget:
            return
        data = np.empty(size, dtype=np.uint8)
        written = int(self._ll.llama_state_seq_get_data_ext(self._ctx, byte_pointer(data), size, seq_id, _FULL_STATE))
        if written <= 0:
            return
        parts: list[tuple[str, Any]] = [(_STATE, data[:written])]
        if self._window.store is not None:
            parts += [
                (f"{_CHECKPOINT}{checkpoint.n_tokens}", checkpoint.data)
                for checkpoint in self._window.store.held(seq_id)
                if checkpoint.n_tokens <= len(tokens)
            ]
        cache.save(tokens, parts, replaces_prefixes=not sliding)
