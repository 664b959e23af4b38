"""GGUF header reading on real files: the tiny test model, a split MoE file, and the starter; and the
short read a loader makes (architecture and file type)."""

from __future__ import annotations

from pathlib import Path

import gguf
import pytest

from launcher.catalog.gguf_meta import GgufIdentity, read_gguf_metadata, read_identity, shard_paths
from launcher.core.errors import ModelFormatError
from tests.catalog.helpers import write_moe_gguf
from tests.fixtures.models import write_header_only_gguf


def test_tiny_gguf_architecture_numbers(tiny_gguf: Path) -> None:
    meta = read_gguf_metadata(tiny_gguf)
    assert meta.architecture == "llama"
    assert (meta.layers, meta.attention_heads, meta.kv_heads, meta.head_dim) == (2, 4, 2, 16)
    assert (meta.hidden_size, meta.context_length) == (64, 4096)
    assert meta.has_chat_template and "<|im_start|>" in (meta.chat_template or "")
    assert meta.quant == "F32"
    assert meta.sliding_window is None and meta.experts is None
    assert meta.vocab_size and meta.vocab_size > 256
    arch = meta.to_architecture()
    assert arch.layers == 2 and arch.kv_heads == 2 and arch.max_context == 4096
    assert arch.params_total_b == pytest.approx(meta.params_total / 1e9)
    assert meta.bits_per_weight == pytest.approx(32.0)


def test_split_moe_gguf_counts_all_shards_and_active_experts(tmp_path: Path) -> None:
    shards = write_moe_gguf(tmp_path / "moe.gguf", split_max_tensors=2)
    assert len(shards) == 3 and shards[0].name == "moe-00001-of-00003.gguf"
    meta = read_gguf_metadata(shards[1])  # any shard leads to the whole set
    assert meta.path == shards[0]
    assert (meta.split_count, meta.shards_present) == (3, 3)
    expert_weights = 2 * 4 * 16 * 32
    assert meta.params_total == 100 * 32 + 2 * 64 * 32 + expert_weights
    assert meta.params_active == meta.params_total - expert_weights // 2
    arch = meta.to_architecture()
    assert (arch.experts, arch.experts_active) == (4, 2)
    assert arch.params_active_b < arch.params_total_b
    assert shard_paths(shards[2]) == shards


def test_missing_shard_is_reported(tmp_path: Path) -> None:
    shards = write_moe_gguf(tmp_path / "moe.gguf", split_max_tensors=2)
    shards[2].unlink()
    meta = read_gguf_metadata(shards[0])
    assert (meta.split_count, meta.shards_present) == (3, 2)


def test_not_a_gguf_and_truncated_files_raise_format_errors(tmp_path: Path, tiny_gguf: Path) -> None:
    text = tmp_path / "notes.gguf"
    text.write_text("hello, I am not a model")
    with pytest.raises(ModelFormatError, match="not a GGUF"):
        read_gguf_metadata(text)
    truncated = tmp_path / "cut.gguf"
    truncated.write_bytes(tiny_gguf.read_bytes()[:200])
    with pytest.raises(ModelFormatError, match="truncated"):
        read_gguf_metadata(truncated)
    empty = tmp_path / "empty.gguf"
    empty.write_bytes(b"")
    with pytest.raises(ModelFormatError):
        read_gguf_metadata(empty)


@pytest.mark.slow
def test_starter_model_header(starter_gguf: Path) -> None:
    meta = read_gguf_metadata(starter_gguf)
    assert meta.architecture == "gemma3"
    assert (meta.layers, meta.attention_heads, meta.kv_heads, meta.head_dim) == (18, 4, 1, 256)
    assert meta.sliding_window == 512
    assert meta.full_attention_layers == 3  # gemma3: one global layer in six
    assert meta.quant == "Q4_K_M"
    assert meta.params_total == pytest.approx(268e6, rel=0.01)
    assert meta.vocab_size == 262144
    arch = meta.to_architecture()
    assert arch.full_attention_layers == 3 and arch.sliding_window == 512


def test_identity_reads_only_what_a_loader_checks(tmp_path: Path, tiny_gguf: Path) -> None:
    identity = read_identity(tiny_gguf)
    assert (identity.architecture, identity.file_type) == ("llama", gguf.LlamaFileType.ALL_F32)
    assert not identity.maybe_quantized
    # The vocabulary is never read: a file cut where it starts still names its architecture.
    whole = write_moe_gguf(tmp_path / "moe.gguf")[0].read_bytes()
    cut = tmp_path / "cut.gguf"
    cut.write_bytes(whole[: whole.index(b"tokenizer.ggml.tokens") + 30])
    assert read_identity(cut) == GgufIdentity("qwen3moe", gguf.LlamaFileType.ALL_F32)


def test_identity_without_a_file_type_may_be_quantized(tmp_path: Path) -> None:
    path = write_header_only_gguf(tmp_path / "untyped.gguf", "llama")
    identity = read_identity(path)
    assert identity.architecture == "llama" and identity.file_type is None
    assert identity.maybe_quantized


def test_identity_of_a_file_that_is_not_a_model_gguf(tmp_path: Path) -> None:
    html = tmp_path / "model.gguf"
    html.write_text("<html>404 Not Found</html>")
    with pytest.raises(ModelFormatError, match="not a GGUF"):
        read_identity(html)
    keys_only = tmp_path / "keys.gguf"
    writer = gguf.GGUFWriter(str(keys_only), "llama")
    writer.add_file_type(gguf.LlamaFileType.MOSTLY_Q8_0)
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.close()
    keys_only.write_bytes(keys_only.read_bytes().replace(b"general.architecture", b"general.architectura"))
    with pytest.raises(ModelFormatError, match=r"no general\.architecture"):
        read_identity(keys_only)
