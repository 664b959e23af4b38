"""What to change when an option does not fit, or fits only partly: a smaller quant, a smaller context,
a q8_0 KV cache. Each suggestion is the same option fitted again with one thing changed."""

from __future__ import annotations

from launcher.advisor.calibration import MachineCalibration
from launcher.advisor.fit import KvType
from launcher.advisor.options import KV_LEVER, Option, build_option, kv_lever_applies, kv_lever_cost
from launcher.advisor.plan import SERVE_CONTEXTS
from launcher.catalog.schema import CatalogModel
from launcher.core.units import format_bytes
from launcher.engine_specs import EngineStatus
from launcher.hardware.machine import Machine


def variant(
    machine: Machine,
    model: CatalogModel,
    option: Option,
    users: int,
    status: EngineStatus | None,
    calibration: MachineCalibration | None,
    *,
    quant: str | None = None,
    context: int | None = None,
    kv_type: KvType = "f16",
) -> Option:
    """`option` again (same engine and format) with another quant, context or KV cache type."""
    return build_option(
        machine,
        model,
        option.engine,
        option.format,
        quant or option.quant,
        context=context or option.fit.context,
        parallel=users,
        kv_type=kv_type,
        status=status,
        calibration=calibration,
        shown_as=option.shown_as,
    )


def advice(
    machine: Machine,
    model: CatalogModel,
    option: Option,
    context: int,
    users: int,
    status: EngineStatus | None,
    calibration: MachineCalibration | None,
) -> tuple[str, ...]:
    """What to change to make a non-fitting option fit."""
    fit = option.fit
    free = sum(d.free for d in fit.devices)
    lines = [f"needs {format_bytes(fit.needed_bytes)}, {format_bytes(free)} free"]
    fmt = option.format
    quants = model.quants(fmt) if fmt in ("gguf", "mlx", "exl3", "exl2") else []  # type: ignore[arg-type]
    smaller = [q for q in quants if q != option.quant]
    for quant in smaller:
        alt = variant(machine, model, option, users, status, calibration, quant=quant, context=context)
        if alt.fit.fits and alt.bits_per_weight < option.bits_per_weight:
            lines.append(f"use {quant}")
            break
    for smaller_context in (c for c in SERVE_CONTEXTS if c < context):
        alt = variant(machine, model, option, users, status, calibration, context=smaller_context)
        if alt.fit.fits:
            lines.append(f"or context {smaller_context // 1024}k")
            break
    if kv_lever_applies(option.engine) and option.kv_type != KV_LEVER:
        alt = variant(machine, model, option, users, status, calibration, kv_type=KV_LEVER)
        if alt.fit.fits:
            lines.append(f"or {kv_lever_cost(fit.kv_bytes, alt.fit.kv_bytes, context)}")
    if len(lines) == 1:
        lines.append("no quant or context in the catalog fits this machine; pick a smaller model")
    return (lines[0] + ": " + ", ".join(lines[1:]),)


def full_gpu_hint(
    machine: Machine,
    model: CatalogModel,
    chosen: Option,
    context: int,
    users: int,
    status: EngineStatus | None,
    calibration: MachineCalibration | None,
) -> list[str]:
    """When a partial offload would become a full GPU load at a smaller context, say so with the speed-up."""
    for smaller in (c for c in SERVE_CONTEXTS if c < context):
        alt = variant(machine, model, chosen, users, status, calibration, context=smaller)
        if alt.fit.verdict in ("full_gpu", "unified"):
            speedup = alt.speed.decode_high / max(chosen.speed.decode_high, 1e-9)
            return [
                f"At {smaller // 1024}k context the whole model fits on the GPU and decodes about {speedup:.0f}x "
                f"faster (--context {smaller})."
            ]
    return []
