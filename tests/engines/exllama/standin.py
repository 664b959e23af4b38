"""A CPU stand-in for the ExLlama runtimes (and the bits of torch they use), for tests without a GPU.

THE EXLLAMA ENGINES ARE VERIFIED ONLY ON AN NVIDIA GPU (scripts/gpu-check). This stand-in lets
CI test everything above the runtime calls: the class and method names and keyword arguments
are those of upstream exllamav3 (Config.from_directory, Model.from_config/load, Cache, Tokenizer,
Generator.enqueue/iterate/cancel, Job, ComboSampler, Filter, LLGuidanceFilter) and exllamav2
(ExLlamaV2Config, ExLlamaV2, ExLlamaV2Cache*, load_autosplit, ExLlamaV2DynamicGenerator,
ExLlamaV2DynamicJob, ExLlamaV2Sampler.Settings, ExLlamaV2Filter), with their documented checks
(cache size a multiple of the 256-token page, unpaged mode = one job). Unknown keyword
arguments raise TypeError, so a misspelt argument fails a test.

It "generates" deterministically: each active job gets one token per iterate() from the real
tokenizer's ordinary vocabulary (after `Behaviour.lead`, text it writes first); while a filter
constrains the step (driven as each runtime drives its filters) it picks, among the tokens the real
llguidance matcher allows, the one that closes structures soonest. Everything it was asked to do
is recorded (`runtime.log`) for the tests to check.
"""

from __future__ import annotations

from tests.engines.exllama.standin_core import Behaviour, Log, OutOfMemoryError, make_torch
from tests.engines.exllama.standin_v2 import make_v2
from tests.engines.exllama.standin_v3 import make_v3

__all__ = ["Behaviour", "Log", "OutOfMemoryError", "Runtime"]


class Runtime:
    """One stand-in runtime instance (fresh per test), with its behaviour knobs and its log."""

    def __init__(self, behaviour: Behaviour | None = None, devices: int = 1) -> None:
        self.behaviour = behaviour or Behaviour()
        self.log = Log()
        self.torch = make_torch(devices=devices)
        self.exllamav3 = make_v3(self)
        v2 = make_v2(self)
        self.exllamav2, self.v2_generator, self.v2_filters, self.v2_attn = v2
