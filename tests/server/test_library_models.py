"""Which library models a server loads by name: all of them by default, one file under one name only."""

from __future__ import annotations

from pathlib import Path

import pytest

from launcher.catalog import starter
from launcher.catalog.library import add_imported
from launcher.core.config import ServeConfig
from launcher.core.errors import ConfigError
from launcher.server.pool.library_models import file_key, library_models
from launcher.server.pool.model_names import server_names
from launcher.server.runner import serves_library, serves_many
from tests.fixtures.models import write_tiny_gguf


@pytest.fixture
def two_files(tmp_path: Path) -> tuple[Path, Path]:
    return write_tiny_gguf(tmp_path / "tiny-a.gguf", seed=1), write_tiny_gguf(tmp_path / "tiny-b.gguf", seed=2)


def test_the_library_is_served_by_default_and_off_beside_a_child_engine() -> None:
    assert ServeConfig().library and serves_library(ServeConfig()) and serves_many(ServeConfig())
    assert not serves_many(ServeConfig(library=False))
    assert not serves_library(ServeConfig(engine="vllm"))  # vLLM runs its one model; the library's need another engine
    assert ServeConfig(library=False).to_argv() == ["--no-library"]  # the app's unticked box reaches its server


def test_a_file_the_server_serves_is_an_alias_of_it_not_a_second_model(two_files: tuple[Path, Path]) -> None:
    a, b = two_files
    add_imported(a, "first")
    add_imported(b, "second")
    served = {file_key(a): "tiny-a"}  # `launcher serve path/to/tiny-a.gguf`
    library = library_models(served)
    assert library.names == ["second", starter.starter_name()]
    assert library.same_files == {"first": "tiny-a"}

    config = ServeConfig(model=str(a))
    names = server_names(config, "tiny-a", library.names, (str(a),), same_files=library.same_files)
    assert sorted(names.entries) == sorted(["tiny-a", "second", starter.starter_name()])
    resolved = names.resolve("first")
    assert resolved is not None and resolved.name == "tiny-a" and names.knows("first")
    assert names.resolve("claude-sonnet-4-6") is names.entries["tiny-a"]  # MODEL answers the rest


def test_the_starter_under_its_own_name_is_listed_once() -> None:
    served = {file_key(starter.starter_path()): starter.starter_name()}  # `launcher serve`
    library = library_models(served)
    assert starter.starter_name() not in library.names and library.same_files == {}


def test_an_alias_to_nothing_names_what_the_server_serves() -> None:
    config = ServeConfig(alias=["claude-*=qwen3-32b"])
    with pytest.raises(ConfigError, match="serves one model, 'tiny'"):
        server_names(config, "tiny", [])  # --no-library, or a library of MODEL alone
    with pytest.raises(ConfigError, match="it loads second, tiny"):
        server_names(config, "tiny", ["second"])
