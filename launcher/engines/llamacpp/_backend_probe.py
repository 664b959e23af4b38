"""Does a GPU pack's backend library load, and does it find a device? Asked in a child process.

A CUDA library built for another driver, or a damaged file, can abort the process that loads it,
so the engine never loads a pack before a child has: `probe_in_child` runs
`launcher _probe-gpu-pack LIBRARY`, which calls `probe_here` and exits 0 only when the backend
registered at least one device.
"""

from __future__ import annotations

import ctypes
import os
import subprocess
import sys
from collections.abc import Sequence
from pathlib import Path

PROBE_TIMEOUT_S = 120  # CUDA's first initialization can take a while on a cold driver


def probe_here(library: Path) -> tuple[str, int]:
    """Load `library` as a ggml backend in this process: (the backend's name, its device count).
    Raises OSError when it does not load or is not a ggml backend."""
    from launcher.engines.llamacpp import _native

    # The libggml libllama uses: another copy of the file would be a second, separate registry.
    libggml = _native.ggml_registry()
    if libggml is None:
        raise OSError("this llama.cpp build cannot load backends at run time")
    libggml.ggml_backend_load.argtypes = [ctypes.c_char_p]
    libggml.ggml_backend_load.restype = ctypes.c_void_p
    libggml.ggml_backend_reg_dev_count.argtypes = [ctypes.c_void_p]
    libggml.ggml_backend_reg_dev_count.restype = ctypes.c_size_t
    libggml.ggml_backend_reg_name.argtypes = [ctypes.c_void_p]
    libggml.ggml_backend_reg_name.restype = ctypes.c_char_p
    if sys.platform == "win32":
        # ggml opens a backend with a plain LoadLibraryW, which finds the libraries it needs (the
        # pack's CUDA runtime, next to it) only on PATH, as the engine's own loader arranges too.
        os.environ["PATH"] = f"{library.parent}{os.pathsep}{os.environ.get('PATH', '')}"
    _native.clear_log_tail()
    registered = libggml.ggml_backend_load(str(library).encode())
    if not registered:
        said = " | ".join(_native.log_tail()[-1:]) or "no details from llama.cpp"
        raise OSError(f"{library.name} is not a loadable ggml backend ({said})")
    name = (libggml.ggml_backend_reg_name(registered) or b"?").decode()
    return name, int(libggml.ggml_backend_reg_dev_count(registered))


def probe_in_child(library: Path, launcher_argv: Sequence[str]) -> str | None:
    """None when `library` loads in a child and finds a device, else why not (never raises).
    `launcher_argv` runs the `launcher` command (the app itself when frozen)."""
    try:
        done = subprocess.run(
            [*launcher_argv, "_probe-gpu-pack", str(library)],
            capture_output=True,
            encoding="utf-8",  # what the child writes (PYTHONIOENCODING), whatever the locale
            errors="replace",
            timeout=PROBE_TIMEOUT_S,
        )
    except subprocess.TimeoutExpired:
        return f"loading it took over {PROBE_TIMEOUT_S} s"
    except OSError as err:
        return f"the check could not start ({err})"
    if done.returncode == 0:
        return None
    lines = [line for line in (done.stderr or done.stdout).splitlines() if line.strip()]
    if done.returncode < 0:
        return f"it crashed the process that loaded it (signal {-done.returncode})"
    return lines[-1].removeprefix("error: ") if lines else f"the check failed (exit code {done.returncode})"


def run_probe(arguments: list[str]) -> int:
    """`launcher _probe-gpu-pack LIBRARY`: exit 0 when the backend loads and finds a device."""
    if len(arguments) != 1:
        print("error: usage: launcher _probe-gpu-pack LIBRARY", file=sys.stderr)
        return 2
    try:
        name, devices = probe_here(Path(arguments[0]))
    except OSError as err:
        print(f"error: {err}", file=sys.stderr)
        return 1
    if devices == 0:
        print(f"error: the {name} backend loaded but found no device (is the driver installed?)", file=sys.stderr)
        return 1
    print(f"{name}: {devices} device(s)")
    return 0
