"""Can an ExLlama engine run here? Each check names what is missing and what to use instead.

Availability must be cheap (`launcher detect` and the advisor ask every engine), so it reads
package metadata instead of importing the runtimes, and only imports torch (to ask whether CUDA
works) once everything else says yes. The environment is injected so tests replay any machine.
"""

from __future__ import annotations

import importlib.metadata
from collections.abc import Callable
from dataclasses import dataclass

from launcher.engine_specs import Availability, get_spec
from launcher.hardware.machine import GpuInfo, Machine

FLASH_ATTN_PAGED = (2, 5, 7)  # exllamav2/attn.py: paged attention needs flash-attn >= 2.5.7


@dataclass(frozen=True)
class CudaStatus:
    """What PyTorch says about CUDA."""

    available: bool
    torch_version: str
    cuda_version: str | None = None


def installed_version(distribution: str) -> str | None:
    """The installed version of a distribution, without importing it; None when absent."""
    try:
        return importlib.metadata.version(distribution)
    except importlib.metadata.PackageNotFoundError:
        return None


def torch_cuda_status() -> CudaStatus:
    """Import torch and ask whether it can use a CUDA device."""
    import torch

    return CudaStatus(
        available=bool(torch.cuda.is_available()),
        torch_version=str(torch.__version__),
        cuda_version=getattr(torch.version, "cuda", None),
    )


@dataclass(frozen=True)
class Environment:
    """The Python environment's answers; tests inject their own."""

    package_version: Callable[[str], str | None] = installed_version
    cuda: Callable[[], CudaStatus] = torch_cuda_status


def version_tuple(version: str) -> tuple[int, ...]:
    """'2.5.7.post1' -> (2, 5, 7)."""
    parts = []
    for part in version.split("."):
        digits = "".join(c for c in part if c.isdigit()) if part[:1].isdigit() else ""
        if not digits:
            break
        parts.append(int(digits))
    return tuple(parts)


def _old_gpus(gpus: tuple[GpuInfo, ...], minimum: tuple[int, int]) -> list[GpuInfo]:
    return [g for g in gpus if g.compute_capability is not None and g.compute_capability < minimum]


def _cc(gpu: GpuInfo) -> str:
    assert gpu.compute_capability is not None
    return f"{gpu.compute_capability[0]}.{gpu.compute_capability[1]}"


def check_cuda_engine(
    machine: Machine,
    env: Environment,
    *,
    package: str,
    label: str,
    engine: str,
    min_compute: tuple[int, int] | None,
    compute_hint: str = "",
) -> Availability | tuple[str, CudaStatus]:
    """The shared checks: installed, an NVIDIA GPU, compute capability, CUDA-enabled torch.

    Returns the failing Availability, or (runtime version, CUDA status) when all pass.
    """
    version = env.package_version(package)
    if version is None:
        return Availability(usable=False, reason=f"not installed: {get_spec(engine).install_hint}")
    if env.package_version("torch") is None:
        return Availability(
            usable=False,
            reason=f"not installed: {label} needs PyTorch with CUDA ({get_spec(engine).install_hint})",
            version=version,
        )
    gpus = machine.nvidia_gpus
    if not gpus:
        instead = "MLX or GGUF (llama.cpp)" if machine.apple is not None else "GGUF with llama.cpp"
        return Availability(
            usable=False, reason=f"no CUDA device: {label} needs an NVIDIA GPU; use {instead}", version=version
        )
    if min_compute is not None:
        old = _old_gpus(gpus, min_compute)
        need = f"{min_compute[0]}.{min_compute[1]}"
        if old and len(old) == len(gpus):
            return Availability(
                usable=False,
                reason=f"compute capability {_cc(old[0])} < {need} ({label} needs Ampere or newer); {compute_hint}",
                version=version,
            )
        if old:
            names = ", ".join(f"GPU {g.index} ({g.name}, {_cc(g)})" for g in old)
            return Availability(
                usable=False,
                reason=f"{names} has compute capability < {need}, which {label} cannot use: hide it with "
                "CUDA_VISIBLE_DEVICES, or " + compute_hint,
                version=version,
            )
    try:
        cuda = env.cuda()
    except Exception as err:  # a broken torch install is reported, not fatal to `launcher detect`
        return Availability(usable=False, reason=f"PyTorch cannot be imported: {err}", version=version)
    if not cuda.available:
        return Availability(
            usable=False,
            reason=f"no CUDA device: PyTorch {cuda.torch_version} cannot use the GPU "
            "(a CPU-only build of torch, or an NVIDIA driver problem); install a CUDA build of PyTorch",
            version=version,
        )
    return version, cuda


def describe(label: str, version: str, cuda: CudaStatus, machine: Machine, note: str = "") -> str:
    """'exllamav3 0.0.6 (CUDA 12.4, 2x NVIDIA GeForce RTX 3090, tensor parallel)'."""
    gpus = machine.nvidia_gpus
    names = gpus[0].name if len(gpus) == 1 else f"{len(gpus)}x {gpus[0].name}"
    cuda_text = f"CUDA {cuda.cuda_version}" if cuda.cuda_version else "CUDA"
    details = ", ".join(part for part in (cuda_text, names, note) if part)
    return f"{label} {version} ({details})"
