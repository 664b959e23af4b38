"""How well the advisor's predictions hold on this machine, before and after one calibration run.

For each model (the starter, gemma-3-270m Q4_K_M, and the two tiny test GGUFs: a llama and a
sliding-window gemma3) it starts `launcher serve` at 4k/32k context x 1/4 parallel and measures
each with the calibration workload (`launcher bench --calibrate`'s: single-stream decode and
uncached prefill, and the engine's own memory figures). It compares them with:

- the advisor's prediction for exactly those settings, uncalibrated ("before");
- the same prediction after one calibration run of that model at 4k x 1 ("after").

Each model gets its own empty calibration store: the tiny models and the starter share the "<1B"
size class, and a 30k-parameter toy says nothing about a real model's speed.

    scripts/bench-predictions [--threads 2] [--configs 4096x1,4096x4,32768x1,32768x4] [--markdown OUT]

Not a test: it prints a Markdown table (and writes --json). Every server it starts is stopped.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import sys
import tempfile
from pathlib import Path
from typing import Any

from launcher.bench.calibrate import ServedModel, calibrate, fetch_served, predict_served
from launcher.bench.calibrate_measure import CalibrationWorkload, measure
from launcher.bench.runner import make_client
from launcher.bench.servers import launcher_serve
from launcher.hardware.probe import probe_machine


def models(workdir: Path) -> dict[str, Path]:
    """The three GGUFs: the starter (assembled once) and the tiny test models, written here."""
    from launcher.catalog.resolve import resolve_model
    from tests.fixtures.models import write_tiny_gguf

    return {
        "gemma-3-270m Q4_K_M (starter)": Path(resolve_model("").path),
        "tiny llama (test GGUF)": write_tiny_gguf(workdir / "tiny-llama.gguf"),
        "tiny gemma3 SWA (test GGUF)": write_tiny_gguf(workdir / "tiny-swa.gguf", sliding_window=32),
    }


async def measure_served(base_url: str) -> tuple[ServedModel, Any]:
    async with make_client(base_url, None, 600) as client:
        served = await fetch_served(client, base_url)
        return served, await measure(client, base_url, served.model_id or None, CalibrationWorkload())


def error(predicted: float, measured: float | None) -> float | None:
    return None if not measured or not predicted else measured / predicted - 1


def row_for(label: str, config: str, served: ServedModel, measured: Any, machine: Any) -> dict[str, Any]:
    before = predict_served(machine, served)
    after = predict_served(machine, served, calibration="stored")
    speed = after.speed
    half_width = (speed.decode_high - speed.decode_low) / (speed.decode_high + speed.decode_low)
    return {
        "model": label,
        "config": config,
        "memory_predicted": before.memory_bytes,
        "memory_engine": measured.memory_bytes,
        "memory_error": error(before.memory_bytes, measured.memory_bytes),
        "decode_measured": measured.decode_tps,
        "decode_before": [before.speed.decode_low, before.speed.decode_high],
        "decode_before_error": error(before.speed.decode_mid, measured.decode_tps),
        "decode_after": [speed.decode_low, speed.decode_high],
        "decode_after_error": error(speed.decode_mid, measured.decode_tps),
        "decode_after_half_width": half_width,
        "calibrated_runs": speed.calibrated_runs,
    }


def serve_args(model: Path, context: int, parallel: int, threads: int) -> list[str]:
    sizes = ["--context", str(context), "--parallel", str(parallel), "--threads", str(threads)]
    return [str(model), "--port", "0", *sizes, "--log-requests", "off"]


def run_model(label: str, path: Path, configs: list[tuple[int, int]], args: argparse.Namespace) -> list[dict[str, Any]]:
    os.environ["LAUNCHER_HOME"] = tempfile.mkdtemp(prefix="bench-predictions-home-")  # an empty store per model
    machine = probe_machine()
    with launcher_serve(serve_args(path, 4096, 1, args.threads)) as server:
        outcome = asyncio.run(calibrate(server.base_url, machine))
        print(f"{label}: calibrated at 4096 x 1, decode {outcome.measured.decode_tps} tok/s", file=sys.stderr)
    rows = []
    for context, parallel in configs:
        with launcher_serve(serve_args(path, context, parallel, args.threads)) as server:
            served, measured = asyncio.run(measure_served(server.base_url))
        rows.append(row_for(label, f"{context} x {parallel}", served, measured, machine))
        print(f"  {context} x {parallel}: {rows[-1]}", file=sys.stderr)
    return rows


def percent(value: float | None) -> str:
    return "–" if value is None else f"{value:+.0%}"


def markdown(rows: list[dict[str, Any]]) -> str:
    lines = [
        "| model | context x parallel | memory: predicted / engine | error | decode measured "
        "| before: predicted | error | after 1 run: predicted | error | range |",
        "|---|---|---|---|---|---|---|---|---|---|",
    ]
    mib = 1024 * 1024
    for row in rows:
        engine = row["memory_engine"]
        memory = f"{row['memory_predicted'] / mib:.1f} / {engine / mib:.1f} MiB" if engine else "–"
        low, high = row["decode_before"]
        after_low, after_high = row["decode_after"]
        lines.append(
            f"| {row['model']} | {row['config']} | {memory} | {percent(row['memory_error'])} "
            f"| {row['decode_measured']:.1f} tok/s | {low:.0f}–{high:.0f} | {percent(row['decode_before_error'])} "
            f"| {after_low:.0f}–{after_high:.0f} | {percent(row['decode_after_error'])} "
            f"| ±{row['decode_after_half_width']:.0%} |"
        )
    return "\n".join(lines)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--configs", default="4096x1,4096x4,32768x1,32768x4", help="CONTEXTxPARALLEL, comma-separated")
    parser.add_argument("--json", type=Path, default=Path("bench-predictions.json"))
    parser.add_argument("--markdown", type=Path, help="also write the table here")
    args = parser.parse_args()
    configs = [tuple(int(n) for n in spec.lower().split("x")) for spec in args.configs.split(",")]
    workdir = Path(tempfile.mkdtemp(prefix="bench-predictions-"))
    rows: list[dict[str, Any]] = []
    for label, path in models(workdir).items():
        rows += run_model(label, path, configs, args)  # type: ignore[arg-type]
    table = markdown(rows)
    print(table)
    args.json.write_text(json.dumps(rows, indent=2))
    if args.markdown:
        args.markdown.write_text(table + "\n")
    return 0
