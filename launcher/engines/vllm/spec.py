"""vLLM as the registry knows it: its own OpenAI-compatible server, run as a supervised child.

`launcher serve MODEL --engine vllm` starts `vllm serve` on a free loopback port (a catalog id as
`launcher handoff vllm` plans it for this machine) and serves it through the launcher's endpoint.
vLLM reads its key from VLLM_API_KEY, so the key stays out of the process list.
"""

from __future__ import annotations

import importlib.util
import os
import shutil
import sys

from launcher.engine_specs import EngineSpec
from launcher.engine_specs.child import ChildArguments, ChildLaunch, ChildRequest


def vllm_program() -> list[str] | None:
    """The words that start vLLM's server here: its own command on PATH first (a venv or pipx of its own),
    else this Python when it can import vLLM."""
    if shutil.which("vllm"):
        return ["vllm", "serve"]
    if importlib.util.find_spec("vllm") is not None:
        return [sys.executable, "-m", "vllm.entrypoints.cli.main", "serve"]
    return None


def vllm_arguments(request: ChildRequest) -> ChildArguments:
    """vLLM's words for a request, from the hand-off's table of its flags and parsers."""
    from launcher.advisor.handoff_engines import VLLM
    from launcher.engines.child.handoff_words import handoff_arguments

    return handoff_arguments(VLLM, request)


def cpu_kv_cache(request: ChildRequest) -> dict[str, str]:
    """vLLM's CPU build sizes its KV cache as --gpu-memory-utilization of all RAM (0.9) unless
    VLLM_CPU_KVCACHE_SPACE (GiB) says otherwise, which starves the machine and the launcher with it:
    on a machine without a GPU, give it a quarter of the free RAM (at least 1 GiB) unless it is set."""
    if os.environ.get("VLLM_CPU_KVCACHE_SPACE"):
        return {}
    machine = request.machine
    if machine is None:
        from launcher.hardware.probe import probe_machine

        machine = probe_machine()
    if machine.gpus or machine.apple is not None:
        return {}
    return {"VLLM_CPU_KVCACHE_SPACE": str(max(1, machine.memory.available // 4 // 2**30))}


SPEC = EngineSpec(
    name="vllm",
    label="vLLM",
    formats=("safetensors",),
    factory="launcher.engines.child.engine:ChildEngine",
    runtime_module="vllm",
    distribution="vllm",
    pip_extra="vllm",
    tensor_parallel=True,
    sliding_cache="window",
    runs_as="child",
    child=ChildLaunch(
        program=vllm_program,
        arguments=vllm_arguments,
        looked_for="neither `vllm` on PATH nor the vllm package in this Python",
        install=(
            "it runs on NVIDIA GPUs: install it there (`pip install vllm`, or in a venv of its own with its "
            "command on PATH)"
        ),
        advice=(
            ", or plan a deployment with `launcher handoff vllm MODEL`. Without it, `launcher serve MODEL` "
            "runs the model with llama.cpp."
        ),
        key_env="VLLM_API_KEY",
        extra_env=cpu_kv_cache,
    ),
)
