"""The local library over a fake HF cache built here, imported files and the starter."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from launcher.catalog import library
from launcher.core import paths
from launcher.core.errors import ModelError, ModelFormatError
from tests.catalog.helpers import exl3_config, make_cached_repo, mlx_config, write_moe_gguf


def test_hf_cache_lists_any_repo_with_format_quant_size_and_architecture(tiny_gguf: Path, tmp_path: Path) -> None:
    cache = paths.hf_cache_dir()
    data = tiny_gguf.read_bytes()
    make_cached_repo(cache, "someone/Tiny-GGUF", {"tiny.Q5_K_M.gguf": data, "tiny-mmproj-f16.gguf": data})
    mlx_files = {"config.json": mlx_config(8), "m.safetensors": b"\0" * 999}
    make_cached_repo(cache, "mlx-community/Qwen3-0.6B-8bit", mlx_files)
    exl_files = {"config.json": exl3_config(4.0), "m.safetensors": b"\0" * 99}
    make_cached_repo(cache, "turboderp/Llama-3.2-1B-exl3", exl_files, ref="4.0bpw")
    make_cached_repo(cache, "bert/plain", {"config.json": b"{}", "README.md": b"x"})  # no weights: not a model
    entries = {e.name: e for e in library.scan_hf_cache()}
    assert sorted(entries) == [
        "mlx-community/Qwen3-0.6B-8bit",
        "someone/Tiny-GGUF:Q5_K_M",
        "turboderp/Llama-3.2-1B-exl3:4.0bpw",
    ]  # the vision projector is not listed as a model
    gguf = entries["someone/Tiny-GGUF:Q5_K_M"]
    assert (gguf.model.format, gguf.model.quant, gguf.size_bytes) == ("gguf", "Q5_K_M", len(data))
    assert gguf.gguf is not None and gguf.gguf.has_chat_template and gguf.architecture is not None
    assert gguf.architecture.layers == 2
    mlx = entries["mlx-community/Qwen3-0.6B-8bit"]
    assert (mlx.model.format, mlx.model.quant) == ("mlx", "8bit")
    exl = entries["turboderp/Llama-3.2-1B-exl3:4.0bpw"]
    assert (exl.model.format, exl.model.quant, exl.refs) == ("exl3", "4.0bpw", ("4.0bpw",))
    assert exl.architecture is not None and exl.architecture.kv_heads == 8


def test_split_gguf_with_a_missing_shard_is_listed_as_unusable(tmp_path: Path) -> None:
    shards = write_moe_gguf(tmp_path / "moe-Q4_K_M.gguf", split_max_tensors=2)
    make_cached_repo(paths.hf_cache_dir(), "org/Moe", {s.name: s.read_bytes() for s in shards[:2]})
    [entry] = library.scan_hf_cache()
    assert entry.model.path.name == "moe-Q4_K_M-00001-of-00003.gguf"
    assert not entry.usable and entry.problem == "only 2 of 3 shards are on disk"


def test_import_links_in_place_and_forgetting_never_deletes_the_file(tiny_gguf: Path) -> None:
    entry = library.add_imported(tiny_gguf)
    assert entry.name == "tiny-llama" and entry.model.path == tiny_gguf.resolve()
    index = json.loads(library.imported_index_file().read_text())
    assert index["models"][0]["path"] == str(tiny_gguf.resolve())
    assert [e.name for e in library.scan_imported()] == ["tiny-llama"]
    assert not any(p.suffix == ".gguf" for p in paths.data_dir().rglob("*"))  # nothing copied
    assert library.remove_imported("tiny-llama")
    assert library.scan_imported() == [] and tiny_gguf.exists()


def test_import_refuses_non_models_and_name_clashes(tmp_path: Path, tiny_gguf: Path) -> None:
    notes = tmp_path / "notes.txt"
    notes.write_text("hi")
    with pytest.raises(ModelFormatError, match=r"not a \.gguf"):
        library.add_imported(notes)
    with pytest.raises(ModelFormatError, match=r"no \.gguf or \.safetensors"):
        library.add_imported(tmp_path)
    library.add_imported(tiny_gguf, name="mine")
    other = tmp_path / "other.gguf"
    other.write_bytes(tiny_gguf.read_bytes())
    with pytest.raises(ModelError, match="already imported"):
        library.add_imported(other, name="mine")


def test_imported_file_that_disappeared_is_flagged(tmp_path: Path, tiny_gguf: Path) -> None:
    copy = tmp_path / "gone.gguf"
    copy.write_bytes(tiny_gguf.read_bytes())
    library.add_imported(copy)
    copy.unlink()
    [entry] = library.scan_imported()
    assert not entry.usable and "no longer exists" in (entry.problem or "")


def test_delete_one_quant_keeps_the_other(tiny_gguf: Path) -> None:
    data = tiny_gguf.read_bytes()
    make_cached_repo(paths.hf_cache_dir(), "org/Two", {"m-Q4_K_M.gguf": data, "m-Q8_0.gguf": data + b"\0"})
    entries = {e.name: e for e in library.scan_hf_cache()}
    freed = library.delete_hf_entry(entries["org/Two:Q8_0"])
    assert freed == len(data) + 1
    assert [e.name for e in library.scan_hf_cache()] == ["org/Two:Q4_K_M"]
    freed = library.delete_hf_entry(library.scan_hf_cache()[0])
    assert freed == len(data) and library.scan_hf_cache() == []


def test_starter_is_listed_before_its_first_use() -> None:
    entry = library.starter_entry()
    assert entry.source == "starter" and entry.name == "gemma-3-270m"
    assert entry.problem == "assembled on first use"
