"""llama.cpp as the registry knows it (`launcher.engine_specs`): GGUF on every machine, with CPU offload."""

from __future__ import annotations

from launcher.engine_specs import EngineSpec
from launcher.engine_specs.preference import Preference, Situation, Won


def _why(won: Won) -> str:
    if won.verdict == "partial":
        return (
            f"Only {won.gpu_layers} of {won.total_layers} layers fit on the GPU: llama.cpp offloads "
            "the rest to CPU RAM (slower, but it runs)."
        )
    if won.verdict == "cpu":
        return "CPU only: llama.cpp with a GGUF K-quant uses AVX2/AVX512/NEON kernels."
    return ""  # on the GPU: the quant's own line says it


def _prefer(situation: Situation) -> Preference:
    """The fallback everywhere: tried after the engines that are faster where they fit, it runs on any
    GPU or CPU and offloads the layers that do not fit (a partial offload is its last tier)."""
    machine = situation.machine
    portable = bool(machine.gpus) and not machine.nvidia_gpus
    return Preference(
        rank=100,
        tiers=(("full_gpu", "unified"), ("cpu",), ("partial",)),
        reason=_why,
        note="GPU is not NVIDIA: llama.cpp (Vulkan/HIP/SYCL) with GGUF is the portable choice." if portable else "",
    )


SPEC = EngineSpec(
    name="llamacpp",
    label="llama.cpp",
    formats=("gguf",),
    factory="launcher.engines.llamacpp.engine:LlamaCppEngine",
    runtime_module="llama_cpp",
    distribution="llama-cpp-python",
    pip_extra="llamacpp",
    can_offload=True,
    # One windowed cache shared by all sequences, plus sliding-window checkpoints in host RAM.
    sliding_cache="llamacpp",
    # q8_0 K/V are near-lossless in llama.cpp's perplexity tests and halve the cache.
    quantized_kv=True,
    prefer=_prefer,
)
