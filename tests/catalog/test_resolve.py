"""resolve_model: paths, library names, catalog ids, the starter."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from launcher.catalog import library, starter
from launcher.catalog.resolve import resolve_model
from launcher.core import paths
from launcher.core.errors import ModelFormatError, ModelNotFoundError
from tests.catalog.helpers import make_cached_repo, mlx_config


def test_gguf_path_resolves_to_that_file(tiny_gguf: Path) -> None:
    model = resolve_model(str(tiny_gguf))
    assert model.path == tiny_gguf.resolve()
    assert (model.format, model.name, model.quant) == ("gguf", "tiny-llama", "F32")


def test_directory_with_one_gguf_resolves_to_it(tmp_path: Path, tiny_gguf: Path) -> None:
    shutil.copy(tiny_gguf, tmp_path / "model.gguf")
    assert resolve_model(str(tmp_path)).path == (tmp_path / "model.gguf").resolve()


def test_directory_with_several_ggufs_asks_for_one(tmp_path: Path, tiny_gguf: Path) -> None:
    shutil.copy(tiny_gguf, tmp_path / "a.gguf")
    shutil.copy(tiny_gguf, tmp_path / "b.gguf")
    with pytest.raises(ModelNotFoundError, match=r"several GGUF models.*a\.gguf, b\.gguf"):
        resolve_model(str(tmp_path))


def test_non_gguf_file_is_a_format_error(tmp_path: Path) -> None:
    weights = tmp_path / "model.bin"
    weights.write_bytes(b"\0" * 10)
    with pytest.raises(ModelFormatError, match=r"not a \.gguf"):
        resolve_model(str(weights))


def test_unknown_name_says_what_exists(tiny_gguf: Path) -> None:
    library.add_imported(tiny_gguf, name="my-tiny")
    with pytest.raises(ModelNotFoundError, match="Did you mean: my-tiny"):
        resolve_model("tiny")
    with pytest.raises(ModelNotFoundError, match="launcher models"):
        resolve_model("nothing-like-it")


def test_catalog_id_not_downloaded_points_to_pull() -> None:
    with pytest.raises(ModelNotFoundError, match=r"launcher pull qwen3-0\.6b"):
        resolve_model("qwen3-0.6b")


def test_imported_model_resolves_by_name(tiny_gguf: Path) -> None:
    library.add_imported(tiny_gguf, name="my-tiny")
    model = resolve_model("my-tiny")
    assert model.path == tiny_gguf.resolve() and model.name == "my-tiny"


def test_cached_gguf_resolves_by_library_name_repo_and_catalog_id(tiny_gguf: Path) -> None:
    cache = paths.hf_cache_dir()
    snapshot = make_cached_repo(cache, "unsloth/Qwen3-0.6B-GGUF", {"Qwen3-0.6B-Q4_K_M.gguf": tiny_gguf.read_bytes()})
    expected = snapshot / "Qwen3-0.6B-Q4_K_M.gguf"
    by_name = resolve_model("unsloth/Qwen3-0.6B-GGUF:Q4_K_M")
    assert by_name.path == expected and by_name.catalog_id == "qwen3-0.6b"
    assert resolve_model("unsloth/Qwen3-0.6B-GGUF").path == expected
    assert resolve_model("qwen3-0.6b").path == expected


def test_cached_mlx_repo_resolves_to_its_snapshot_folder() -> None:
    snapshot = make_cached_repo(
        paths.hf_cache_dir(),
        "mlx-community/Qwen3-0.6B-4bit",
        {"config.json": mlx_config(4), "model.safetensors": b"\0" * 4096, "tokenizer.json": b"{}"},
    )
    model = resolve_model("mlx-community/Qwen3-0.6B-4bit")
    assert (model.path, model.format, model.quant) == (snapshot, "mlx", "4bit")


@pytest.mark.slow
def test_starter_is_assembled_once_atomically_and_reused() -> None:
    model = resolve_model("")
    assert model.path == starter.starter_path() and model.path.parent == paths.data_dir() / "starter"
    assert model.format == "gguf" and model.quant == "Q4_K_M" and model.name == "gemma-3-270m"
    first_stat = model.path.stat()
    again = resolve_model("starter")
    assert again.path == model.path
    assert model.path.stat().st_mtime_ns == first_stat.st_mtime_ns  # reused, not re-assembled
    assert [p.name for p in model.path.parent.iterdir()] == [model.path.name]  # no partial left behind
