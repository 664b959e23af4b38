"""Read a GGUF header: the architecture numbers the advisor needs, or just what a loader checks.

`gguf.GGUFReader` parses every key into numpy objects, including the 262k-entry tokenizer
arrays, which takes tens of seconds on a small machine; listing a library must not. So this
module walks the header itself with `struct` over an mmap, skipping large arrays, and uses the
`gguf` package for the format's constants (value types, file types, tensor types).
Only the header is read: the tensor data is never touched. It is the one GGUF header reader:
`read_gguf_metadata` reads all of it, `read_identity` stops as soon as it knows the
architecture and file type (what the llama.cpp engine checks before a load).
"""

from __future__ import annotations

import mmap
import re
import struct
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

from gguf import GGML_QUANT_SIZES, GGUF_MAGIC, GGMLQuantizationType, GGUFValueType, LlamaFileType

from launcher.core.errors import ModelFormatError
from launcher.core.model_types import Architecture

# "-00001-of-00003.gguf": llama.cpp's gguf-split naming.
SPLIT_SHARD = re.compile(r"^(?P<stem>.+)-(?P<index>\d{5})-of-(?P<count>\d{5})\.gguf$")

# llama.cpp hard-codes the sliding-window layer pattern of these architectures instead of storing
# it in the file: one layer in N keeps the full context (gemma3: 5 local + 1 global).
_FULL_ATTENTION_EVERY: dict[str, int] = {"gemma2": 2, "gemma3": 6, "cohere2": 4, "gpt-oss": 2}

_SCALAR_FORMATS: dict[int, str] = {
    GGUFValueType.UINT8: "<B",
    GGUFValueType.INT8: "<b",
    GGUFValueType.UINT16: "<H",
    GGUFValueType.INT16: "<h",
    GGUFValueType.UINT32: "<I",
    GGUFValueType.INT32: "<i",
    GGUFValueType.FLOAT32: "<f",
    GGUFValueType.BOOL: "<?",
    GGUFValueType.UINT64: "<Q",
    GGUFValueType.INT64: "<q",
    GGUFValueType.FLOAT64: "<d",
}
_Parsed = TypeVar("_Parsed")
_MAX_KEPT_ARRAY = 4096  # per-layer arrays are kept; tokenizer vocabularies are only counted
# Files whose weights are stored unquantized: AMX and repacked CPU buffers hold only quantized ones.
_UNQUANTIZED_FILE_TYPES = (LlamaFileType.ALL_F32, LlamaFileType.MOSTLY_F16, LlamaFileType.MOSTLY_BF16)


@dataclass(frozen=True)
class TensorInfo:
    """One tensor's header entry."""

    name: str
    shape: tuple[int, ...]
    type_id: int

    @property
    def n_elements(self) -> int:
        """Number of weights in the tensor."""
        count = 1
        for dim in self.shape:
            count *= dim
        return count

    @property
    def n_bytes(self) -> int:
        """Bytes the tensor occupies in the file (0 for a type this gguf version does not know)."""
        try:
            block, size = GGML_QUANT_SIZES[GGMLQuantizationType(self.type_id)]
        except ValueError:
            return 0
        return self.n_elements // block * size


@dataclass(frozen=True)
class RawHeader:
    """Keys (large arrays reduced to their length) and tensor infos of one GGUF file."""

    version: int
    fields: dict[str, Any]
    array_lengths: dict[str, int]
    tensors: tuple[TensorInfo, ...]


@dataclass(frozen=True)
class GgufIdentity:
    """The two header facts a loader needs before it hands the file to its runtime."""

    architecture: str  # general.architecture: "llama", "qwen3", ...
    file_type: int | None  # general.file_type (a LlamaFileType), None when the file does not say

    @property
    def maybe_quantized(self) -> bool:
        """False only when the file says its weights are all F32, F16 or BF16."""
        return self.file_type not in _UNQUANTIZED_FILE_TYPES


@dataclass(frozen=True)
class GgufMetadata:
    """What a GGUF header says about the model, in the units the advisor uses."""

    path: Path
    architecture: str  # llama.cpp architecture name: "llama", "qwen3", "gemma3", ...
    name: str | None
    layers: int
    attention_heads: int
    kv_heads: int
    head_dim: int
    hidden_size: int
    context_length: int
    sliding_window: int | None
    full_attention_layers: int | None
    experts: int | None
    experts_active: int | None
    chat_template: str | None
    quant: str | None  # "Q4_K_M", "Q8_0", "F16"
    params_total: int  # weights in the shards that were read
    params_active: int  # weights read per token (MoE: only the active experts)
    tensor_bytes: int
    file_bytes: int  # size on disk of all shards present
    split_count: int
    shards_present: int
    vocab_size: int | None

    @property
    def has_chat_template(self) -> bool:
        """True when the file carries its own Jinja chat template."""
        return bool(self.chat_template)

    @property
    def bits_per_weight(self) -> float | None:
        """Average stored bits per weight, from the tensor sizes."""
        if not self.params_total or not self.tensor_bytes:
            return None
        return self.tensor_bytes * 8 / self.params_total

    def to_architecture(self) -> Architecture:
        """The catalog's Architecture value, so the advisor handles any GGUF like a catalog entry."""
        total_b = max(self.params_total, 1) / 1e9
        active_b = min(max(self.params_active, 1) / 1e9, total_b)
        return Architecture(
            params_total_b=total_b,
            params_active_b=active_b,
            layers=self.layers,
            attention_heads=self.attention_heads,
            kv_heads=self.kv_heads,
            head_dim=self.head_dim,
            hidden_size=self.hidden_size,
            max_context=self.context_length,
            sliding_window=self.sliding_window,
            full_attention_layers=self.full_attention_layers if self.sliding_window else None,
            vocab_size=self.vocab_size or None,
            experts=self.experts if self.experts_active else None,
            experts_active=self.experts_active if self.experts else None,
        )


class _Cursor:
    """Little-endian reads over a buffer, raising ModelFormatError when the header is cut short."""

    def __init__(self, buffer: mmap.mmap, path: Path) -> None:
        self.buffer = buffer
        self.offset = 0
        self.path = path

    def unpack(self, fmt: str) -> Any:
        try:
            value = struct.unpack_from(fmt, self.buffer, self.offset)[0]
        except struct.error as err:
            raise ModelFormatError(f"{self.path} is truncated: the GGUF header ends early.") from err
        self.offset += struct.calcsize(fmt)
        return value

    def string(self) -> str:
        length = self.unpack("<Q")
        if self.offset + length > len(self.buffer):
            raise ModelFormatError(f"{self.path} is truncated: the GGUF header ends early.")
        raw = self.buffer[self.offset : self.offset + length]
        self.offset += length
        return raw.decode("utf-8", errors="replace")

    def skip_string(self) -> None:
        length = self.unpack("<Q")
        self.offset += length

    def value(self, type_id: int, key: str, lengths: dict[str, int]) -> Any:
        if type_id == GGUFValueType.STRING:
            return self.string()
        if type_id == GGUFValueType.ARRAY:
            item_type = self.unpack("<I")
            count = self.unpack("<Q")
            lengths[key] = count
            if count > _MAX_KEPT_ARRAY:
                self._skip_array(item_type, count)
                return None
            return [self.value(item_type, key, {}) for _ in range(count)]
        fmt = _SCALAR_FORMATS.get(type_id)
        if fmt is None:
            raise ModelFormatError(f"{self.path}: unknown GGUF value type {type_id} for key {key!r}.")
        return self.unpack(fmt)

    def _skip_array(self, item_type: int, count: int) -> None:
        if item_type == GGUFValueType.STRING:
            for _ in range(count):
                self.skip_string()
            return
        fmt = _SCALAR_FORMATS.get(item_type)
        if fmt is None:
            raise ModelFormatError(f"{self.path}: unsupported GGUF array item type {item_type}.")
        self.offset += struct.calcsize(fmt) * count


def read_header(path: Path) -> RawHeader:
    """Parse one GGUF file's key/value section and tensor infos (not the tensor data)."""
    return _with_cursor(path, _parse)


def read_identity(path: Path) -> GgufIdentity:
    """The architecture and file type a GGUF declares, reading its keys only until both are known
    (they come first in the files llama.cpp writes), so it costs next to nothing for any size."""
    return _with_cursor(path, _parse_identity)


def _with_cursor(path: Path, parse: Callable[[_Cursor], _Parsed]) -> _Parsed:
    try:
        with path.open("rb") as handle, mmap.mmap(handle.fileno(), 0, access=mmap.ACCESS_READ) as buffer:
            return parse(_Cursor(buffer, path))
    except ValueError as err:  # mmap of an empty file
        raise ModelFormatError(f"{path} is empty, not a GGUF file.") from err
    except OSError as err:
        raise ModelFormatError(f"Cannot read {path}: {err.strerror or err}") from err


def _preamble(cursor: _Cursor) -> tuple[int, int, int]:
    """Version, tensor count and key count, after checking the magic and the version."""
    if len(cursor.buffer) < 24 or cursor.unpack("<I") != GGUF_MAGIC:
        start = bytes(cursor.buffer[:4])  # b"<htm": an error page saved as the model, b"PK": a zip, ...
        raise ModelFormatError(
            f"{cursor.path} is not a GGUF file (it starts with {start!r}, not b'GGUF'); "
            "llama.cpp loads only .gguf files."
        )
    version = cursor.unpack("<I")
    if version not in (2, 3):
        raise ModelFormatError(f"{cursor.path} is GGUF version {version}; versions 2 and 3 are supported.")
    return version, cursor.unpack("<Q"), cursor.unpack("<Q")


def _parse_identity(cursor: _Cursor) -> GgufIdentity:
    _version, _tensor_count, kv_count = _preamble(cursor)
    architecture: str | None = None
    file_type: int | None = None
    for _ in range(kv_count):
        key = cursor.string()
        type_id = cursor.unpack("<I")
        if key.startswith("tokenizer.") and architecture is not None:
            break  # the vocabulary comes after the general keys, and general.file_type is optional
        value = cursor.value(type_id, key, {})
        if key == "general.architecture" and isinstance(value, str):
            architecture = value
        elif key == "general.file_type" and isinstance(value, int):
            file_type = value
        if architecture is not None and file_type is not None:
            break
    if architecture is None:
        raise ModelFormatError(f"{cursor.path} has no general.architecture key; it is not a model GGUF.")
    return GgufIdentity(architecture=architecture, file_type=file_type)


def _parse(cursor: _Cursor) -> RawHeader:
    version, tensor_count, kv_count = _preamble(cursor)
    fields: dict[str, Any] = {}
    lengths: dict[str, int] = {}
    for _ in range(kv_count):
        key = cursor.string()
        type_id = cursor.unpack("<I")
        fields[key] = cursor.value(type_id, key, lengths)
    tensors = []
    for _ in range(tensor_count):
        name = cursor.string()
        n_dims = cursor.unpack("<I")
        shape = tuple(cursor.unpack("<Q") for _ in range(n_dims))
        type_id = cursor.unpack("<I")
        cursor.unpack("<Q")  # data offset
        tensors.append(TensorInfo(name=name, shape=shape, type_id=type_id))
    return RawHeader(version=version, fields=fields, array_lengths=lengths, tensors=tuple(tensors))


def shard_paths(path: Path) -> list[Path]:
    """All shard paths of a split GGUF given any shard (just `[path]` for a single file)."""
    match = SPLIT_SHARD.match(path.name)
    if not match:
        return [path]
    count = int(match["count"])
    return [path.with_name(f"{match['stem']}-{index:05d}-of-{count:05d}.gguf") for index in range(1, count + 1)]


def read_gguf_metadata(path: str | Path) -> GgufMetadata:
    """Architecture numbers, chat template and quant type of a GGUF (any shard of a split one)."""
    path = Path(path).expanduser()
    shards = shard_paths(path)
    first = read_header(shards[0] if shards[0].exists() else path)
    tensors = list(first.tensors)
    present = [p for p in shards if p.exists()]
    for shard in present[1:]:
        tensors.extend(read_header(shard).tensors)
    return _metadata(shards[0] if shards[0].exists() else path, first, tensors, present, len(shards))


def _metadata(
    path: Path, header: RawHeader, tensors: list[TensorInfo], present: list[Path], split_count: int
) -> GgufMetadata:
    fields = header.fields
    arch = fields.get("general.architecture")
    if not isinstance(arch, str):
        raise ModelFormatError(f"{path} has no general.architecture key; it is not a model GGUF.")

    def number(key: str) -> int | None:
        value = fields.get(f"{arch}.{key}")
        if isinstance(value, list):  # per-layer values (e.g. head_count_kv): the largest one sizes the cache
            value = max((v for v in value if isinstance(v, int | float)), default=None)
        return int(value) if isinstance(value, int | float) else None

    layers = number("block_count")
    heads = number("attention.head_count")
    hidden = number("embedding_length")
    if not layers or not heads or not hidden:
        raise ModelFormatError(f"{path}: architecture {arch!r} has no layer/head/embedding counts.")
    kv_heads = number("attention.head_count_kv") or heads
    head_dim = number("attention.key_length") or hidden // heads
    sliding_window = number("attention.sliding_window") or None
    experts = number("expert_count") or None
    experts_active = number("expert_used_count") or None
    params_total = sum(t.n_elements for t in tensors)
    params_active = _active_params(tensors, experts, experts_active)
    template = fields.get("tokenizer.chat_template")
    name = fields.get("general.name")
    return GgufMetadata(
        path=path,
        architecture=arch,
        name=name if isinstance(name, str) else None,
        layers=layers,
        attention_heads=heads,
        kv_heads=kv_heads if heads % kv_heads == 0 else heads,
        head_dim=head_dim,
        hidden_size=hidden,
        context_length=number("context_length") or 2048,
        sliding_window=sliding_window,
        full_attention_layers=_full_attention_layers(arch, fields, layers) if sliding_window else None,
        experts=experts if experts_active else None,
        experts_active=experts_active if experts else None,
        chat_template=template if isinstance(template, str) and template else None,
        quant=_quant_name(fields.get("general.file_type"), tensors),
        params_total=params_total,
        params_active=params_active,
        tensor_bytes=sum(t.n_bytes for t in tensors),
        file_bytes=sum(p.stat().st_size for p in present),
        split_count=split_count,
        shards_present=len(present),
        vocab_size=header.array_lengths.get("tokenizer.ggml.tokens"),
    )


def _active_params(tensors: list[TensorInfo], experts: int | None, experts_active: int | None) -> int:
    """Weights read per token: expert tensors (`*_exps`) count only for the experts a token uses."""
    total = sum(t.n_elements for t in tensors)
    if not experts or not experts_active:
        return total
    expert_weights = sum(t.n_elements for t in tensors if "_exps" in t.name)
    return total - expert_weights + expert_weights * experts_active // experts


def _full_attention_layers(arch: str, fields: dict[str, Any], layers: int) -> int | None:
    """Layers keeping the whole context when the others slide; None when unknown (treated as all)."""
    pattern = fields.get(f"{arch}.attention.sliding_window_pattern")
    if isinstance(pattern, list) and pattern:
        return sum(1 for is_sliding in pattern if not is_sliding)  # per-layer flags: True = sliding
    if isinstance(pattern, int) and pattern > 0:
        return layers // pattern
    every = _FULL_ATTENTION_EVERY.get(arch)
    return layers // every if every else None


def _quant_name(file_type: Any, tensors: list[TensorInfo]) -> str | None:
    """'Q4_K_M' from general.file_type; else the tensor type holding most weights."""
    if isinstance(file_type, int) and file_type != LlamaFileType.GUESSED:
        try:
            return LlamaFileType(file_type).name.removeprefix("MOSTLY_").removeprefix("ALL_")
        except ValueError:
            pass
    weights: dict[int, int] = {}
    for tensor in tensors:
        if len(tensor.shape) >= 2:
            weights[tensor.type_id] = weights.get(tensor.type_id, 0) + tensor.n_elements
    if not weights:
        return None
    dominant = max(weights, key=lambda type_id: weights[type_id])
    try:
        return GGMLQuantizationType(dominant).name
    except ValueError:
        return None
