"""Recognise a model's format and architecture from the files on disk.

GGUF files carry their own header (see gguf_meta). MLX and ExLlama repos are directories
of safetensors with a config.json that says how they were quantized:
- MLX (mlx-community): a top-level `"quantization": {"group_size": 64, "bits": 4}`.
- EXL3: `"quantization_config": {"quant_method": "exl3", "bits": 4.0}`.
- EXL2: `"quantization_config": {"quant_method": "exl2", "bits": ...}` or a `measurement.json`.
Anything else with safetensors is plain (unquantized or other-engine) safetensors.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from pydantic import ValidationError

from launcher.catalog.gguf_meta import SPLIT_SHARD
from launcher.core.model_types import Architecture, ModelFormat

# Quant names inside GGUF file names: "Qwen3-4B-Q4_K_M.gguf", "model.UD-Q4_K_XL.gguf", "f16".
_GGUF_QUANT_IN_NAME = re.compile(
    r"(?:^|[-_.])(?P<quant>(?:UD-)?(?:I?Q\d(?:_[0-9A-Z]+)*|BF16|F16|F32|TQ\d_\d|MXFP4(?:_MOE)?))(?=[-_.]|$)",
    re.IGNORECASE,
)


@dataclass(frozen=True)
class DirectoryModel:
    """A safetensors model directory: its format, quant label and architecture numbers (if readable)."""

    format: ModelFormat
    quant: str | None
    architecture: Architecture | None
    bits_per_weight: float | None


def is_vision_projector(file_name: str) -> bool:
    """mmproj files are the vision encoder of a multimodal GGUF, not a model on their own."""
    return "mmproj" in file_name.lower()


def gguf_quant_from_name(file_name: str) -> str | None:
    """The quant named in a GGUF file name ('Q4_K_M'), or None."""
    stem = file_name.rsplit("/", 1)[-1]
    match = SPLIT_SHARD.match(stem)
    stem = match["stem"] if match else stem.removesuffix(".gguf")
    found = list(_GGUF_QUANT_IN_NAME.finditer(stem))
    return found[-1]["quant"].upper() if found else None


def group_gguf_files(names: Iterable[str]) -> dict[str, list[str]]:
    """GGUF file names grouped into loadable models: split shards together, shard 1 first.

    Keys are the first file of each group; vision projectors are left out.
    """
    groups: dict[str, list[str]] = {}
    for name in sorted(names):
        if not name.endswith(".gguf") or is_vision_projector(name):
            continue
        match = SPLIT_SHARD.match(name.rsplit("/", 1)[-1])
        key = name if not match else name.replace(f"-{match['index']}-of-", "-00001-of-")
        groups.setdefault(key, []).append(name)
    return groups


def read_config(directory: Path) -> dict[str, Any] | None:
    """config.json as a dict, or None when absent or unreadable."""
    try:
        data = json.loads((directory / "config.json").read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    return data if isinstance(data, dict) else None


def detect_directory(directory: Path, weights_bytes: int) -> DirectoryModel | None:
    """Format, quant and architecture of a safetensors model directory; None if it is not one."""
    if not any(directory.glob("*.safetensors")):
        return None
    config = read_config(directory) or {}
    quant_config = config.get("quantization_config")
    quant_config = quant_config if isinstance(quant_config, dict) else {}
    method = str(quant_config.get("quant_method", "")).lower()
    mlx_quant = config.get("quantization")
    fmt: ModelFormat
    bits: float | None
    if method in ("exl3", "exl2") or (directory / "measurement.json").exists():
        fmt = "exl3" if method == "exl3" else "exl2"
        bits = _float(quant_config.get("bits"))
        quant = f"{bits:.1f}bpw" if bits else None
    elif isinstance(mlx_quant, dict) and "bits" in mlx_quant:
        fmt = "mlx"
        bits = _float(mlx_quant.get("bits"))
        quant = f"{int(bits)}bit" if bits else None
    else:
        fmt, bits, quant = "safetensors", 16.0, None
    return DirectoryModel(
        format=fmt,
        quant=quant,
        architecture=architecture_from_config(config, weights_bytes, bits),
        bits_per_weight=bits,
    )


def architecture_from_config(
    config: dict[str, Any], weights_bytes: int, bits_per_weight: float | None
) -> Architecture | None:
    """Architecture numbers from a transformers config.json; params estimated from the weight size."""
    text = config.get("text_config")
    if isinstance(text, dict):  # multimodal configs nest the language model's numbers
        config = {**config, **text}
    layers = _int(config.get("num_hidden_layers"))
    heads = _int(config.get("num_attention_heads"))
    hidden = _int(config.get("hidden_size"))
    if not layers or not heads or not hidden or not weights_bytes:
        return None
    kv_heads = _int(config.get("num_key_value_heads")) or heads
    head_dim = _int(config.get("head_dim")) or hidden // heads
    experts = _int(config.get("num_local_experts") or config.get("num_experts"))
    experts_active = _int(config.get("num_experts_per_tok"))
    params_b = weights_bytes * 8 / (bits_per_weight or 16.0) / 1e9
    sliding = _int(config.get("sliding_window")) if config.get("use_sliding_window", True) else None
    layer_types = config.get("layer_types")
    full_layers = sum(1 for kind in layer_types if kind == "full_attention") if isinstance(layer_types, list) else None
    try:
        return Architecture(
            params_total_b=params_b,
            params_active_b=params_b * experts_active / experts if experts and experts_active else params_b,
            layers=layers,
            attention_heads=heads,
            kv_heads=kv_heads if heads % kv_heads == 0 else heads,
            head_dim=head_dim,
            hidden_size=hidden,
            max_context=_int(config.get("max_position_embeddings")) or 4096,
            sliding_window=sliding or None,
            full_attention_layers=full_layers if sliding else None,
            experts=experts if experts and experts_active else None,
            experts_active=experts_active if experts and experts_active else None,
        )
    except ValidationError:
        return None


def _int(value: Any) -> int | None:
    return int(value) if isinstance(value, int | float) and not isinstance(value, bool) and value > 0 else None


def _float(value: Any) -> float | None:
    return float(value) if isinstance(value, int | float) and not isinstance(value, bool) and value > 0 else None
