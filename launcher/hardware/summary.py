"""Human-readable and JSON views of a `Machine` (engine answers are passed in by the CLI)."""

from __future__ import annotations

from typing import Any

from launcher.core.units import format_bytes, format_rate
from launcher.hardware.machine import GpuInfo, Machine


def machine_json(machine: Machine, engines: dict[str, dict[str, Any]] | None) -> dict[str, Any]:
    """`Machine.to_json()` plus an "engines" key when engines were checked."""
    data = machine.to_json()
    if engines is not None:
        data["engines"] = engines
    return data


def _gpu_line(gpu: GpuInfo) -> str:
    parts = [f"{format_bytes(gpu.memory_total)} VRAM ({format_bytes(gpu.memory_free)} free)"]
    parts.append(f"{format_rate(gpu.memory_bandwidth)} memory bandwidth")
    if gpu.fp16_tflops:
        parts.append(f"{gpu.fp16_tflops:g} FP16 TFLOPS")
    if gpu.compute_capability:
        parts.append("compute capability {}.{}".format(*gpu.compute_capability))
    if gpu.link:
        peers = f" to GPU {', '.join(map(str, gpu.nvlink_peers))}" if gpu.nvlink_peers else ""
        parts.append(gpu.link + peers)
    return f"  GPU {gpu.index}: {gpu.name}: " + ", ".join(parts)


def format_machine(machine: Machine, engines: dict[str, dict[str, Any]] | None = None) -> str:
    """A few lines a user can read: CPU, RAM, disk, GPUs or Apple chip, engines, and what was not seen."""
    cpu = machine.cpu
    lines = []
    if machine.name:
        lines.append(f"Machine: {machine.name}")
    lines.append(f"OS:      {machine.os_version or machine.os}")
    lines.append(f"CPU:     {cpu.brand} ({cpu.arch}), {cpu.physical_cores} cores / {cpu.logical_cores} threads")
    lines.append(f"         features: {' '.join(sorted(cpu.features)) or 'none detected'}")
    if cpu.memory_bandwidth and machine.apple is None:
        lines.append(f"         RAM bandwidth: {format_rate(cpu.memory_bandwidth)} (peak, from SMBIOS)")
    memory = machine.memory
    lines.append(f"RAM:     {format_bytes(memory.total)} total, {format_bytes(memory.available)} available")
    if machine.disk_free is not None:
        lines.append(f"Disk:    {format_bytes(machine.disk_free)} free for models ({machine.models_dir})")
    else:
        lines.append("Disk:    free space unknown")
    if machine.apple is not None:
        apple = machine.apple
        cores = f"{apple.gpu_cores}-core GPU" if apple.gpu_cores else "GPU cores unknown"
        tflops = f", ~{apple.fp16_tflops:g} FP16 TFLOPS" if apple.fp16_tflops else ""
        lines.append(
            f"Apple:   {apple.chip}, {cores}, {format_bytes(apple.unified_memory)} unified memory, "
            f"{format_rate(apple.memory_bandwidth)}{tflops}"
        )
        lines.append(f"         the GPU may use up to {format_bytes(apple.gpu_wired_limit)} (wired limit)")
    if machine.gpus:
        driver = ""
        if machine.nvidia_driver_version:
            cuda = f", CUDA {machine.cuda_driver_version}" if machine.cuda_driver_version else ""
            driver = f" (NVIDIA driver {machine.nvidia_driver_version}{cuda})"
        lines.append(f"GPUs:    {len(machine.gpus)}{driver}")
        lines += [_gpu_line(gpu) for gpu in machine.gpus]
    elif machine.apple is None:
        lines.append("GPUs:    none detected")
    if engines is not None:
        lines.append("Engines:")
        for name, answer in engines.items():
            reason = str(answer["reason"])
            if answer["usable"]:
                lines.append(f"  {name}: ready: {reason}")
            else:  # adapters already phrase it ("not installed: pip install ...")
                prefix = "" if reason.startswith("not ") else "not usable: "
                lines.append(f"  {name}: {prefix}{reason}")
    if machine.unseen:
        lines.append("Not detected:")
        lines += [f"  - {note}" for note in machine.unseen]
    return "\n".join(lines)
