"""The prompt cache on disk with the real MLX engine: a prefix read by one load is restored by the next
(a restart, a model swap), exactly; a damaged entry is never used.

Greedy tokens after a restore must equal those after a cold read of the same prompt: the restored
KV cache is the cache, not an approximation.
"""

from __future__ import annotations

import logging
from pathlib import Path

import numpy as np
import pytest

from launcher.engines import prompt_cache
from launcher.engines.mlx._disk_tier import Restored, reusable
from launcher.engines.mlx.model import MlxModel
from tests.engines.mlx.support import load
from tests.engines.support import exact, run

_SYSTEM = "You are a coding agent. Tools: read_file(path), run(command), edit(path, old, new). " * 16


def _load(path: Path, folder: Path, **config: object) -> MlxModel:
    options: dict[str, object] = {"parallel": 2, "prompt_cache_dir": str(folder)}
    return load(path, **{**options, **config})


def _cold(path: Path, tmp_path: Path) -> MlxModel:
    """No cache at all: reads every token."""
    return _load(path, tmp_path / "unused", prompt_cache_gb=0, prefix_cache_tokens=0)


async def test_a_restart_restores_the_prompt_and_the_tokens_are_the_cold_ones(
    tiny_mlx_model: Path, tmp_path: Path
) -> None:
    folder = tmp_path / "prompts"
    first_model = _load(tiny_mlx_model, folder)
    try:
        session = first_model.tokenize(_SYSTEM + "<|im_start|>user\nList the files.<|im_end|>\n")
        assert len(session) >= 300
        first = await run(first_model, exact(session, 16))
        assert first.last.cached_prompt_tokens == 0 and first.last.disk_prompt_tokens == 0
        other = first_model.tokenize(_SYSTEM + "<|im_start|>user\nWhat does main.py do?<|im_end|>\n")
    finally:
        first_model.close()  # waits for the prompt cache's writes
    # mlx-lm runs every token it returns through the model, the last one too: all are in the state
    assert [info.tokens for info in prompt_cache.list_entries(folder)] == [len(session) + 16]

    restarted = _load(tiny_mlx_model, folder)
    cold = _cold(tiny_mlx_model, tmp_path)
    try:
        warm_again = await run(restarted, exact(session, 16))
        warm_other = await run(restarted, exact(other, 16))  # from memory now: the restore put it there
        stats = restarted.stats()
        cold_again = await run(cold, exact(session, 16))
        cold_other = await run(cold, exact(other, 16))
    finally:
        restarted.close()
        cold.close()
    # all but the last token, read again for its logits
    assert warm_again.last.disk_prompt_tokens == warm_again.last.cached_prompt_tokens == len(session) - 1
    assert warm_again.tokens == cold_again.tokens == first.tokens
    assert cold_again.last.cached_prompt_tokens == 0 and cold_other.last.cached_prompt_tokens == 0
    assert stats.prompt_cache_disk_hits == 1
    assert stats.prompt_cache_disk_restored_tokens == len(session) - 1
    assert stats.prompt_cache_disk_bytes > 0
    # a new question after the same system prompt: the shared part from the restored cache, cut back
    assert warm_other.last.disk_prompt_tokens == 0
    assert warm_other.last.cached_prompt_tokens >= 0.8 * len(other), warm_other.last
    assert warm_other.tokens == cold_other.tokens


async def test_a_damaged_entry_is_reported_removed_and_read_cold(
    tiny_mlx_model: Path, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    folder = tmp_path / "prompts"
    model = _load(tiny_mlx_model, folder)
    prompt = model.tokenize(_SYSTEM)
    try:
        cold = await run(model, exact(prompt, 8))
    finally:
        model.close()
    (entry,) = prompt_cache.list_entries(folder)
    data = bytearray(entry.path.read_bytes())
    data[-100] ^= 0xFF  # one flipped byte deep in the KV state
    entry.path.write_bytes(bytes(data))

    model = _load(tiny_mlx_model, folder)
    try:
        with caplog.at_level(logging.WARNING, logger="launcher.engines.prompt_cache"):
            again = await run(model, exact(prompt, 8))
        stats = model.stats()
    finally:
        model.close()
    assert again.last.disk_prompt_tokens == 0
    assert again.tokens == cold.tokens
    assert stats.prompt_cache_disk_hits == 0 and stats.prompt_cache_disk_misses == 1
    assert any("checksum" in record.getMessage() for record in caplog.records)
    # removed, then written again from this run's (cold) read
    assert all(info.path.read_bytes() != bytes(data) for info in prompt_cache.list_entries(folder))


async def test_an_entry_mlx_cannot_read_is_removed_and_read_cold(
    tiny_mlx_model: Path, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    folder = tmp_path / "prompts"
    model = _load(tiny_mlx_model, folder)
    prompt = model.tokenize(_SYSTEM)
    try:
        cold = await run(model, exact(prompt, 8))
    finally:
        model.close()
    assert model._disk_cache is not None
    # the same tokens, a right checksum, but a state that is not mlx-lm's: what a format change would leave
    writer = prompt_cache.PromptDiskCache(folder=folder, budget=1 << 30, key=model._disk_cache.key)
    found = writer.best(np.asarray(prompt, dtype=np.int32), better_than=0)
    assert found is not None
    writer.save(found[0].tokens, [("safetensors", b"\x08" + bytes(64))], replaces_prefixes=False)
    writer.close()

    model = _load(tiny_mlx_model, folder)
    try:
        with caplog.at_level(logging.WARNING, logger="launcher.engines.prompt_cache"):
            again = await run(model, exact(prompt, 8))
        stats = model.stats()
    finally:
        model.close()
    assert again.last.disk_prompt_tokens == 0
    assert again.tokens == cold.tokens
    assert stats.prompt_cache_disk_hits == 0
    assert any("mlx-lm cannot read it back" in record.getMessage() for record in caplog.records)


def test_a_state_that_cannot_be_cut_back_only_serves_prompts_that_start_with_all_of_it(tmp_path: Path) -> None:
    """SSM layers (mlx-lm's ArraysCache) hold a running state, not one entry per token: a stored
    conversation serves its next turn, not a new question after the same system prompt."""
    from mlx_lm.models.cache import ArraysCache

    key = prompt_cache.CacheKey(model="hybrid", engine="mlx", facts={"weights": "w"})
    cache = prompt_cache.PromptDiskCache(folder=tmp_path, budget=1 << 30, key=key)
    system, reply = list(range(1, 400)), list(range(1000, 1040))
    cache.save(np.asarray(system + reply, dtype=np.int32), [("safetensors", b"state")], replaces_prefixes=False)
    cache.close()
    cache = prompt_cache.PromptDiskCache(folder=tmp_path, budget=1 << 30, key=key)
    next_turn = np.asarray(system + reply + [7, 8, 9], dtype=np.int32)
    new_question = np.asarray(system + [5, 6] * 200, dtype=np.int32)
    assert cache.candidate(next_turn, 0, whole=True) is not None
    assert cache.candidate(new_question, 0, whole=True) is None
    assert cache.candidate(new_question, 0) is not None  # a trimmable state would serve it

    restored = Restored(tokens=system + reply, caches=[ArraysCache(size=2)], seconds=0.0)
    assert reusable(restored, new_question.tolist()) is None
    usable = reusable(restored, next_turn.tolist())
    assert usable is not None and usable[1] == [7, 8, 9]
