"""Can llama.cpp's AMX code really run here? (Some VMs and sandboxes advertise AMX and then trap it.)

llama.cpp's CPU backend repacks quantized weights into an AMX buffer whenever the CPU flags say
AMX is there; where the hypervisor does not really support the tile instructions, the first
matrix multiply kills the whole process with SIGILL (seen on this project's CI machines). When
the CPU advertises AMX we load the model once in a child process and decode a few tokens; if
the child dies, the engine loads without llama.cpp's extra CPU buffer types (AMX and repacked
weights). LAUNCHER_LLAMACPP_EXTRA_BUFFERS=0/1 skips the probe.

The child is the launcher itself running the hidden `launcher _llamacpp-cpu-probe MODEL` command
(`run_probe`), started like every launcher child (`core.child_process.launcher_command`), so it
works the same from source and in a frozen app, which has no Python to run a `-c` script with.
"""

from __future__ import annotations

import functools
import logging
import os
import subprocess
import sys
from collections.abc import Sequence
from pathlib import Path

from launcher.core.child_process import launcher_command

log = logging.getLogger("launcher.engines.llamacpp")

PROBE_COMMAND = "_llamacpp-cpu-probe"
"""The hidden subcommand (launcher/cli/__init__.py) that runs `run_probe` in a child process."""


def run_probe(arguments: Sequence[str]) -> int:
    """The child's side: load the model and decode a few tokens; prints "ok" when it got through.

    Where the AMX kernels trap, this process dies of SIGILL before printing, which is the answer.
    """
    if len(arguments) != 1:
        print(f"usage: launcher {PROBE_COMMAND} MODEL.gguf", file=sys.stderr)
        return 2
    from launcher.engines.llamacpp._native import llama

    lib = llama()  # llama.cpp's log goes to Python logging, which the CLI keeps at warnings
    model = lib.llama_model_load_from_file(arguments[0].encode(), lib.llama_model_default_params())
    if not model:
        print(f"cannot load {arguments[0]}", file=sys.stderr)
        return 1
    params = lib.llama_context_default_params()
    params.n_ctx, params.n_batch, params.n_ubatch, params.n_threads, params.n_threads_batch = 256, 64, 64, 2, 2
    context = lib.llama_init_from_model(model, params)
    if not context:
        print("cannot create a context", file=sys.stderr)
        return 1
    tokens = (lib.llama_token * 8)(*([1] * 8))
    if lib.llama_decode(context, lib.llama_batch_get_one(tokens, 8)) != 0:
        return 1
    if lib.llama_decode(context, lib.llama_batch_get_one(tokens, 1)) != 0:
        return 1
    print("ok", flush=True)
    return 0


def _cpu_flags() -> set[str]:
    try:
        text = Path("/proc/cpuinfo").read_text()
    except OSError:
        return set()
    for line in text.splitlines():
        if line.startswith("flags"):
            return set(line.partition(":")[2].split())
    return set()


@functools.cache
def extra_buffer_types_usable(model_path: Path) -> bool:
    """False when the CPU claims AMX but llama.cpp's AMX kernels crash on this model here."""
    override = os.environ.get("LAUNCHER_LLAMACPP_EXTRA_BUFFERS")
    if override in ("0", "1"):
        return override == "1"
    if sys.platform != "linux" or "amx_tile" not in _cpu_flags():
        return True
    try:
        result = subprocess.run(
            [*launcher_command(), PROBE_COMMAND, str(model_path)],
            capture_output=True,
            text=True,
            timeout=300,
            check=False,
        )
    except (OSError, subprocess.SubprocessError):
        return False
    usable = result.returncode == 0 and result.stdout.strip().endswith("ok")
    if not usable:
        log.warning(
            "llama.cpp's AMX kernels fail on this machine (probe exit %s): loading without the "
            "AMX/repacked weight buffers",
            result.returncode,
        )
    return usable
