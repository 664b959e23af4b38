"""A `llama_batch` whose arrays are numpy buffers we own, so filling a step costs a few slice copies.

`llama_batch_init` allocates C arrays that can only be filled element by element from Python
(and `seq_id` is an array of per-token pointers). Here every field points into a preallocated
numpy array, and each token's `seq_id` pointer points at a constant one-element array per
sequence, so adding a 500-token prompt chunk is five vectorised assignments.
"""

from __future__ import annotations

import ctypes
from types import ModuleType
from typing import Any

import numpy as np
import numpy.typing as npt


class TokenBatch:
    """One reusable batch of up to `capacity` tokens over `n_sequences` sequence ids."""

    def __init__(self, llama_cpp: ModuleType, capacity: int, n_sequences: int, max_position: int) -> None:
        self.capacity = capacity
        self.size = 0
        self.tokens = np.zeros(capacity, dtype=np.int32)
        self.positions = np.zeros(capacity, dtype=np.int32)
        self.n_seq_id = np.ones(capacity, dtype=np.int32)
        self.want_logits = np.zeros(capacity, dtype=np.int8)
        self._seq_values = np.arange(n_sequences, dtype=np.int32)
        base = self._seq_values.ctypes.data
        self._seq_pointers = np.array([base + 4 * i for i in range(n_sequences)], dtype=np.uintp)
        self.seq_pointers = np.zeros(capacity, dtype=np.uintp)
        self._arange = np.arange(max_position + capacity, dtype=np.int32)

        c_int32_p = ctypes.POINTER(ctypes.c_int32)
        self.struct: Any = llama_cpp.llama_batch()
        self.struct.n_tokens = 0
        self.struct.token = self.tokens.ctypes.data_as(c_int32_p)
        self.struct.embd = ctypes.POINTER(ctypes.c_float)()
        self.struct.pos = self.positions.ctypes.data_as(c_int32_p)
        self.struct.n_seq_id = self.n_seq_id.ctypes.data_as(c_int32_p)
        self.struct.seq_id = ctypes.cast(self.seq_pointers.ctypes.data, ctypes.POINTER(c_int32_p))
        self.struct.logits = self.want_logits.ctypes.data_as(ctypes.POINTER(ctypes.c_int8))

    @property
    def free(self) -> int:
        """Tokens that still fit in this step."""
        return self.capacity - self.size

    def clear(self) -> None:
        """Start a new step."""
        self.size = 0

    def add_one(self, token: int, position: int, seq_id: int) -> int:
        """Add a decode token that needs logits; return its batch index."""
        index = self.size
        self.tokens[index] = token
        self.positions[index] = position
        self.seq_pointers[index] = self._seq_pointers[seq_id]
        self.want_logits[index] = 1
        self.size = index + 1
        return index

    def add_chunk(self, tokens: npt.NDArray[np.int32], position: int, seq_id: int, logits_last: bool) -> int:
        """Add consecutive prompt tokens of one sequence; return the batch index of the last one."""
        start, count = self.size, len(tokens)
        end = start + count
        self.tokens[start:end] = tokens
        self.positions[start:end] = self._arange[position : position + count]
        self.seq_pointers[start:end] = self._seq_pointers[seq_id]
        self.want_logits[start:end] = 0
        if logits_last:
            self.want_logits[end - 1] = 1
        self.size = end
        return end - 1

    def add_draft(self, tokens: npt.NDArray[np.int32], position: int, seq_id: int) -> int:
        """Add a speculative draft of one sequence, every token with logits; return its first index."""
        start = self.size
        self.add_chunk(tokens, position, seq_id, logits_last=False)
        self.want_logits[start : self.size] = 1
        return start

    def prepared(self) -> Any:
        """The ctypes struct to pass to llama_decode for the tokens added so far."""
        self.struct.n_tokens = self.size
        return self.struct
