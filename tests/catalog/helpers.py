"""Builders for catalog tests: small GGUF files written with the real `gguf` writer, and a
Hugging Face cache laid out exactly as huggingface_hub lays it out."""

from __future__ import annotations

import hashlib
import json
import os
import secrets
from pathlib import Path

import gguf
import numpy as np


def write_moe_gguf(path: Path, *, split_max_tensors: int = 0) -> list[Path]:
    """A tiny 'qwen3moe' GGUF with 4 experts (2 used per token), optionally split into shards."""
    writer = gguf.GGUFWriter(str(path), "qwen3moe", split_max_tensors=split_max_tensors)
    writer.add_name("tiny-moe")
    writer.add_block_count(2)
    writer.add_context_length(8192)
    writer.add_embedding_length(32)
    writer.add_head_count(4)
    writer.add_head_count_kv(2)
    writer.add_key_length(16)
    writer.add_expert_count(4)
    writer.add_expert_used_count(2)
    writer.add_file_type(gguf.LlamaFileType.ALL_F32)
    writer.add_token_list([f"t{i}" for i in range(100)])
    writer.add_tensor("token_embd.weight", np.zeros((100, 32), dtype=np.float32))
    for layer in range(2):
        writer.add_tensor(f"blk.{layer}.attn_q.weight", np.zeros((64, 32), dtype=np.float32))
        writer.add_tensor(f"blk.{layer}.ffn_up_exps.weight", np.zeros((4, 16, 32), dtype=np.float32))
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    return writer.format_shard_names(path)


def git_oid(data: bytes) -> str:
    """The git blob id the Hub reports for a non-LFS file."""
    return hashlib.sha1(b"blob %d\0" % len(data) + data).hexdigest()


def make_cached_repo(
    cache_dir: Path,
    repo_id: str,
    files: dict[str, bytes],
    *,
    ref: str = "main",
    commit: str | None = None,
) -> Path:
    """Lay out `files` in the HF cache (blobs + snapshot symlinks + refs); returns the snapshot dir."""
    commit = commit or secrets.token_hex(20)
    storage = cache_dir / f"models--{repo_id.replace('/', '--')}"
    snapshot = storage / "snapshots" / commit
    for name, data in files.items():
        is_lfs = name.endswith((".gguf", ".safetensors"))
        etag = hashlib.sha256(data).hexdigest() if is_lfs else git_oid(data)
        blob = storage / "blobs" / etag
        blob.parent.mkdir(parents=True, exist_ok=True)
        blob.write_bytes(data)
        pointer = snapshot / name
        pointer.parent.mkdir(parents=True, exist_ok=True)
        os.symlink(os.path.relpath(blob, pointer.parent), pointer)
    (storage / "refs").mkdir(parents=True, exist_ok=True)
    (storage / "refs" / ref).write_text(commit)
    return snapshot


def mlx_config(bits: int = 4) -> bytes:
    """config.json of an mlx-community quant."""
    return json.dumps(
        {
            "model_type": "qwen3",
            "num_hidden_layers": 28,
            "num_attention_heads": 16,
            "num_key_value_heads": 8,
            "head_dim": 128,
            "hidden_size": 1024,
            "max_position_embeddings": 40960,
            "quantization": {"group_size": 64, "bits": bits},
        }
    ).encode()


def exl3_config(bits: float = 4.0) -> bytes:
    """config.json of an EXL3 quant."""
    return json.dumps(
        {
            "model_type": "llama",
            "num_hidden_layers": 16,
            "num_attention_heads": 32,
            "num_key_value_heads": 8,
            "hidden_size": 2048,
            "max_position_embeddings": 131072,
            "quantization_config": {"quant_method": "exl3", "bits": bits},
        }
    ).encode()
