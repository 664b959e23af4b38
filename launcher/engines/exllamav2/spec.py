"""ExLlamaV2 as the registry knows it (`launcher.engine_specs`): EXL2 on any NVIDIA card (legacy upstream)."""

from __future__ import annotations

from launcher.engine_specs import EngineSpec
from launcher.engines.exllama_common.spec_checks import needs_nvidia

SPEC = EngineSpec(
    name="exllamav2",
    label="ExLlamaV2",
    formats=("exl2",),
    factory="launcher.engines.exllamav2.engine:ExLlamaV2Engine",
    runtime_module="exllamav2",
    distribution="exllamav2",
    pip_extra="exllamav2",
    runs_on=lambda machine: needs_nvidia("ExLlamaV2", machine),
)
