"""Access to llama-cpp-python's low-level bindings: lazy import, one-time backend init, log capture.

llama.cpp reports why a load failed only through its log callback (the C API returns NULL),
so we route its log into Python logging and keep the last lines to quote in error messages.
"""

from __future__ import annotations

import collections
import ctypes
import importlib
import importlib.metadata
import importlib.util
import logging
import sys
import threading
import types
from types import ModuleType
from typing import Any

from launcher.core.errors import EngineUnavailableError

log = logging.getLogger("launcher.engines.llamacpp")

# ggml_log_level in current ggml: 0 none, 1 debug, 2 info, 3 warn, 4 error, 5 continuation.
_GGML_TO_LOGGING = {
    0: logging.DEBUG,
    1: logging.DEBUG,
    2: logging.DEBUG,
    3: logging.WARNING,
    4: logging.ERROR,
}

_lock = threading.Lock()
_initialised = False
_log_tail: collections.deque[str] = collections.deque(maxlen=60)
# "CPU KV buffer size = 72.00 MiB": what a context allocated. Kept apart from the tail, which a
# context's graph reservation floods with hundreds of debug lines.
_buffer_lines: collections.deque[str] = collections.deque(maxlen=64)
_last_level = logging.DEBUG
_callback_ref: Any = None  # keeps the ctypes callback alive for as long as llama.cpp may call it


def llama() -> ModuleType:
    """Import llama_cpp's C bindings on first use and initialise its backend once per process."""
    global _initialised
    try:
        llama_cpp = _bindings()
    except ImportError as err:
        raise EngineUnavailableError(
            f"llama-cpp-python is not installed ({err}). Install it with: pip install 'launcher[llamacpp]'"
        ) from None
    with _lock:
        if not _initialised:
            _install_log_callback(llama_cpp)
            llama_cpp.llama_backend_init()
            _initialised = True
    return llama_cpp


def _bindings() -> ModuleType:
    """`llama_cpp.llama_cpp`, the ctypes bindings we use, without the package's `__init__`.

    `import llama_cpp` also imports its high-level `Llama` class and what that needs (a disk
    cache with SQLite and Django adapters, chat formats, ...): 5 MB of a server's memory for
    code it never runs. When nothing has imported the package yet, a package module with the
    same search path stands in for it, so its submodules import alone; asking it for anything
    else (`llama_cpp.Llama`) imports the rest then, as the real package would have.
    """
    if "llama_cpp" not in sys.modules:
        spec = importlib.util.find_spec("llama_cpp")
        if spec is None or not spec.submodule_search_locations:
            raise ImportError("No module named 'llama_cpp'")
        package = types.ModuleType("llama_cpp")
        package.__spec__, package.__file__ = spec, spec.origin
        package.__path__ = list(spec.submodule_search_locations)
        package.__version__ = importlib.metadata.version("llama_cpp_python")  # type: ignore[attr-defined]
        package.__getattr__ = _rest_of_the_package  # type: ignore[method-assign]
        sys.modules["llama_cpp"] = package
    return importlib.import_module("llama_cpp.llama_cpp")


def _rest_of_the_package(name: str) -> Any:
    """What `llama_cpp/__init__.py` exports (`from .llama_cpp import *; from .llama import *`),
    and its submodules (`from llama_cpp import llama_grammar` asks for the attribute first)."""
    if name.startswith("__"):
        raise AttributeError(f"module 'llama_cpp' has no attribute {name!r}")
    if importlib.util.find_spec(f"llama_cpp.{name}") is not None:
        return importlib.import_module(f"llama_cpp.{name}")
    for module in ("llama_cpp.llama_cpp", "llama_cpp.llama"):
        found = getattr(importlib.import_module(module), name, _MISSING)
        if found is not _MISSING:
            return found
    raise AttributeError(f"module 'llama_cpp' has no attribute {name!r}")


_MISSING = object()


def _install_log_callback(llama_cpp: ModuleType) -> None:
    global _callback_ref

    @llama_cpp.llama_log_callback  # type: ignore[untyped-decorator]
    def on_log(level: int, text: bytes, user_data: ctypes.c_void_p) -> None:
        global _last_level
        del user_data
        py_level = _GGML_TO_LOGGING.get(level, _last_level)
        _last_level = py_level
        line = text.decode("utf-8", errors="replace").rstrip("\n")
        if line:
            _log_tail.append(line)
            if "buffer size" in line:
                _buffer_lines.append(line)
            if log.isEnabledFor(py_level):
                log.log(py_level, "llama.cpp: %s", line)

    _callback_ref = on_log
    llama_cpp.llama_log_set(on_log, ctypes.c_void_p(0))


def clear_log_tail() -> None:
    """Forget captured llama.cpp log lines (call before an operation whose failure you will explain)."""
    _log_tail.clear()
    _buffer_lines.clear()


def buffer_lines() -> list[str]:
    """The "... buffer size = N MiB" lines llama.cpp logged since `clear_log_tail`."""
    return list(_buffer_lines)


def log_tail(max_lines: int = 8) -> list[str]:
    """The last llama.cpp log lines captured since `clear_log_tail`."""
    return list(_log_tail)[-max_lines:]


def meta_string(llama_cpp: ModuleType, model: Any, key: str) -> str | None:
    """A GGUF metadata value of a loaded model as text, or None when the key is absent."""
    size = 256
    while True:
        buffer = ctypes.create_string_buffer(size)
        length = llama_cpp.llama_model_meta_val_str(model, key.encode(), buffer, size)
        if length < 0:
            return None
        if length < size:
            return buffer.value.decode("utf-8", errors="replace")
        size = length + 1


def system_info(llama_cpp: ModuleType) -> str:
    """llama.cpp's build/CPU feature line, e.g. 'CPU : SSE3 = 1 | AVX2 = 1 | ...'."""
    raw = llama_cpp.llama_print_system_info()
    return raw.decode("utf-8", errors="replace") if isinstance(raw, bytes) else str(raw)


def cpu_features(info: str) -> list[str]:
    """The enabled features named in `system_info` (AVX2, AVX512, NEON, ...)."""
    features: list[str] = []
    for part in info.replace("\n", "|").split("|"):
        name, _, value = part.partition("=")
        if value.strip() == "1":
            features.append(name.strip())
    return features
