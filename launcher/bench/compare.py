"""Side-by-side comparison math for scripts/bench-compare: ratios, targets, the summary table.

The script runs the contenders in interleaved rounds (in-process llama-cpp-python, then our
server, then llama_cpp.server, then the native llama.cpp `llama-server` when asked for, again
and again), because on a shared machine the background load drifts over minutes: each round's
ratios compare numbers taken moments apart, and the verdict uses the median ratio over rounds.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class Baseline:
    """Single-stream numbers of llama-cpp-python driven in-process (no HTTP, no server)."""

    decode_tps: float  # median over requests of (tokens - 1) / (last token - first token)
    ttft: float  # median seconds to the first token
    tokens: float  # mean completion tokens
    tokens_per_word: float  # the model tokenizer's tokens per filler word, shared with both servers


@dataclass(frozen=True)
class Round:
    """One round: the baseline and the servers' `build_report` outputs (native: None when it did not run)."""

    baseline: Baseline
    ours: dict[str, Any]
    theirs: dict[str, Any]
    native: dict[str, Any] | None = None


def has_native(rounds: Sequence[Round]) -> bool:
    """True when the native llama.cpp server ran in any round."""
    return any(r.native is not None for r in rounds)


@dataclass(frozen=True)
class Target:
    """One target of the issue, evaluated on the median over rounds."""

    name: str
    goal: str
    values: tuple[float | None, ...]  # one per round
    threshold: float
    higher_is_better: bool
    unit: str  # "x", "s" or "%"

    @property
    def median(self) -> float | None:
        """The median of the rounds that measured it."""
        measured = [v for v in self.values if v is not None and math.isfinite(v)]
        return statistics.median(measured) if measured else None

    @property
    def passed(self) -> bool:
        """PASS when the median meets the threshold."""
        value = self.median
        if value is None:
            return False
        return value >= self.threshold if self.higher_is_better else value <= self.threshold

    def show(self, value: float | None) -> str:
        """A value in the target's unit."""
        if value is None:
            return "-"
        if self.unit == "%":
            return f"{value:.0%}"
        return f"{value:.2f} s" if self.unit == "s" else f"{value:.2f}x"


def phase(report: dict[str, Any], workload: str, concurrency: int) -> dict[str, Any] | None:
    """The summary of one workload phase at a concurrency level (None when it did not run)."""
    for entry in report["workloads"]:
        if entry["name"] == workload:
            for summary in entry["phases"]:
                if summary["concurrency"] == concurrency:
                    return dict(summary)
    return None


def get(summary: dict[str, Any] | None, *keys: str) -> float | None:
    """A nested number from a phase summary, None when missing or when the phase had errors."""
    if summary is None or summary.get("errors"):
        return None
    value: Any = summary
    for key in keys:
        if not isinstance(value, dict):
            return None
        value = value.get(key)
    return float(value) if isinstance(value, int | float) else None


def ratio(numerator: float | None, denominator: float | None) -> float | None:
    """numerator / denominator, None when either is missing or the denominator is zero."""
    if numerator is None or not denominator:
        return None
    return numerator / denominator


def _prefix_ratio(report: dict[str, Any]) -> float | None:
    prefix = next((w for w in report["workloads"] if w["name"] == "prefix"), None)
    value = prefix.get("prefix_ttft_ratio_max") if prefix else None
    return float(value) if isinstance(value, int | float) else None


def targets(rounds: Sequence[Round]) -> list[Target]:
    """The issue's five targets on the starter model, each with its per-round values.

    When the native llama.cpp server ran, one more: the issue asks our engine to do "at least as
    well as" its continuous batching at 4 streams.
    """

    def per_round(measure: Callable[[Round], float | None]) -> tuple[float | None, ...]:
        return tuple(measure(r) for r in rounds)

    def decode_vs_inprocess(r: Round) -> float | None:
        return ratio(get(phase(r.ours, "sweep", 1), "decode_tps_per_stream", "p50"), r.baseline.decode_tps)

    def aggregate_vs_own_single(r: Round) -> float | None:
        return ratio(get(phase(r.ours, "sweep", 4), "aggregate_tps"), get(phase(r.ours, "sweep", 1), "aggregate_tps"))

    def aggregate_vs_theirs(r: Round) -> float | None:
        return ratio(get(phase(r.ours, "sweep", 4), "aggregate_tps"), get(phase(r.theirs, "sweep", 4), "aggregate_tps"))

    def aggregate_vs_native(r: Round) -> float | None:
        if r.native is None:
            return None
        return ratio(get(phase(r.ours, "sweep", 4), "aggregate_tps"), get(phase(r.native, "sweep", 4), "aggregate_tps"))

    issue_targets = [
        Target(
            "single-stream decode vs in-process llama-cpp-python",
            ">= 0.97x",
            per_round(decode_vs_inprocess),
            0.97,
            True,
            "x",
        ),
        Target(
            "aggregate tok/s, 4 streams vs our 1 stream",
            ">= 1.9x",
            per_round(aggregate_vs_own_single),
            1.9,
            True,
            "x",
        ),
        Target(
            "aggregate tok/s, 4 streams vs llama_cpp.server's",
            ">= 3x",
            per_round(aggregate_vs_theirs),
            3.0,
            True,
            "x",
        ),
        Target(
            "TTFT p95 at 4 concurrent streams",
            "<= 0.5 s",
            per_round(lambda r: get(phase(r.ours, "sweep", 4), "ttft", "p95")),
            0.5,
            False,
            "s",
        ),
        Target(
            "warm / cold TTFT, shared ~2,000-token prefix",
            "<= 25%",
            per_round(lambda r: _prefix_ratio(r.ours)),
            0.25,
            False,
            "%",
        ),
    ]
    if has_native(rounds):
        issue_targets.append(
            Target(
                "aggregate tok/s, 4 streams vs native llama-server's",
                ">= 1x",
                per_round(aggregate_vs_native),
                1.0,
                True,
                "x",
            )
        )
    return issue_targets


def _ours(r: Round) -> dict[str, Any] | None:
    return r.ours


def _theirs(r: Round) -> dict[str, Any] | None:
    return r.theirs


def _native(r: Round) -> dict[str, Any] | None:
    return r.native


_SERVER_COLUMNS: tuple[tuple[str, Callable[[Round], dict[str, Any] | None]], ...] = (
    ("launcher serve", _ours),
    ("llama_cpp.server", _theirs),
)
_NATIVE_COLUMN = ("llama-server (native)", _native)


def _median(values: Sequence[float | None]) -> float | None:
    measured = [v for v in values if v is not None and math.isfinite(v)]
    return statistics.median(measured) if measured else None


def _fmt(value: float | None, scale: float = 1.0, digits: int = 1) -> str:
    return "-" if value is None else f"{value * scale:.{digits}f}"


def measures_table(rounds: Sequence[Round]) -> str:
    """Markdown: median over rounds of the raw numbers, contenders side by side.

    The native llama.cpp server gets a column only when it ran.
    """
    columns = [*_SERVER_COLUMNS, _NATIVE_COLUMN] if has_native(rounds) else list(_SERVER_COLUMNS)
    # Per server, its reports of the rounds it ran in.
    reports = [[report for r in rounds if (report := pick(r)) is not None] for _, pick in columns]

    def medians(concurrency: int, *keys: str, scale: float = 1.0, digits: int = 1) -> list[str]:
        return [
            _fmt(_median([get(phase(report, "sweep", concurrency), *keys) for report in server]), scale, digits)
            for server in reports
        ]

    def row(name: str, baseline: str, cells: Sequence[object]) -> str:
        return f"| {name} | {baseline} | " + " | ".join(str(cell) for cell in cells) + " |"

    base_decode = _median([r.baseline.decode_tps for r in rounds])
    base_ttft = _median([r.baseline.ttft for r in rounds])
    lines = [
        row("median over rounds", "in-process llama-cpp-python", [name for name, _ in columns]),
        "|---|---|" + "---|" * len(columns),
        row("decode tok/s, 1 stream", _fmt(base_decode), medians(1, "decode_tps_per_stream", "p50")),
        row("TTFT p50, 1 stream (ms)", _fmt(base_ttft, 1000, 0), medians(1, "ttft", "p50", scale=1000, digits=0)),
    ]
    for concurrency in (1, 4):
        lines.append(row(f"aggregate tok/s, {concurrency} streams", "-", medians(concurrency, "aggregate_tps")))
        lines.append(
            row(f"TTFT p95, {concurrency} streams (ms)", "-", medians(concurrency, "ttft", "p95", scale=1000, digits=0))
        )
        lines.append(
            row(
                f"output tokens per request, {concurrency} streams",
                "-",
                medians(concurrency, "completion_tokens", "mean", digits=0),
            )
        )
    prefix_cells = []
    for server in reports:
        pairs = [
            p for report in server for w in report["workloads"] if w["name"] == "prefix" for p in w["prefix_pairs"]
        ]
        cold = _median([p["cold_ttft"] for p in pairs])
        warm = _median([p["warm_ttft"] for p in pairs])
        prefix_cells.append(f"{_fmt(cold, 1000, 0)} / {_fmt(warm, 1000, 0)}")
    lines.append(row("shared ~2,000-token prefix: cold / warm TTFT (ms)", "-", prefix_cells))
    peaks = [max((report["peak_memory"]["bytes"] or 0 for report in server), default=0) for server in reports]
    lines.append(row("peak RSS (MiB)", "-", [f"{peak / 2**20:.0f}" for peak in peaks]))
    errors = [
        sum(p["errors"] for report in server for w in report["workloads"] for p in w["phases"]) for server in reports
    ]
    lines.append(row("failed requests", "-", errors))
    return "\n".join(lines) + "\n"


def targets_table(rounds: Sequence[Round]) -> str:
    """Markdown: each target's per-round values, median and PASS/FAIL."""
    header = " | ".join(f"round {i + 1}" for i in range(len(rounds)))
    lines = [
        f"| target | goal | {header} | median | result |",
        "|---|---|" + "---|" * len(rounds) + "---|---|",
    ]
    for target in targets(rounds):
        values = " | ".join(target.show(v) for v in target.values)
        verdict = "PASS" if target.passed else "FAIL"
        lines.append(f"| {target.name} | {target.goal} | {values} | {target.show(target.median)} | {verdict} |")
    return "\n".join(lines) + "\n"


def load_line(rounds: Sequence[Round]) -> str:
    """How loaded the machine was while our server ran, and how much CPU it got."""
    loads = [r.ours["host_load"]["load_average_start"] for r in rounds] + [
        r.theirs["host_load"]["load_average_end"] for r in rounds
    ]
    busy = [r.ours["host_load"]["server_cores_busy"] for r in rounds]
    measured_loads = [x for x in loads if x is not None]
    measured_busy = [x for x in busy if x is not None]
    text = "host load average (1 min) during the rounds: "
    text += f"{min(measured_loads):.1f}-{max(measured_loads):.1f}" if measured_loads else "unknown"
    if measured_busy:
        text += f"; launcher serve kept {statistics.median(measured_busy):.2f} cores busy on average (median)"
    return text
