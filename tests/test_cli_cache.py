"""`launcher cache list|clear` on real prompt cache entries, written as a server writes them."""

from __future__ import annotations

import json
import os
import time
from pathlib import Path

import numpy as np
import pytest

from launcher.cli import main
from launcher.core.units import GIB
from launcher.engines import prompt_cache


def _store(folder: Path, model: str, tokens: int, state_bytes: int, *, engine: str = "llamacpp") -> None:
    """One entry of `tokens` prompt tokens with a state of `state_bytes`, as an engine saves it."""
    key = prompt_cache.CacheKey(model=model, engine=engine, facts={"file": f"{model}-identity"})
    cache = prompt_cache.PromptDiskCache(folder=folder, budget=GIB, key=key)
    try:
        cache.save(np.arange(tokens, dtype=np.int32), [("state", bytes(state_bytes))], replaces_prefixes=False)
        assert cache.flush(timeout=30)
    finally:
        cache.close()


def _age_entries(folder: Path, model: str, seconds: float) -> None:
    for info in prompt_cache.list_entries(folder):
        if info.model == model:
            os.utime(info.path, (time.time() - seconds, time.time() - seconds))


def test_list_shows_each_entry_with_a_total_and_the_folder(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    folder = tmp_path / "prompts"
    _store(folder, "qwen3-8b", 12_410, 3 << 20)
    _store(folder, "gemma-3-270m", 300, 1 << 20)
    _age_entries(folder, "qwen3-8b", 2 * 3600 + 60)
    assert main(["cache", "list", "--dir", str(folder)]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[0].split() == ["MODEL", "ENGINE", "TOKENS", "SIZE", "LAST", "USED"]
    assert lines[1].split()[:4] == ["gemma-3-270m", "llamacpp", "300", "1.0"]  # most recently used first
    assert lines[1].endswith("just now")
    assert lines[2].split()[:4] == ["qwen3-8b", "llamacpp", "12,410", "3.0"] and lines[2].endswith("2 h ago")
    assert lines[3].startswith("2 entries, 4.0 MiB in ") and lines[3].endswith(str(folder))

    assert main(["cache", "list", "--dir", str(folder), "--json"]) == 0
    listing = json.loads(capsys.readouterr().out)
    assert listing["folder"] == str(folder)
    rows = [(row["model"], row["tokens"]) for row in listing["entries"]]
    assert rows == [("gemma-3-270m", 300), ("qwen3-8b", 12_410)]
    assert listing["total_bytes"] == sum(row["bytes"] for row in listing["entries"]) > 4 << 20


def test_clear_removes_the_named_models_entries_then_all(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    folder = tmp_path / "prompts"
    _store(folder, "qwen3-8b", 12_410, 3 << 20)
    _store(folder, "gemma-3-270m", 300, 1 << 20)
    _store(folder, "gemma-3-270m", 400, 1 << 20)
    assert main(["cache", "clear", "gemma-3-270m", "--dir", str(folder)]) == 0
    out = capsys.readouterr().out
    assert out.startswith("Removed 2 entries of gemma-3-270m, freed 2.0 MiB in ")
    assert [info.model for info in prompt_cache.list_entries(folder)] == ["qwen3-8b"]

    assert main(["cache", "clear", "llama-70b", "--dir", str(folder)]) == 1  # a typo removes nothing
    err = capsys.readouterr().err
    assert "No prompts of llama-70b are cached" in err and "(cached: qwen3-8b)" in err
    assert len(prompt_cache.list_entries(folder)) == 1

    assert main(["cache", "clear", "--dir", str(folder)]) == 0
    assert capsys.readouterr().out.startswith("Removed 1 entry, freed 3.0 MiB in ")
    assert prompt_cache.list_entries(folder) == []
    assert main(["cache", "list", "--dir", str(folder)]) == 0
    assert capsys.readouterr().out == f"No prompts are cached in {folder}.\n"


def test_the_default_folder_is_the_one_serve_uses(capsys: pytest.CaptureFixture[str]) -> None:
    _store(prompt_cache.default_folder(), "qwen3-8b", 500, 1 << 20)  # LAUNCHER_HOME is a tmp dir in tests
    assert main(["cache", "list"]) == 0
    out = capsys.readouterr().out
    assert "qwen3-8b" in out and out.rstrip().endswith(str(prompt_cache.default_folder()))
