"""MLX (mlx-lm) as the registry knows it (`launcher.engine_specs`): MLX and plain safetensors folders.

MLX is fast on Apple Silicon (Metal, unified memory). Its CPU build also runs on Linux, which the
tests use, but llama.cpp is faster there, so the advisor proposes MLX on Macs only.
"""

from __future__ import annotations

from launcher.engine_specs import EngineSpec
from launcher.engine_specs.preference import Preference, Situation
from launcher.hardware.machine import Machine


def _runs_on(machine: Machine) -> str | None:
    if machine.os == "windows":
        return "MLX has no Windows build; use a GGUF with llama.cpp"
    if machine.os == "darwin" and machine.apple is None:
        return "MLX needs Apple Silicon (an M-series Mac); use a GGUF with llama.cpp"
    return None


def _prefer(situation: Situation) -> Preference | None:
    """First on Macs when the model fits in the GPU's share of unified memory; never elsewhere."""
    if situation.machine.apple is None:
        return None
    return Preference(
        rank=10,
        tiers=(("unified",),),
        reason=lambda won: "Apple Silicon: MLX runs on the GPU with unified memory and is the fastest engine on Macs.",
        none_fit="No MLX quant fits in the GPU's share of unified memory, so llama.cpp (Metal) is used.",
        no_weights="This model has no MLX weights in the catalog; llama.cpp with Metal runs the GGUF.",
    )


SPEC = EngineSpec(
    name="mlx",
    label="MLX (mlx-lm)",
    # mlx-lm loads unquantized Hugging Face safetensors folders too (bf16).
    formats=("mlx", "safetensors"),
    factory="launcher.engines.mlx.engine:MlxEngine",
    runtime_module="mlx_lm",
    distribution="mlx-lm",
    pip_extra="mlx",
    sliding_cache="window",  # rotating caches keep each sequence's window
    runs_on=_runs_on,
    suits=lambda machine: machine.apple is not None,
    prefer=_prefer,
)
