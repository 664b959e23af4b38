"""Can llama.cpp's AMX code really run here? (Some VMs and sandboxes advertise AMX and then trap it.)

llama.cpp's CPU backend repacks quantized weights into an AMX buffer whenever the CPU flags say
AMX is there; where the hypervisor does not really support the tile instructions, the first
matrix multiply kills the whole process with SIGILL (seen on this project's CI machines). When
the CPU advertises AMX we load the model once in a child process and decode a few tokens; if
the child dies, the engine loads without llama.cpp's extra CPU buffer types (AMX and repacked
weights). LAUNCHER_LLAMACPP_EXTRA_BUFFERS=0/1 skips the probe.
"""

from __future__ import annotations

import functools
import logging
import os
import subprocess
import sys
from pathlib import Path

log = logging.getLogger("launcher.engines.llamacpp")

_PROBE = r"""
import sys, llama_cpp as L
quiet = L.llama_log_callback(lambda level, text, data: None)  # kept alive: llama.cpp calls it later
L.llama_log_set(quiet, None)
L.llama_backend_init()
model = L.llama_model_load_from_file(sys.argv[1].encode(), L.llama_model_default_params())
params = L.llama_context_default_params()
params.n_ctx, params.n_batch, params.n_ubatch, params.n_threads, params.n_threads_batch = 256, 64, 64, 2, 2
context = L.llama_init_from_model(model, params)
tokens = (L.llama_token * 8)(*([1] * 8))
assert L.llama_decode(context, L.llama_batch_get_one(tokens, 8)) == 0
assert L.llama_decode(context, L.llama_batch_get_one(tokens, 1)) == 0
print("ok")
"""


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
            [sys.executable, "-c", _PROBE, str(model_path)],
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
