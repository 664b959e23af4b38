"""Which checkpoint a vLLM or SGLang deployment downloads: safetensors in the format those engines are fast on.

FP8 on Ada and Hopper (compute capability 8.9+: FP8 tensor cores), AWQ 4-bit otherwise and as the
smaller fallback (Marlin kernels), BF16 only where nothing quantized exists, and gpt-oss's own
MXFP4 checkpoint always. Never GGUF: the engines' fast kernels load safetensors.
"""

from __future__ import annotations

from dataclasses import dataclass

from launcher.advisor.tables import SAFETENSORS_TABLE, bits_per_weight
from launcher.catalog.schema import CatalogModel, SafetensorsQuant
from launcher.core.units import format_bytes


@dataclass(frozen=True)
class Weights:
    """The checkpoint the engine downloads, and why."""

    format: str  # "fp8" | "awq" | "bf16" | "mxfp4"
    repo: str
    revision: str
    size: int  # bytes of weights in GPU memory
    quantization: str | None  # the engines' --quantization when the repo's config does not say (online FP8)
    why: str


def _size(model: CatalogModel, fmt: str) -> int:
    variant = model.safetensors.get(fmt)  # type: ignore[call-overload]
    recorded: int | None = variant.size_bytes if variant is not None else None
    return recorded or int(
        model.architecture.params_total_b * 1e9 * bits_per_weight(SAFETENSORS_TABLE, fmt.upper()) / 8
    )


def _listed(model: CatalogModel, fmt: SafetensorsQuant, why: str) -> Weights:
    variant = model.safetensors[fmt]
    size = _size(model, fmt)
    return Weights(
        fmt, variant.repo, variant.revision, size, None, why.format(repo=variant.repo, size=format_bytes(size))
    )


def weight_choices(model: CatalogModel, fp8_compute: bool) -> list[Weights]:
    """The checkpoints worth running on these GPUs, best first (the planner falls back down the list)."""
    if "mxfp4" in model.safetensors:
        why = "{repo}: the original checkpoint keeps its experts in MXFP4 ({size}), which both engines run as it is"
        return [_listed(model, "mxfp4", why)]
    choices: list[Weights] = []
    if fp8_compute and "fp8" in model.safetensors:
        why = "FP8 ({repo}, {size}): Ada and Hopper GPUs multiply FP8 natively, at half BF16's memory"
        choices.append(_listed(model, "fp8", why))
    elif fp8_compute:
        size = _size(model, "fp8")
        why = (
            f"FP8 made at load time from the BF16 weights ({model.upstream_repo}, --quantization fp8, "
            f"{format_bytes(size)}): the catalog lists no FP8 checkpoint, and Ada and Hopper GPUs multiply FP8 "
            "natively (the download is the BF16 size)"
        )
        choices.append(Weights("fp8", model.upstream_repo, "main", size, "fp8", why))
    if "awq" in model.safetensors:
        why = "AWQ 4-bit ({repo}, {size}): the engines' Marlin kernels run it fast on Ampere and newer"
        choices.append(_listed(model, "awq", why))
    if not fp8_compute:
        size = _size(model, "bf16")
        why = f"BF16 ({model.upstream_repo}, {format_bytes(size)}): the original weights"
        choices.append(Weights("bf16", model.upstream_repo, "main", size, None, why))
    return choices
