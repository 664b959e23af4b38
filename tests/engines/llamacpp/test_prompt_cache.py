"""The prompt cache on disk with the real llama.cpp engine: a prefix read by one load is restored by the
next (a restart, a model swap), exactly; damaged, foreign and half-written entries are never used.

Greedy tokens after a restore must equal those after a cold read of the same prompt: the restored
state is the state, not an approximation. The tiny sliding-window model checks that the window's
checkpoints travel with the state (a prompt that diverges before the stored window still reuses it).
"""

from __future__ import annotations

import logging
from pathlib import Path

import pytest

from launcher.engines import prompt_cache
from launcher.engines.llamacpp._sliding_window import TAIL_TOKENS
from launcher.engines.llamacpp.model import LlamaCppModel
from tests.engines.llamacpp.support import load
from tests.engines.support import Outcome, exact, greedy, run, until

pytestmark = pytest.mark.filterwarnings("ignore::pytest.PytestUnraisableExceptionWarning")

_SYSTEM = "You are a coding agent. Tools: read_file(path), run(command), edit(path, old, new). " * 24


def _load(path: Path, folder: Path, **config: object) -> LlamaCppModel:
    options: dict[str, object] = {"context": 2048, "parallel": 2, "prompt_cache_dir": str(folder)}
    return load(path, **{**options, **config})


async def _read_once(
    path: Path, folder: Path, text: str, max_tokens: int = 12, **config: object
) -> tuple[list[int], Outcome]:
    """Load, generate greedily after `text`, close (which waits for the prompt cache's writes)."""
    model = _load(path, folder, **config)
    try:
        prompt = model.tokenize(text, add_special=True)
        return prompt, await run(model, exact(prompt, max_tokens))
    finally:
        model.close()


@pytest.mark.parametrize("fixture", ["tiny_gguf", "tiny_swa_gguf"])
async def test_a_restart_restores_the_prompt_and_the_tokens_are_the_cold_ones(
    fixture: str, request: pytest.FixtureRequest, tmp_path: Path
) -> None:
    path: Path = request.getfixturevalue(fixture)
    folder = tmp_path / "prompts"
    first_model = _load(path, folder)
    try:
        session = first_model.tokenize(_SYSTEM + "<|im_start|>user\nList the files.<|im_end|>\n")
        first = await run(first_model, exact(session, 24))
        assert first.last.cached_prompt_tokens == 0
        # the next session: the same system prompt, another question
        other = first_model.tokenize(_SYSTEM + "<|im_start|>user\nWhat does main.py do?<|im_end|>\n")
    finally:
        first_model.close()
    assert [info.tokens for info in prompt_cache.list_entries(folder)] == [
        len(session) + 23
    ]  # the last token sampled, never read

    restarted = _load(path, folder)
    # no cache at all: reads every token
    cold = _load(path, tmp_path / "unused", prompt_cache_gb=0, prefix_cache_tokens=0, swa_checkpoints=0)
    try:
        warm_again = await run(restarted, exact(session, 24))
        stats = restarted.stats()
        cold_again = await run(cold, exact(session, 24))
        cold_other = await run(cold, exact(other, 24))
    finally:
        restarted.close()
        cold.close()
    # all but the last token, read again for its logits; in the sliding-window model the stored window
    # has moved on past the prompt's end (24 tokens were generated), so its checkpoint 4 tokens before it
    restored = warm_again.last.disk_prompt_tokens
    assert restored == (len(session) - 1 if fixture == "tiny_gguf" else len(session) - TAIL_TOKENS)
    assert warm_again.tokens == cold_again.tokens == first.tokens
    assert cold_again.last.cached_prompt_tokens == 0 and cold_other.last.cached_prompt_tokens == 0
    assert stats.prompt_cache_disk_hits == 1
    assert stats.prompt_cache_disk_restored_tokens == restored

    # A new session after another restart shares the system prompt, not the question: in the
    # sliding-window model the stored window is past the divergence, and a checkpoint brings it back.
    restarted = _load(path, folder)
    try:
        warm_other = await run(restarted, exact(other, 24))
    finally:
        restarted.close()
    assert warm_other.last.disk_prompt_tokens >= 0.8 * len(other), warm_other.last
    assert warm_other.tokens == cold_other.tokens
    assert stats.prompt_cache_disk_bytes > 0


async def test_a_damaged_entry_is_reported_removed_and_read_cold(
    tiny_gguf: Path, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    folder = tmp_path / "prompts"
    _, cold = await _read_once(tiny_gguf, folder, _SYSTEM)
    (entry,) = prompt_cache.list_entries(folder)
    data = bytearray(entry.path.read_bytes())
    data[-100] ^= 0xFF  # one flipped byte deep in the KV state
    entry.path.write_bytes(bytes(data))

    with caplog.at_level(logging.WARNING, logger="launcher.engines.prompt_cache"):
        _, again = await _read_once(tiny_gguf, folder, _SYSTEM)
    assert again.last.disk_prompt_tokens == 0
    assert again.tokens == cold.tokens
    assert any("checksum" in record.getMessage() for record in caplog.records)
    # removed, then written again from this run's (cold) read
    assert all(info.path.read_bytes() != bytes(data) for info in prompt_cache.list_entries(folder))


async def test_a_write_cut_short_or_another_models_entry_is_never_used(
    tiny_gguf: Path, tiny_swa_gguf: Path, tmp_path: Path
) -> None:
    folder = tmp_path / "prompts"
    prompt, cold = await _read_once(tiny_gguf, folder, _SYSTEM)
    (entry,) = prompt_cache.list_entries(folder)
    whole = entry.path.read_bytes()
    # a process killed mid-write leaves its temporary file (never an entry) or, were the rename
    # not atomic, a short file: neither is used
    entry.path.with_name(f".{entry.path.name}.999.1.tmp").write_bytes(whole[: len(whole) // 2])
    entry.path.write_bytes(whole[: len(whole) - 1000])
    # the same prompt's entry from another model, copied into this model's folder
    await _read_once(tiny_swa_gguf, tmp_path / "other", _SYSTEM)
    (foreign,) = prompt_cache.list_entries(tmp_path / "other")
    entry.path.with_name("f" * 32 + ".lpc").write_bytes(foreign.path.read_bytes())

    model = _load(tiny_gguf, folder)
    try:
        again = await run(model, exact(prompt, 12))
        stats = model.stats()
    finally:
        model.close()
    assert again.last.disk_prompt_tokens == 0
    assert again.tokens == cold.tokens
    assert stats.prompt_cache_disk_hits == 0


async def test_off_with_a_zero_budget_and_a_full_disk_only_logs(
    tiny_gguf: Path, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    off = _load(tiny_gguf, tmp_path / "off", prompt_cache_gb=0)
    try:
        await run(off, greedy(off.tokenize(_SYSTEM), 4))
    finally:
        off.close()
    assert not (tmp_path / "off").exists()

    folder = tmp_path / "full"
    folder.mkdir()
    (folder / "blocker").write_text("a file where the model's folder must go")
    model = _load(tiny_gguf, folder)
    blocked = folder / model_key_dir(folder, model)
    model.close()
    blocked.write_text("not a folder")  # every write now fails, as on a full disk
    model = _load(tiny_gguf, folder)
    try:
        with caplog.at_level(logging.WARNING, logger="launcher.engines.prompt_cache"):
            answers = [await run(model, greedy(model.tokenize(_SYSTEM + str(n)), 4)) for n in range(3)]
            # the reply ends before its state is handed to the writer
            await until(lambda: model.stats().prompt_cache_disk_write_failures == 3, "three failed writes")
    finally:
        model.close()
    assert all(answer.last.finish_reason == "length" for answer in answers)
    assert len([r for r in caplog.records if "cannot write" in r.getMessage()]) == 1


def model_key_dir(folder: Path, model: LlamaCppModel) -> str:
    cache = model._disk_cache  # the folder name is the key's digest
    assert cache is not None
    return cache.key.digest


async def test_the_starter_model_restored_from_disk_answers_as_read_cold(starter_gguf: Path, tmp_path: Path) -> None:
    folder = tmp_path / "prompts"
    text = _SYSTEM + "\n\nUser: which tool lists the files?\nAssistant:"
    # speculation off: its batch shapes follow step timings, and a real model's near-ties follow the shapes
    prompt, cold = await _read_once(starter_gguf, folder, text, 16, parallel=1, speculative="off")
    _, warm = await _read_once(starter_gguf, folder, text, 16, parallel=1, speculative="off")
    assert cold.last.cached_prompt_tokens == 0
    assert warm.last.disk_prompt_tokens >= len(prompt) - TAIL_TOKENS  # the window's checkpoint, or all but one
    assert warm.tokens == cold.tokens
