"""ExLlamaV3 as the registry knows it (`launcher.engine_specs`): EXL3 on NVIDIA Ampere or newer."""

from __future__ import annotations

from launcher.engine_specs import EngineSpec
from launcher.engines.exllama_common.spec_checks import min_compute, needs_nvidia
from launcher.hardware.machine import Machine

AMPERE = (8, 0)


def _runs_on(machine: Machine) -> str | None:
    problem = needs_nvidia("ExLlamaV3", machine)
    if problem is None and min_compute(machine) < AMPERE:
        cc = min_compute(machine)
        return f"compute capability {cc[0]}.{cc[1]} < 8.0 (ExLlamaV3 needs Ampere or newer); use EXL2 or GGUF"
    return problem


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
)
