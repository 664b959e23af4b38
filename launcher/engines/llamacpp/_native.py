"""Access to llama-cpp-python's low-level bindings: lazy import, one-time backend init, log capture.

llama.cpp reports why a load failed only through its log callback (the C API returns NULL),
so we route its log into Python logging and keep the last lines to quote in error messages.

A portable build (scripts/build-engine: GGML_BACKEND_DL) has no backend built in: the CPU backend
comes as one library per instruction-set level (libggml-cpu-haswell.so, -skylakex, ...), GPU
backends as libraries too, and nothing runs until they are loaded. `llama()` loads the best ones
from llama_cpp/lib before first use; `load_backends` adds more (GPU packs) from other folders.
"""

from __future__ import annotations

import collections
import ctypes
import importlib
import importlib.metadata
import importlib.util
import logging
import os
import re
import sys
import threading
import types
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
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


@dataclass(frozen=True)
class BackendLibrary:
    """A backend library ggml loaded at run time: its registry name ("CPU", "CUDA") and file."""

    name: str
    path: Path

    @property
    def variant(self) -> str | None:
        """The build variant its file name carries: "haswell" for libggml-cpu-haswell.so, else None."""
        pattern = rf"(?:lib)?ggml-{re.escape(self.name.lower())}-(.+?)\.(?:so|dll|dylib)(?:\.[0-9]+)*"
        match = re.fullmatch(pattern, self.path.name)
        return match.group(1) if match else None


# ggml logs each backend library it loads ("load_backend: loaded CPU backend from
# /x/libggml-cpu-haswell.so") at any verbosity: the one place that names the file, on every OS.
_LOADED_BACKEND = re.compile(r"loaded (\S+) backend from (.+)$")
_backend_libraries: list[BackendLibrary] = []
_backend_dirs: set[Path] = set()  # folders already handed to ggml's loader


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
            _load_backends(llama_cpp, ())  # before the backend init, as llama.cpp's own tools do
            llama_cpp.llama_backend_init()
            _initialised = True
    return llama_cpp


def load_backends(extra_dirs: Sequence[Path] = ()) -> list[BackendLibrary]:
    """Load ggml backend libraries from `extra_dirs` too (a GPU pack's folder); all loaded so far.

    `llama()` has loaded llama_cpp/lib's by then. Each folder is handed to ggml once, and should
    hold no CPU backend: it would register a second CPU device next to llama_cpp/lib's.
    """
    llama_cpp = llama()
    with _lock:
        _load_backends(llama_cpp, extra_dirs)
        return list(_backend_libraries)


def loaded_backends() -> list[BackendLibrary]:
    """The backend libraries ggml loaded at run time, in load order (none where they are built in)."""
    with _lock:
        return list(_backend_libraries)


def cpu_variant() -> str | None:
    """Which CPU backend build runs here ("haswell", "skylakex", ...); None when it is built in."""
    for library in loaded_backends():
        if library.name.upper() == "CPU":
            return library.variant or "generic"
    return None


def _load_backends(llama_cpp: ModuleType, extra_dirs: Sequence[Path]) -> None:
    """Hand llama_cpp/lib (only while no backend is registered) and each new folder of `extra_dirs` to ggml."""
    ggml = _ggml_library(llama_cpp)
    if ggml is None:
        return
    lib_dir = _lib_dir(llama_cpp)
    folders: list[Path] = []
    # Where backends are built in (a plain pip build) the CPU backend is registered already, and
    # loading llama_cpp/lib's libraries again must not happen. None registered means a
    # GGML_BACKEND_DL build, where nothing runs until they are loaded, and ggml's default places
    # (the python executable's folder, the working directory) are not where the wheel puts them.
    if lib_dir not in _backend_dirs and ggml.ggml_backend_reg_count() == 0:
        folders.append(lib_dir)
    for folder in extra_dirs:
        resolved = Path(folder).resolve()
        if resolved not in _backend_dirs and resolved not in folders and resolved.is_dir():
            folders.append(resolved)
    for folder in folders:
        _backend_dirs.add(folder)
        if sys.platform == "win32" and folder != lib_dir:
            # ggml opens a backend with a plain LoadLibraryW, which finds the DLLs it needs (a GPU
            # pack's CUDA runtime, next to it) only on PATH; llama-cpp-python does the same for lib.
            os.environ["PATH"] = f"{folder}{os.pathsep}{os.environ.get('PATH', '')}"
        before = len(_backend_libraries)
        ggml.ggml_backend_load_all_from_path(str(folder).encode())
        if len(_backend_libraries) == before:
            _backend_libraries.extend(_mapped_backends(folder))
        loaded = ", ".join(f"{b.name} ({b.path.name})" for b in _backend_libraries[before:])
        log.info("ggml backends loaded from %s: %s", folder, loaded or "none")


def ggml_registry() -> Any:
    """The libggml llama.cpp itself uses (its backend registry), or None in a ggml without
    run-time backends: for code that loads or inspects one backend library (the GPU pack probe)."""
    return _ggml_library(llama())


def _lib_dir(llama_cpp: ModuleType) -> Path:
    """The folder the bindings loaded libllama from: llama_cpp/lib, or $LLAMA_CPP_LIB_PATH."""
    base = getattr(llama_cpp, "_base_path", None) or Path(str(llama_cpp.__file__)).parent / "lib"
    return Path(base).resolve()


def _ggml_library(llama_cpp: ModuleType) -> Any:
    """The libggml llama.cpp itself uses, with its registry functions typed; None without one.

    A wheel holds copies where a system would have symlinks (libggml.so, .so.0, .so.0.25.3), and
    opening another copy than the one libllama linked would load a second libggml with a second,
    empty backend registry. On Linux and macOS the symbols come through libllama's handle, which
    searches the libraries libllama links; Windows has one ggml.dll, next to llama.dll.
    """
    ggml = getattr(llama_cpp, "_lib", None) if sys.platform != "win32" else None
    if ggml is None:
        names = {"win32": ("ggml.dll", "libggml.dll"), "darwin": ("libggml.dylib", "libggml.so")}
        lib_dir = _lib_dir(llama_cpp)
        path = next((lib_dir / n for n in names.get(sys.platform, ("libggml.so",)) if (lib_dir / n).is_file()), None)
        if path is None:
            return None
        try:
            ggml = ctypes.CDLL(str(path))
        except OSError as err:
            log.warning("could not open %s to load ggml's backends: %s", path, err)
            return None
    if not hasattr(ggml, "ggml_backend_load_all_from_path"):  # a ggml from before run-time backends
        return None
    ggml.ggml_backend_reg_count.argtypes = []
    ggml.ggml_backend_reg_count.restype = ctypes.c_size_t
    ggml.ggml_backend_load_all_from_path.argtypes = [ctypes.c_char_p]
    ggml.ggml_backend_load_all_from_path.restype = None
    return ggml


def _mapped_backends(folder: Path) -> list[BackendLibrary]:
    """The backend libraries of `folder` mapped into this process (Linux): for when the log did not
    name them (another log callback was set, or a later ggml words the line differently)."""
    try:
        return backends_in_maps(Path("/proc/self/maps").read_text(), folder)
    except OSError:
        return []


def backends_in_maps(maps: str, folder: Path) -> list[BackendLibrary]:
    """The ggml backend libraries of `folder` that a /proc/PID/maps text shows mapped."""
    found: dict[Path, BackendLibrary] = {}
    for line in maps.splitlines():
        fields = line.split(maxsplit=5)
        if len(fields) < 6 or not fields[5].startswith("/"):
            continue
        path = Path(fields[5])
        match = re.fullmatch(r"libggml-([a-z0-9]+)(?:-[A-Za-z0-9_.]+)?\.so", path.name)
        if path.parent == folder and match and match.group(1) != "base":
            found.setdefault(path, BackendLibrary(match.group(1).upper(), path))
    return list(found.values())


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
            elif " backend from " in line and (loaded := _LOADED_BACKEND.search(line)):
                _backend_libraries.append(BackendLibrary(loaded.group(1), Path(loaded.group(2).strip())))
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
