"""ExLlamaV2 as the registry knows it (`launcher.engine_specs`): EXL2 on any NVIDIA card (legacy upstream)."""

from __future__ import annotations

from launcher.engine_specs import EngineSpec
from launcher.engine_specs.preference import Preference, Situation
from launcher.engines.exllama_common.spec_checks import AMPERE, min_compute, needs_nvidia


def _prefer(situation: Situation) -> Preference | None:
    """Tried on NVIDIA cards older than Ampere, where ExLlamaV3 cannot run, when the model fits in VRAM."""
    machine = situation.machine
    if not machine.nvidia_gpus or min_compute(machine) >= AMPERE:
        return None
    return Preference(
        rank=30,
        tiers=(("full_gpu",),),
        reason=lambda won: "ExLlamaV2 + EXL2 still runs on this card (legacy: archived upstream).",
    )


SPEC = EngineSpec(
    name="exllamav2",
    label="ExLlamaV2",
    formats=("exl2",),
    factory="launcher.engines.exllamav2.engine:ExLlamaV2Engine",
    runtime_module="exllamav2",
    distribution="exllamav2",
    pip_extra="exllamav2",
    runs_on=lambda machine: needs_nvidia("ExLlamaV2", machine),
    prefer=_prefer,
)
