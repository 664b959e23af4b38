"""What `launcher bench --calibrate` prints and writes: predicted vs measured, and the new prediction."""

from __future__ import annotations

from dataclasses import asdict
from typing import Any

from launcher.advisor.calibration import describe_machine
from launcher.advisor.speed import format_tps
from launcher.bench.calibrate import CalibrationOutcome
from launcher.bench.calibrate_speculative import SpeculativeMeasurement
from launcher.core.units import format_bytes


def error_percent(predicted: float, measured: float | None) -> float | None:
    """How far the measurement landed from the prediction, as a share of the prediction (+: measured
    more than predicted), the same way the app and docs/benchmarks.md state it."""
    return (measured - predicted) / predicted * 100 if measured and predicted else None


def _error_text(predicted: float, measured: float | None) -> str:
    error = error_percent(predicted, measured)
    return "" if error is None else f"{error:+.0f}%"


def render_text(outcome: CalibrationOutcome) -> str:
    """The human report."""
    speed, measured, served = outcome.prediction.speed, outcome.measured, outcome.served
    rows = [
        (
            "decode",
            f"{speed.decode_range()} tok/s (mid {format_tps(speed.decode_mid)})",
            f"{format_tps(measured.decode_tps)} tok/s" if measured.decode_tps else "not measured",
            _error_text(speed.decode_mid, measured.decode_tps),
        ),
        (
            "prefill",
            f"{speed.prefill_range()} tok/s (mid {format_tps(speed.prefill_mid)})",
            f"{format_tps(measured.prefill_tps)} tok/s" if measured.prefill_tps else "not measured",
            _error_text(speed.prefill_mid, measured.prefill_tps),
        ),
        (
            "memory",
            format_bytes(outcome.prediction.memory_bytes),
            format_bytes(measured.memory_bytes) if measured.memory_bytes else "not reported by the engine",
            _error_text(outcome.prediction.memory_bytes, measured.memory_bytes),
        ),
    ]
    lines = [
        f"Calibrating {served.describe()}, {outcome.prediction.fit.label}",
        f"on {describe_machine(outcome.machine)}",
        "",
        f"{'':<8}  {'predicted by the model':<34}  {'measured':<26}  error",
        *(f"{name:<8}  {predicted:<34}  {got:<26}  {error}".rstrip() for name, predicted, got, error in rows),
    ]
    lines += ["", _speculative_measured(measured.speculative)] if measured.speculative is not None else []
    cores = outcome.machine.cpu.logical_cores
    if measured.load_before is not None and measured.load_before >= cores:
        lines += [
            "",
            f"The machine was busy when this run began (load average {measured.load_before:.1f} on {cores} "
            "logical cores): if other work was running, these speeds measure it too; rerun when the machine is idle.",
        ]
    if measured.errors:
        lines += ["", "Requests that failed: " + "; ".join(measured.errors)]
    if outcome.run is None or outcome.stored is None:
        lines += ["", "Nothing was measured, so nothing was stored."]
        return "\n".join(lines) + "\n"
    same_key = [
        r for r in outcome.stored.runs if (r.engine, r.size_class) == (outcome.run.engine, outcome.run.size_class)
    ]
    plural = "run" if len(same_key) == 1 else "runs"
    lines += [
        "",
        f"Stored in {outcome.store_path}: {len(same_key)} {plural} of {served.engine} with "
        f"{outcome.run.size_class} models on this machine.",
    ]
    if outcome.calibrated_speed is not None:
        lines.append(f"Now predicted: {outcome.calibrated_speed.summary()}")
    if (stored := _speculative_stored(outcome)) is not None:
        lines.append(stored)
    if outcome.calibrated_memory is not None:
        memory = outcome.calibrated_memory
        engine_part = memory.needed - memory.checkpoint_bytes
        low, high = memory.low - memory.checkpoint_bytes, memory.high - memory.checkpoint_bytes
        checkpoints = (
            f", plus up to {format_bytes(memory.checkpoint_bytes)} of KV checkpoints" if memory.checkpoint_bytes else ""
        )
        lines.append(
            f"Memory now predicted: {format_bytes(engine_part)} ({format_bytes(low)}-{format_bytes(high)}) "
            f"for weights, KV and compute{checkpoints}; {memory.note}"
        )
    return "\n".join(lines) + "\n"


def _speculative_measured(spec: SpeculativeMeasurement) -> str:
    """What this run measured: 'Speculative decoding on copied text (edit): 1.62x (off 40 tok/s,
    auto 65 tok/s; 120 of 140 draft tokens accepted)', or why it was not measured."""
    off, auto, speedup = spec.off_tps, spec.auto_tps, spec.speedup
    if off is None or auto is None or speedup is None:
        return f"Speculative decoding on copied text (edit): not measured ({spec.skipped or 'no answer to time'})"
    rates = f"off {format_tps(off)} tok/s, auto {format_tps(auto)} tok/s"
    if spec.draft_tokens == 0:
        rates += "; the engine drafted nothing"
    elif spec.draft_tokens is not None and spec.accepted_tokens is not None:
        rates += f"; {spec.accepted_tokens} of {spec.draft_tokens} draft tokens accepted"
    return f"Speculative decoding on copied text (edit): {speedup:.2f}x ({rates})"


def _speculative_stored(outcome: CalibrationOutcome) -> str | None:
    """'Speculative decoding: 1.6x on copied text (edit) with llamacpp on this machine, from 3 runs; ...'."""
    if outcome.stored is None:
        return None
    engine, params = outcome.served.engine, outcome.prediction.arch.params_active_b
    speedups = outcome.stored.speculative_speedups(engine, params)
    speedup = outcome.stored.speculative_speedup(engine, params)
    if speedup is None:
        return None
    plural = "run" if len(speedups) == 1 else "runs"
    return (
        f"Speculative decoding: {speedup:.1f}x on copied text (edit) with {engine} on this machine, "
        f"from {len(speedups)} {plural}; prose gains nothing from it."
    )


def outcome_json(outcome: CalibrationOutcome) -> dict[str, Any]:
    """The machine-readable report (`--json OUT`)."""
    speed, measured, served, fit = outcome.prediction.speed, outcome.measured, outcome.served, outcome.prediction.fit
    calibrated = outcome.calibrated_speed
    return {
        "machine": describe_machine(outcome.machine),
        "serving": {
            "model": served.model_id,
            "engine": served.engine,
            "model_path": str(served.path),
            "format": served.format,
            "context": served.context,
            "parallel": served.parallel,
            "kv_cache_type": served.kv_type,
            "gpu_layers": served.gpu_layers,
            "threads": served.threads,
        },
        "predicted": {
            "decode_tok_s": [speed.decode_low, speed.decode_high],
            "prefill_tok_s": [speed.prefill_low, speed.prefill_high],
            "memory_bytes": outcome.prediction.memory_bytes,
            "verdict": fit.verdict,
            "gpu_layers": fit.gpu_layers,
            "bound": speed.bound,
        },
        "measured": {
            "decode_tok_s": measured.decode_tps,
            "decode_samples": list(measured.decode_samples),
            "prefill_tok_s": measured.prefill_tps,
            "prefill_samples": list(measured.prefill_samples),
            "prefill_uncached_prompt_tokens": list(measured.prefill_prompt_tokens),
            "memory_bytes": measured.memory_bytes,
            "memory_parts": measured.memory_parts,
            "errors": list(measured.errors),
            "load_average_before": measured.load_before,
            "speculative": None if measured.speculative is None else asdict(measured.speculative),
            "speculative_speedup": measured.speculative_speedup,
        },
        "error_percent": {
            "decode": error_percent(speed.decode_mid, measured.decode_tps),
            "prefill": error_percent(speed.prefill_mid, measured.prefill_tps),
            "memory": error_percent(outcome.prediction.memory_bytes, measured.memory_bytes),
        },
        "stored": outcome.run is not None,
        "store": str(outcome.store_path),
        "run": None if outcome.run is None else asdict(outcome.run),
        "calibrated": None
        if calibrated is None
        else {
            "decode_tok_s": [calibrated.decode_low, calibrated.decode_high],
            "prefill_tok_s": [calibrated.prefill_low, calibrated.prefill_high],
            "runs": calibrated.calibrated_runs,
            "note": calibrated.calibration_note,
            "memory_bytes": None if outcome.calibrated_memory is None else outcome.calibrated_memory.needed,
            "speculative_speedup": None
            if outcome.stored is None
            else outcome.stored.speculative_speedup(served.engine, outcome.prediction.arch.params_active_b),
        },
    }


def summary_line(outcome: CalibrationOutcome) -> str:
    """One line for the app: what decode measured against the prediction, and what is stored."""
    speed, measured = outcome.prediction.speed, outcome.measured
    if outcome.run is None or measured.decode_tps is None:
        return "Calibration measured nothing (no request produced tokens), so nothing was stored."
    error = _error_text(speed.decode_mid, measured.decode_tps)
    now = f"; now predicted {outcome.calibrated_speed.decode_range()} tok/s" if outcome.calibrated_speed else ""
    return (
        f"Calibrated: decode measured {format_tps(measured.decode_tps)} tok/s per stream against "
        f"{speed.decode_range()} predicted ({error}){now}. Stored for this machine."
    )
