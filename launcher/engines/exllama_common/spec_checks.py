"""The hardware ExLlama needs, for the engines' specs: an NVIDIA GPU, new enough for V3."""

from __future__ import annotations

from launcher.hardware.machine import Machine

AMPERE = (8, 0)
"""The compute capability ExLlamaV3 needs; below it EXL2 (ExLlamaV2) is the NVIDIA choice."""


def min_compute(machine: Machine) -> tuple[int, int]:
    """The lowest compute capability among the NVIDIA cards ((0, 0) without any)."""
    return min((g.compute_capability or (0, 0) for g in machine.nvidia_gpus), default=(0, 0))


def needs_nvidia(label: str, machine: Machine) -> str | None:
    """None with an NVIDIA card, else why `label` cannot run and what to use instead."""
    if machine.nvidia_gpus:
        return None
    instead = "MLX or GGUF (llama.cpp)" if machine.apple is not None else "GGUF with llama.cpp"
    return f"no CUDA device: {label} needs an NVIDIA GPU; use {instead}"
