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

from launcher.advisor.handoff import FP8_COMPUTE
from launcher.engine_specs import EngineSpec
from launcher.engine_specs.child import ChildArguments, ChildLaunch, ChildRequest
from launcher.engine_specs.preference import Offer, Preference, Situation, is_datacenter
from launcher.hardware.machine import Machine


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


def _suits(machine: Machine) -> bool:
    """Worth proposing on a datacenter NVIDIA node (for a team on a desktop its `prefer` proposes it)."""
    return bool(machine.nvidia_gpus) and is_datacenter(machine)


def _prefer(situation: Situation) -> Preference | None:
    """First for a team or on a datacenter NVIDIA node, when the model fits on the GPUs: continuous
    batching and paged KV serve many requests better than a desktop engine. Its option stands for SGLang
    too (`launcher handoff` plans either): FP8 on Ada/Hopper, else AWQ, and the BF16 originals."""
    nvidia = situation.machine.nvidia_gpus
    if not nvidia or not (situation.team or situation.datacenter):
        return None
    fp8 = min(g.compute_capability or (0, 0) for g in nvidia) >= FP8_COMPUTE
    why = "many users share it" if situation.team else "this is a datacenter GPU node"
    model_id = situation.model_id
    return Preference(
        rank=0,
        tiers=(("full_gpu",),),
        reason=lambda won: (
            f"vLLM or SGLang, because {why}: continuous batching, paged KV and tensor parallelism serve a team "
            f"better than a desktop engine. `launcher handoff vllm {model_id}` writes the deployment for this "
            f"machine (weights, tensor parallel, context, tool parsers), and with vLLM installed "
            f"`launcher serve {model_id} --engine vllm` runs it behind the launcher's endpoint."
        ),
        offers=(Offer("fp8", "FP8") if fp8 else Offer("awq", "AWQ"), Offer("bf16", "BF16")),
        label="vLLM / SGLang",
    )


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
    suits=_suits,
    runs_as="child",
    prefer=_prefer,
    child=ChildLaunch(
        metric_series={
            "vllm:num_requests_running": "running",
            "vllm:num_requests_waiting": "waiting",
            "vllm:prompt_tokens_total": "prompt_total",
            "vllm:generation_tokens_total": "generation_total",
            "vllm:kv_cache_usage_perc": "kv_ratio",
            "vllm:gpu_cache_usage_perc": "kv_ratio",  # an older name of the same series
        },
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
