"""Loading: clear errors for bad files, and the facts the server needs about a good one."""

from __future__ import annotations

from pathlib import Path

import pytest

from launcher.core.errors import ModelFormatError, ModelNotFoundError
from launcher.engines import registry
from launcher.engines.llamacpp.engine import LlamaCppEngine
from launcher.engines.llamacpp.model import LlamaCppModel
from launcher.hardware.machine import CpuInfo, Machine, MemoryInfo
from tests.engines.llamacpp.support import load
from tests.fixtures.models import write_header_only_gguf


def test_missing_file_is_model_not_found(tmp_path: Path) -> None:
    with pytest.raises(ModelNotFoundError, match="not found"):
        load(tmp_path / "nothing-here.gguf")


def test_a_file_that_is_not_gguf_is_a_format_error(tmp_path: Path) -> None:
    fake = tmp_path / "model.gguf"
    fake.write_text("<html>404 Not Found</html>")
    with pytest.raises(ModelFormatError, match="not a GGUF"):
        load(fake)


def test_unknown_architecture_names_it(tmp_path: Path) -> None:
    path = write_header_only_gguf(tmp_path / "strange.gguf", "notarealarch")
    with pytest.raises(ModelFormatError, match="'notarealarch'"):
        load(path)


def test_engine_is_registered_and_available() -> None:
    engine = registry.get("llamacpp")
    assert isinstance(engine, LlamaCppEngine)
    machine = Machine(
        os="linux",
        os_version="test",
        cpu=CpuInfo(brand="test", arch="x86_64", physical_cores=2, logical_cores=2),
        memory=MemoryInfo(total=8 << 30, available=4 << 30),
    )
    availability = engine.availability(machine)
    assert availability.usable
    assert availability.version and availability.version in availability.reason
    assert availability.backend == "cpu"


def test_model_info_comes_from_the_gguf(tiny_model: LlamaCppModel) -> None:
    info = tiny_model.info
    assert info.architecture == "llama"
    assert info.context_length == 4096
    assert info.parallel == 4
    assert info.chat_template is not None and "<|im_start|>" in info.chat_template
    assert info.eos_token == "<|im_end|>"
    assert tiny_model.tokenize("<|im_end|>")[0] in info.eos_token_ids
    assert info.add_bos_token is False
    assert info.can_embed is False
    assert tiny_model.stats().kv_cache_total_tokens == 4096 * 4


def test_tokenize_detokenize_round_trip(tiny_model: LlamaCppModel) -> None:
    text = "<|im_start|>user\nHello world! Café naïve 日本 🙂<|im_end|>"
    tokens = tiny_model.tokenize(text)
    assert tokens[0] == tiny_model.tokenize("<|im_start|>")[0]  # special text parsed as one token
    assert len(tiny_model.tokenize("<|im_start|>")) == 1
    assert tiny_model.detokenize(tokens) == text
    assert len(tiny_model.tokenize("<|im_start|>", parse_special=False)) > 1
