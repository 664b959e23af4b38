"""Checks a file before llama.cpp sees it: present, a GGUF, and which architecture it declares.

llama.cpp answers every bad file with the same NULL pointer; reading the header ourselves lets us
tell a user "this is not a GGUF file" or "architecture 'foo' is unknown" instead. Only the
key/value section is read, key by key, until `general.architecture` is found (it is normally the
first key), so this is cheap even for large models.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass
from pathlib import Path
from typing import BinaryIO

from launcher.core.errors import ModelFormatError, ModelNotFoundError

GGUF_MAGIC = b"GGUF"

# GGUF value types: sizes of the fixed-size ones; 8 = string, 9 = array.
_FIXED_SIZES = {0: 1, 1: 1, 2: 2, 3: 2, 4: 4, 5: 4, 6: 4, 7: 1, 10: 8, 11: 8, 12: 8}
_UINT32, _STRING, _ARRAY = 4, 8, 9
_MAX_KEYS_SCANNED = 64


@dataclass(frozen=True)
class GgufHeader:
    """The two header facts the engine needs before loading."""

    architecture: str
    file_type: int | None  # general.file_type (0 = all F32, 1 = mostly F16, others quantized)


def check_gguf_file(path: Path) -> GgufHeader:
    """Read the GGUF header at `path`; raise a clear error if the file is missing or unusable."""
    if not path.exists():
        raise ModelNotFoundError(f"Model file not found: {path}. Check the path or pull the model first.")
    if path.is_dir():
        raise ModelFormatError(f"{path} is a directory; the llama.cpp engine needs a .gguf file.")
    try:
        with path.open("rb") as file:
            return _read_architecture(file, path)
    except OSError as err:
        raise ModelNotFoundError(f"Cannot read model file {path}: {err.strerror or err}") from None
    except (struct.error, UnicodeDecodeError, ValueError):
        raise ModelFormatError(f"{path} looks like a GGUF file but its header is damaged.") from None


def _read_architecture(file: BinaryIO, path: Path) -> GgufHeader:
    magic = file.read(4)
    if magic != GGUF_MAGIC:
        raise ModelFormatError(
            f"{path.name} is not a GGUF model file (it starts with {magic!r}, not b'GGUF'). "
            "The llama.cpp engine only loads .gguf files."
        )
    (version,) = struct.unpack("<I", file.read(4))
    if version < 2:
        raise ModelFormatError(f"{path.name} uses GGUF version {version}, which llama.cpp no longer reads.")
    _n_tensors, n_kv = struct.unpack("<QQ", file.read(16))
    architecture: str | None = None
    file_type: int | None = None
    for _ in range(min(n_kv, _MAX_KEYS_SCANNED)):
        key = _read_string(file)
        (value_type,) = struct.unpack("<I", file.read(4))
        if key == "general.architecture" and value_type == _STRING:
            architecture = _read_string(file)
        elif key == "general.file_type" and value_type == _UINT32:
            (file_type,) = struct.unpack("<I", file.read(4))
        elif key.startswith("tokenizer.ggml.") and architecture is not None:
            break  # the vocabulary arrays are big and general.file_type is optional
        else:
            _skip_value(file, value_type)
        if architecture is not None and file_type is not None:
            break
    if architecture is None:
        raise ModelFormatError(f"{path.name} has no general.architecture key; it is not a model llama.cpp can load.")
    return GgufHeader(architecture=architecture, file_type=file_type)


def _read_string(file: BinaryIO) -> str:
    (length,) = struct.unpack("<Q", file.read(8))
    if length > 1 << 30:
        raise ValueError("string length out of range")
    return file.read(length).decode("utf-8")


def _skip_value(file: BinaryIO, value_type: int) -> None:
    if value_type in _FIXED_SIZES:
        file.seek(_FIXED_SIZES[value_type], 1)
    elif value_type == _STRING:
        (length,) = struct.unpack("<Q", file.read(8))
        file.seek(length, 1)
    elif value_type == _ARRAY:
        item_type, count = struct.unpack("<IQ", file.read(12))
        if item_type in _FIXED_SIZES:
            file.seek(_FIXED_SIZES[item_type] * count, 1)
        else:
            for _ in range(count):
                _skip_value(file, item_type)
    else:
        raise ValueError(f"unknown GGUF value type {value_type}")
