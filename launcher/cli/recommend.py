"""`launcher recommend [MODEL] [--context N] [--users N] [--json]`: the advisor from the command line."""

from __future__ import annotations

import argparse
import json
from typing import Any

from launcher.advisor.options import Option
from launcher.advisor.recommend import Recommendation, recommend
from launcher.core.units import format_bytes
from launcher.hardware.machine import Machine


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """Flags for `launcher recommend`."""
    parser.add_argument("model", nargs="?", help="catalog id (omit for a table of every catalog model)")
    parser.add_argument("--context", type=int, help="context length in tokens (default: largest that fits, <= 32k)")
    parser.add_argument("--users", type=int, default=1, help="concurrent users/sequences (default 1)")
    parser.add_argument("--json", action="store_true", help="machine-readable output")
    parser.add_argument("--machine", metavar="NAME", help="advise for a recorded machine instead of this one")


def _machine(name: str | None) -> tuple[Machine, dict[str, str | None] | None]:
    if name:
        from launcher.hardware.recorded import load_recorded

        return load_recorded(name), None  # another machine: don't judge by what is installed here
    from launcher.engines.registry import status_map
    from launcher.hardware.probe import probe_machine

    machine = probe_machine()
    return machine, status_map(machine)


def option_json(option: Option) -> dict[str, Any]:
    """An option as plain JSON."""
    fit = option.fit
    return {
        "engine": option.engine,
        "format": option.format,
        "quant": option.quant,
        "bits_per_weight": option.bits_per_weight,
        "source": option.source,
        "weights_bytes": option.weights_bytes,
        "launchable": option.launchable,
        "unavailable_reason": option.unavailable_reason,
        "fit": {
            "verdict": fit.verdict,
            "label": fit.label,
            "gpu_layers": fit.gpu_layers,
            "total_layers": fit.total_layers,
            "context": fit.context,
            "parallel": fit.parallel,
            "kv_type": fit.kv_type,
            "weights_bytes": fit.weights_bytes,
            "kv_bytes": fit.kv_bytes,
            "overhead_bytes": fit.overhead_bytes,
            "checkpoint_bytes": fit.checkpoint_bytes,
            "devices": [
                {
                    "device": d.device,
                    "weights": d.weights,
                    "kv_cache": d.kv_cache,
                    "overhead": d.overhead,
                    "checkpoints": d.checkpoints,
                    "free": d.free,
                    "total": d.total,
                    "fits": d.fits,
                }
                for d in fit.devices
            ],
            "advice": list(fit.advice),
            # The draft model (speculative decoding) proposed beside it, not counted in the bytes above.
            "draft": None
            if fit.draft is None
            else {
                "name": fit.draft.name,
                "device": fit.draft.device,
                "weights": fit.draft.weights,
                "kv_cache": fit.draft.kv_cache,
                "overhead": fit.draft.overhead,
                "checkpoints": fit.draft.checkpoints,
                "used": fit.draft.used,
                "room": fit.draft.room,
            },
        },
        "speed": {
            "decode_tok_s": [round(option.speed.decode_low, 1), round(option.speed.decode_high, 1)],
            "prefill_tok_s": [round(option.speed.prefill_low, 1), round(option.speed.prefill_high, 1)],
            "bound": option.speed.bound,
            "calibrated_runs": option.speed.calibrated_runs,
        },
        # The fit's needed bytes as this machine's calibration runs correct them (None: never calibrated).
        "memory_calibrated": None
        if option.memory is None
        else {
            "needed_bytes": option.memory.needed,
            "range_bytes": [option.memory.low, option.memory.high],
            "runs": option.memory.runs,
        },
    }


def recommendation_json(rec: Recommendation) -> dict[str, Any]:
    """A recommendation as plain JSON."""
    return {
        "model": rec.model_id,
        "name": rec.model_name,
        "context": rec.context,
        "users": rec.users,
        "kv_type": rec.kv_type,
        "fits": rec.fits,
        "choice": option_json(rec.choice),
        "reasons": list(rec.reasons),
        "alternatives": [option_json(o) for o in rec.alternatives],
        "draft": None
        if rec.draft is None
        else {"model": rec.draft.model.id, "quant": rec.draft.quant, "source": rec.draft.source},
    }


def _calibrated_memory_lines(option: Option) -> list[str]:
    """The memory breakdown's last line when this machine's runs correct the fit's total."""
    if option.memory is None:
        return []
    return [f"    corrected by runs on this machine: needs {format_bytes(option.memory.needed)} ({option.memory.note})"]


def format_recommendation(rec: Recommendation) -> str:
    """Human-readable recommendation."""
    choice = rec.choice
    lines = [
        f"{rec.model_name}: {choice.label}  [{choice.fit.label}]",
        f"  weights from {choice.source}",
        f"  context {rec.context} tokens x {rec.users} user(s), KV cache {rec.kv_type}; {choice.speed.summary()}",
        "  memory:",
        *("    " + line for line in choice.fit.breakdown().splitlines()),
        *_calibrated_memory_lines(choice),
        "  why:",
        *(f"    - {reason}" for reason in rec.reasons),
    ]
    if rec.alternatives:
        lines.append("  alternatives:")
        for alt in rec.alternatives:
            extra = f"; {alt.unavailable_reason}" if alt.unavailable_reason else ""
            extra += "; hand-off, not run by the launcher" if not alt.launchable else ""
            lines.append(
                f"    - {alt.label}: {alt.fit.label}, {format_bytes(alt.fit.needed_bytes)}, "
                f"decode {alt.speed.decode_range()} tok/s{extra}"
            )
    return "\n".join(lines)


def run(args: argparse.Namespace) -> int:
    """Print recommendations for one model or the whole catalog."""
    from launcher.catalog.catalog import default_catalog, find

    machine, status = _machine(args.machine)
    models = [find(args.model)] if args.model else default_catalog().models
    recs = [recommend(machine, m, context=args.context, users=args.users, status=status) for m in models]
    if args.json:
        payload: Any = recommendation_json(recs[0]) if args.model else [recommendation_json(r) for r in recs]
        print(json.dumps(payload, indent=2))
        return 0
    if args.model:
        print(format_recommendation(recs[0]))
        return 0 if recs[0].fits else 1
    print(f"{'model':<28} {'engine + format + quant':<34} {'verdict':<34} {'decode tok/s':>12}")
    for rec in recs:
        c = rec.choice
        print(f"{rec.model_id:<28} {c.label:<34} {c.fit.label:<34} {c.speed.decode_range():>12}")
    print("\n`launcher recommend MODEL` explains one model: memory breakdown, reasons, alternatives.")
    return 0
