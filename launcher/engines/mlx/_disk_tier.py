"""The scheduler's side of the prompt cache on disk (`launcher.engines.prompt_cache`) for MLX.

A finished sequence's KV cache (the per-layer cache objects mlx-lm's BatchGenerator hands back,
which the scheduler also keeps in its `LRUPromptCache`) is written in mlx-lm's own prompt-cache
format: `save_prompt_cache`'s safetensors (every layer's `state`, its class name and scalars),
serialized into memory on the scheduler thread and written to a file on the cache's writer thread.
Putting an entry back rebuilds those cache objects (`from_state`), checks that they are the kind
this model makes, for exactly the stored tokens, and hands them to the scheduler, which keeps them
in its LRUPromptCache and starts the request from them like from any cached prefix.

A state that can be cut back (every layer trimmable: plain and quantized KV caches) serves any
prompt sharing a prefix with it. One that cannot (the recurrent state of SSM/linear-attention
layers, a sliding window that has rotated) only serves prompts that start with all its tokens: a
next turn that repeats the reply, not a new question after the same system prompt.

All methods here run on the scheduler thread, which owns the MLX arrays.
"""

from __future__ import annotations

import copy
import io
import logging
import time
from dataclasses import dataclass
from typing import Any

import numpy as np

from launcher.engines.prompt_cache import Entry, PromptDiskCache

log = logging.getLogger("launcher.engines.mlx")

_STATE = "safetensors"  # the one part of an entry: mlx-lm's prompt-cache file


@dataclass(frozen=True)
class Restored:
    """A stored prefix as usable cache objects: the tokens they hold, and how long reading them took."""

    tokens: list[int]
    caches: list[Any]  # mlx-lm cache objects, one per layer
    seconds: float


class DiskTier:
    """Exports finished sequences to the prompt cache and rebuilds stored ones."""

    def __init__(self, cache: PromptDiskCache, layer_classes: list[str], trimmable: bool) -> None:
        self.cache = cache
        self._classes = layer_classes  # of a fresh cache of this model: what a stored one must match
        self._trimmable = trimmable

    def candidate(self, prompt: list[int], in_memory: int) -> Entry | None:
        """The stored entry worth restoring for `prompt` when memory offers `in_memory` tokens of it."""
        return self.cache.candidate(np.asarray(prompt, dtype=np.int32), in_memory, whole=not self._trimmable)

    def restore(self, entry: Entry) -> Restored | None:
        """`entry`'s cache objects; None (the entry removed when it cannot be used, one log line) otherwise."""
        started = time.perf_counter()
        parts = self.cache.load(entry)
        if parts is None:
            return None
        tokens = [int(token) for token in entry.tokens]
        try:
            caches = _deserialize(parts[_STATE])
        except Exception as err:  # mlx raises RuntimeError/ValueError for bytes it cannot parse
            self.cache.discard(entry, f"mlx-lm cannot read it back ({type(err).__name__}: {err})")
            return None
        problem = self._mismatch(caches, len(tokens))
        if problem is not None:
            self.cache.discard(entry, problem)
            return None
        return Restored(tokens=tokens, caches=caches, seconds=time.perf_counter() - started)

    def save(self, tokens: list[int], caches: list[Any]) -> None:
        """Export `caches`, which hold `tokens`, for the writer (skipped when an entry holds them already)."""
        from mlx_lm.models.cache import can_trim_prompt_cache

        cache = self.cache
        if len(tokens) < cache.min_tokens or self._mismatch(caches, len(tokens)) is not None:
            return
        array = np.asarray(tokens, dtype=np.int32)
        # A trimmable state serves every shorter prefix: an entry with more tokens after these covers them,
        # and this one supersedes shorter ones.
        trimmable = bool(can_trim_prompt_cache(caches))
        if cache.covers(array, truncatable=trimmable):
            return
        if sum(int(layer.nbytes) for layer in caches) > cache.budget:
            return
        try:
            data = _serialize(caches)
        except (ValueError, RuntimeError) as err:  # a cache kind mlx-lm cannot save
            log.info("prompt cache: a %d-token prefix cannot be saved (%s)", len(tokens), err)
            return
        cache.save(array, [(_STATE, data)], replaces_prefixes=trimmable)

    def _mismatch(self, caches: list[Any], n_tokens: int) -> str | None:
        """What makes `caches` unusable for this model at `n_tokens` tokens, or None."""
        classes = [type(layer).__name__ for layer in caches]
        if classes != self._classes:
            return f"its layers ({len(classes)}) are not the kind this model makes ({len(self._classes)})"
        offsets = {layer.offset for layer in caches if isinstance(getattr(layer, "offset", None), int)}
        if offsets and offsets != {n_tokens}:
            return f"its state holds {sorted(offsets)} tokens where its header says {n_tokens}"
        return None


def reusable(restored: Restored, prompt: list[int]) -> tuple[list[Any], list[int]] | None:
    """A copy of `restored`'s caches cut back to what `prompt` shares with them (never its last token,
    which must be read for its logits) and the prompt tokens left to read; None when nothing is usable."""
    from mlx_lm.models.cache import can_trim_prompt_cache, trim_prompt_cache

    stored = restored.tokens
    shared = 0
    for ours, theirs in zip(stored, prompt, strict=False):
        if ours != theirs:
            break
        shared += 1
    reuse = min(shared, len(prompt) - 1)
    if reuse <= 0 or (reuse < len(stored) and not can_trim_prompt_cache(restored.caches)):
        return None
    caches = copy.deepcopy(restored.caches)
    if reuse < len(stored):
        trim_prompt_cache(caches, len(stored) - reuse)
    return caches, prompt[reuse:]


def _serialize(caches: list[Any]) -> memoryview:
    """mlx-lm's prompt-cache file of `caches`, in memory."""
    from mlx_lm.models.cache import save_prompt_cache

    buffer = io.BytesIO()
    save_prompt_cache(buffer, caches)  # type: ignore[arg-type]  # mx.save_safetensors takes a file object too
    return buffer.getbuffer()


def _deserialize(data: memoryview) -> list[Any]:
    """The cache objects of mlx-lm's prompt-cache file (as `load_prompt_cache`, from memory, and only
    mlx-lm's cache classes)."""
    import mlx.core as mx
    from mlx.utils import tree_unflatten
    from mlx_lm.models import cache as cache_module

    loaded: Any = mx.load(io.BytesIO(data), format="safetensors", return_metadata=True)
    arrays: dict[str, Any] = loaded[0]
    metadata: dict[str, str] = loaded[1]
    mx.eval(list(arrays.values()))  # read now, while the bytes are here
    _info, classes, scalars = tree_unflatten(list(metadata.items()))
    state = dict(arrays)
    for position, scalar in scalars[1:]:
        value = state[position]
        if scalar == "scalar":
            state[position] = value.item()
        elif scalar == "string":
            state[position] = "".join(chr(code) for code in value.tolist())
        elif scalar == "none":
            state[position] = None
        else:
            raise ValueError(f"unknown scalar kind {scalar!r}")
    states = tree_unflatten(list(state.items()))
    caches = []
    for name, layer_state in zip(classes, states, strict=True):
        kind = getattr(cache_module, name, None)
        from_state = getattr(kind, "from_state", None) if isinstance(kind, type) else None
        if not callable(from_state):
            raise ValueError(f"{name!r} is not an mlx-lm cache class")
        caches.append(from_state(layer_state))
    return caches
