"""ExLlamaV3 as the registry knows it (`launcher.engine_specs`): EXL3 on NVIDIA Ampere or newer."""

from __future__ import annotations

from launcher.engine_specs import EngineSpec
from launcher.engine_specs.preference import Preference, Situation
from launcher.engines.exllama_common.spec_checks import AMPERE, min_compute, needs_nvidia
from launcher.hardware.machine import Machine


def _runs_on(machine: Machine) -> str | None:
    problem = needs_nvidia("ExLlamaV3", machine)
    if problem is None and min_compute(machine) < AMPERE:
        cc = min_compute(machine)
        return f"compute capability {cc[0]}.{cc[1]} < 8.0 (ExLlamaV3 needs Ampere or newer); use EXL2 or GGUF"
    return problem


def _prefer(situation: Situation) -> Preference | None:
    """First on NVIDIA (after a team's hand-off) when the model fits entirely in VRAM: it cannot offload.
    Below Ampere it only says why it is out, before the engines that run there are tried."""
    nvidia = situation.machine.nvidia_gpus
    if not nvidia:
        return None
    cc = min_compute(situation.machine)
    if cc < AMPERE:
        return Preference(
            rank=20,
            tiers=(),
            reason=lambda won: "",
            note=f"Compute capability {cc[0]}.{cc[1]} is below 8.0 (pre-Ampere): ExLlamaV3/EXL3 cannot run here.",
        )
    split = f" split over {len(nvidia)} GPUs (tensor parallel)" if len(nvidia) > 1 else ""
    return Preference(
        rank=20,
        tiers=(("full_gpu",),),
        reason=lambda won: (
            f"NVIDIA compute capability {cc[0]}.{cc[1]} and the model fits entirely in VRAM{split}: "
            "ExLlamaV3 with EXL3 is the fastest quantized CUDA engine."
        ),
        none_fit="No EXL3 quant fits entirely in VRAM, and ExLlama cannot offload to CPU: using GGUF.",
        no_weights="No EXL3 weights in the catalog for this model: using GGUF with llama.cpp (CUDA).",
    )


SPEC = EngineSpec(
    name="exllamav3",
    label="ExLlamaV3",
    formats=("exl3",),
    factory="launcher.engines.exllamav3.engine:ExLlamaV3Engine",
    runtime_module="exllamav3",
    distribution="exllamav3",
    pip_extra="exllamav3",
    tensor_parallel=True,
    runs_on=_runs_on,
    prefer=_prefer,
)
