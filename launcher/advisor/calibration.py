"""Per-machine calibration of the advisor's predictions, from runs measured on this machine.

The speed model (`launcher.advisor.speed`) cannot know a machine's real efficiency, so its
ranges are wide (~3x). `launcher bench --calibrate` measures a served model and records, for
each of decode, prefill and memory, the ratio measured / predicted. A later prediction for
the same machine, engine and model size class is the model's prediction times the median of
those ratios, with a range only as wide as the ratios' spread justifies.

This module is pure (no files): the runs, the machine fingerprint, the size classes, the
lookup and the arithmetic. `launcher.advisor.calibration_store` keeps the runs on disk.
"""

from __future__ import annotations

import hashlib
import json
import statistics
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Literal

from launcher.advisor.fit import FitResult
from launcher.core.units import GIB
from launcher.hardware.machine import Machine

Metric = Literal["decode", "prefill", "memory"]

ONE_RUN_SPREAD = 0.20  # one run says little about run-to-run noise: +-20% around the centre
MIN_SPREAD = 0.10  # even identical runs vary by more than this on another day (thermal, background load)
MAX_SPREAD = 0.25  # wider than this and the calibration would say little more than the model
RUNS_KEPT = 10  # per (machine, engine, size class): old runs age out as drivers and engines change

SIZE_CLASSES: tuple[tuple[float, str], ...] = (
    (1, "<1B"),
    (4, "1-4B"),
    (10, "4-10B"),
    (20, "10-20B"),
    (40, "20-40B"),
    (float("inf"), "40B+"),
)
"""Upper bounds (billions of active parameters, exclusive) and labels. Efficiency depends on size:
small models are overhead- and compute-bound, big ones bandwidth-bound, so ratios are kept per class."""
SIZE_CLASS_NAMES = tuple(name for _, name in SIZE_CLASSES)


def size_class(params_active_b: float) -> str:
    """The size class of a model with this many active parameters (billions): '<1B', '4-10B', ..."""
    return next(name for bound, name in SIZE_CLASSES if params_active_b < bound)


def machine_facts(machine: Machine) -> dict[str, object]:
    """The stable facts that identify a machine's speed: not free memory, load or driver versions."""
    return {
        "cpu": machine.cpu.brand,
        "arch": machine.cpu.arch,
        "cores": machine.cpu.physical_cores,
        "ram_gib": round(machine.memory.total / GIB),
        "gpus": sorted(f"{g.name} {round(g.memory_total / GIB)} GiB" for g in machine.gpus),
        "apple": machine.apple.chip if machine.apple else None,
    }


def machine_fingerprint(machine: Machine) -> str:
    """A short stable id of the machine's hardware (a hash of `machine_facts`)."""
    canonical = json.dumps(machine_facts(machine), sort_keys=True)
    return hashlib.sha256(canonical.encode()).hexdigest()[:16]


def describe_machine(machine: Machine) -> str:
    """'Intel Core i7-1165G7, 4 cores, 16 GiB RAM, NVIDIA GeForce RTX 4090 24 GiB' (for people reading the file)."""
    cpu = machine.cpu
    parts = [f"{cpu.brand}, {cpu.physical_cores} cores, {round(machine.memory.total / GIB)} GiB RAM"]
    parts += [f"{g.name} {round(g.memory_total / GIB)} GiB" for g in machine.gpus]
    return ", ".join(parts)


@dataclass(frozen=True)
class CalibrationRun:
    """One measured run: what was served, and measured / predicted for each metric it measured."""

    when: str  # ISO 8601, UTC
    engine: str
    size_class: str
    model: str  # file name of the served model
    context: int
    parallel: int
    kv_type: str
    decode_ratio: float | None
    prefill_ratio: float | None
    memory_ratio: float | None
    # What was measured, for showing beside a later prediction of the same model (None in runs
    # stored before these were kept).
    decode_tps: float | None = None
    prefill_tps: float | None = None
    memory_bytes: int | None = None
    # Decode tok/s with speculative decoding on ("auto") / off, on text the answer copies from the prompt
    # (an edit); None: not measured (runs stored before it was, a server without speculation).
    speculative_speedup: float | None = None

    def ratio(self, metric: Metric) -> float | None:
        """measured / predicted for `metric`, None when that run could not measure it."""
        return {"decode": self.decode_ratio, "prefill": self.prefill_ratio, "memory": self.memory_ratio}[metric]


@dataclass(frozen=True)
class Correction:
    """What the runs say about one metric: multiply the prediction by `factor`, give or take `spread`."""

    factor: float  # median measured / predicted
    spread: float  # half-width of the range, as a fraction of the centre
    runs: int

    def range_around(self, predicted: float) -> tuple[float, float]:
        """(low, high) around the calibrated centre `predicted * factor`."""
        centre = predicted * self.factor
        return centre * (1 - self.spread), centre * (1 + self.spread)


def correction(ratios: Sequence[float], *, other_sizes: bool = False) -> Correction | None:
    """The median ratio and a spread the runs justify (None without runs).

    One run: +-20%. More: twice the median absolute deviation (robust to one odd run), within
    +-10%..+-25%. Runs of other model sizes transfer less well: never narrower than one run's +-20%.
    """
    if not ratios:
        return None
    factor = statistics.median(ratios)
    if len(ratios) == 1:
        spread = ONE_RUN_SPREAD
    else:
        mad = statistics.median(abs(r - factor) for r in ratios)
        spread = min(MAX_SPREAD, max(MIN_SPREAD, 2 * mad / factor))
    if other_sizes:
        spread = max(spread, ONE_RUN_SPREAD)
    return Correction(factor, spread, len(ratios))


@dataclass(frozen=True)
class Calibration:
    """The runs that apply to one prediction (this machine, this engine, this size class)."""

    runs: tuple[CalibrationRun, ...]
    other_sizes: bool = False  # no run of this size class: runs of other sizes stand in

    def correction(self, metric: Metric) -> Correction | None:
        """The correction for `metric` from the runs that measured it."""
        ratios = [r for run in self.runs if (r := run.ratio(metric)) is not None]
        return correction(ratios, other_sizes=self.other_sizes)

    def speculative_speedup(self) -> float | None:
        """The median speed-up speculative decoding gave these runs on copied text (None: not measured)."""
        measured = [run.speculative_speedup for run in self.runs if run.speculative_speedup is not None]
        return statistics.median(measured) if measured else None

    def note(self, runs: int) -> str:
        """'calibrated from 3 runs on this machine' (or '... of other model sizes ...')."""
        plural = "run" if runs == 1 else "runs"
        sizes = " of other model sizes" if self.other_sizes else ""
        return f"calibrated from {runs} {plural}{sizes} on this machine"


@dataclass(frozen=True)
class MachineCalibration:
    """Every stored run of one machine, and the lookup of those that apply to a prediction."""

    fingerprint: str
    runs: tuple[CalibrationRun, ...] = ()

    def for_model(self, engine: str, params_active_b: float) -> Calibration | None:
        """Runs of this engine and size class; else this engine's runs of other sizes; else None."""
        same_engine = [r for r in self.runs if r.engine == engine]
        wanted = size_class(params_active_b)
        same_size = [r for r in same_engine if r.size_class == wanted]
        if same_size:
            return Calibration(tuple(same_size[-RUNS_KEPT:]))
        if same_engine:
            return Calibration(tuple(same_engine[-RUNS_KEPT:]), other_sizes=True)
        return None

    def speculative_speedups(self, engine: str, params_active_b: float | None = None) -> tuple[float, ...]:
        """The speed-ups speculative decoding gave `engine` on copied text in this machine's runs,
        oldest first: those of the model's size class when given and measured, else all of the engine's."""
        measured = [r for r in self.runs if r.engine == engine and r.speculative_speedup is not None]
        if params_active_b is not None:
            wanted = size_class(params_active_b)
            measured = [r for r in measured if r.size_class == wanted] or measured
        return tuple(r.speculative_speedup for r in measured[-RUNS_KEPT:] if r.speculative_speedup is not None)

    def speculative_speedup(self, engine: str, params_active_b: float | None = None) -> float | None:
        """How much faster `engine` decodes text the answer copies from the prompt (an agent rewriting a
        file with a small change) with speculative decoding on than off: the median of this machine's
        runs (`speculative_speedups`), None without any. Prose gains nothing from it."""
        speedups = self.speculative_speedups(engine, params_active_b)
        return statistics.median(speedups) if speedups else None


@dataclass(frozen=True)
class MemoryEstimate:
    """The bytes a load needs, calibrated: `needed` low..high, and how many runs said so."""

    needed: int  # the calibrated centre
    low: int
    high: int
    runs: int
    note: str
    checkpoint_bytes: int = 0  # of each figure: the sliding-window checkpoint bound, not calibrated


def measurable_bytes(fit: FitResult) -> int:
    """What an engine's own memory figures (weights + KV + compute) are compared with: the prediction
    without the sliding-window checkpoints, which are a bound on what may be held, not an allocation."""
    return fit.needed_bytes - fit.checkpoint_bytes


def calibrated_memory(fit: FitResult, calibration: Calibration | None) -> MemoryEstimate | None:
    """The fit's needed bytes corrected by the memory runs (the checkpoint bound is added back as is).

    This is a figure to show next to the fit, not a new verdict: fit badges stay the fit's own.
    """
    fix = calibration.correction("memory") if calibration else None
    if calibration is None or fix is None:
        return None
    low, high = fix.range_around(measurable_bytes(fit))
    centre = measurable_bytes(fit) * fix.factor
    extra = fit.checkpoint_bytes
    note = calibration.note(fix.runs)
    return MemoryEstimate(int(centre) + extra, int(low) + extra, int(high) + extra, fix.runs, note, extra)
