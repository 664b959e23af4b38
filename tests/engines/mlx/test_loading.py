"""Loading MLX model directories: clear errors, and the facts the server needs about the model."""

from __future__ import annotations

import json
import shutil
import sys
from pathlib import Path

import pytest

from launcher.core.errors import EngineError, ModelFormatError, ModelNotFoundError
from launcher.engines import registry
from launcher.engines.mlx.engine import MlxEngine
from launcher.engines.mlx.model import MlxModel
from launcher.hardware.probe import probe_machine
from tests.engines.mlx.support import CHAT_PROMPT, load


def test_the_engine_is_registered_and_says_which_build_it_runs() -> None:
    engine = registry.get("mlx")
    assert isinstance(engine, MlxEngine)
    availability = engine.availability(probe_machine())
    assert availability.usable
    assert availability.version
    if sys.platform == "linux":
        assert availability.backend == "cpu"
        assert "MLX CPU build" in availability.reason and "Apple Silicon" in availability.reason


def test_a_missing_directory_is_model_not_found(tmp_path: Path) -> None:
    with pytest.raises(ModelNotFoundError, match="does not exist"):
        load(tmp_path / "nowhere")


def test_a_directory_without_weights_is_not_an_mlx_model(tmp_path: Path) -> None:
    (tmp_path / "config.json").write_text('{"model_type": "llama"}')
    with pytest.raises(ModelFormatError, match=r"config.json and \*.safetensors"):
        load(tmp_path)


def test_a_gguf_file_points_at_the_llamacpp_engine(tmp_path: Path) -> None:
    path = tmp_path / "model.gguf"
    path.write_bytes(b"GGUF" + bytes(60))
    with pytest.raises(ModelFormatError, match="--engine llamacpp"):
        load(path)


def test_an_unknown_architecture_says_to_upgrade_mlx_lm(tmp_path: Path, tiny_mlx_model: Path) -> None:
    copy = tmp_path / "odd-model"
    shutil.copytree(tiny_mlx_model, copy)
    config = json.loads((copy / "config.json").read_text())
    (copy / "config.json").write_text(json.dumps({**config, "model_type": "no_such_network"}))
    with pytest.raises(ModelFormatError, match=r"Upgrade mlx-lm"):
        load(copy)


def test_model_info_carries_the_models_own_template_and_tokens(mlx_model: MlxModel, tiny_mlx_model: Path) -> None:
    info = mlx_model.info
    assert info.engine == "mlx" and info.format == "mlx"
    assert info.architecture == "llama"
    assert info.quant == "8bit"
    assert info.context_length == 1024 and info.train_context_length == 4096
    assert info.parallel == 4
    assert info.chat_template is not None and "<|im_start|>" in info.chat_template and "tools" in info.chat_template
    assert info.eos_token == "<|im_end|>"
    assert info.eos_token_ids == (mlx_model.tokenize("<|im_end|>")[0],)
    assert info.add_bos_token is False
    assert info.can_embed is False
    assert info.path == str(tiny_mlx_model)


async def test_embeddings_are_refused_with_a_clear_error(mlx_model: MlxModel) -> None:
    with pytest.raises(EngineError, match="does not produce embeddings"):
        await mlx_model.embed(["hello"])


def test_tokenize_round_trips_and_parses_special_tokens_on_request(mlx_model: MlxModel) -> None:
    tokens = mlx_model.tokenize(CHAT_PROMPT)
    assert mlx_model.detokenize(tokens) == CHAT_PROMPT
    im_end = mlx_model.tokenize("<|im_end|>")
    assert len(im_end) == 1
    literal = mlx_model.tokenize("<|im_end|>", parse_special=False)
    assert len(literal) > 1 and im_end[0] not in literal
    assert mlx_model.detokenize(literal) == "<|im_end|>"
    text = "naïve café — 東京 🙂"
    assert mlx_model.detokenize(mlx_model.tokenize(text)) == text
