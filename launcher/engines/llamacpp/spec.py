"""llama.cpp as the registry knows it (`launcher.engine_specs`): GGUF on every machine, with CPU offload."""

from __future__ import annotations

from launcher.engine_specs import EngineSpec

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
)
