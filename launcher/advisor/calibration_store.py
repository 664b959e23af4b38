"""The calibration runs on disk: `calibration.json` in the launcher's data folder.

    {"format": "launcher-calibration", "version": 1,
     "machines": {"<fingerprint>": {"machine": "Intel ..., 4 cores, 16 GiB RAM",
                                    "runs": [{"when": ..., "engine": "llamacpp", "size_class": "<1B", ...}]}}}

The advisor reads this on every prediction, so a load is cached until the file changes. A file
that is not one we wrote (corrupt JSON, another format or version, any invalid entry) is
ignored as a whole with one warning: a prediction must never be skewed by numbers we cannot
trust, nor crash the app. The next recorded run replaces such a file. Writes go through a
temp file and `os.replace`, so a crash mid-write leaves the old file.
"""

from __future__ import annotations

import json
import logging
import math
import os
import re
import tempfile
import threading
from collections.abc import Mapping
from dataclasses import asdict, dataclass, fields
from pathlib import Path
from typing import Any, Literal

from launcher.advisor.calibration import (
    RUNS_KEPT,
    SIZE_CLASS_NAMES,
    CalibrationRun,
    MachineCalibration,
    MemoryEstimate,
    calibrated_memory,
    describe_machine,
    machine_fingerprint,
)
from launcher.advisor.fit import FitResult
from launcher.core.model_types import Architecture
from launcher.core.paths import data_dir
from launcher.hardware.machine import Machine

log = logging.getLogger(__name__)

FILE_FORMAT = "launcher-calibration"
FILE_VERSION = 1
_FINGERPRINT = re.compile(r"[0-9a-f]{16}")
_RATIOS = ("decode_ratio", "prefill_ratio", "memory_ratio")
# Optional, each a positive number or null: runs stored before they were kept lack them.
_MEASURED = ("decode_tps", "prefill_tps", "memory_bytes", "speculative_speedup")
_OMITTED_WHEN_NONE = ("speculative_speedup",)  # left out unmeasured: older launchers reject unknown keys

CalibrationChoice = MachineCalibration | Literal["stored"] | None
"""What a prediction is calibrated with: "stored" (this machine's runs from the data folder),
explicit runs, or None for the model's raw prediction (tests, and the bench's own reference)."""


@dataclass(frozen=True)
class MachineRecord:
    """One machine's entry in the file."""

    description: str
    runs: tuple[CalibrationRun, ...]


class InvalidCalibrationFile(ValueError):
    """The file is not a calibration file this version wrote."""


def calibration_file() -> Path:
    """Where the runs are kept (`LAUNCHER_HOME` moves it, as it does every launcher folder)."""
    return data_dir() / "calibration.json"


def _run_from_json(item: object) -> CalibrationRun:
    known = {f.name for f in fields(CalibrationRun)}
    if not isinstance(item, dict) or not known - set(_MEASURED) <= set(item) <= known:
        raise InvalidCalibrationFile(f"a run has other fields than a calibration run: {str(item)[:120]}")
    for key in _MEASURED:
        value = item.get(key)
        if value is not None and (type(value) not in (int, float) or not math.isfinite(value) or value <= 0):
            raise InvalidCalibrationFile(f"{key} must be a positive number, got {value!r}")
    texts = ("when", "engine", "size_class", "model", "kv_type")
    if not all(isinstance(item[k], str) and item[k] for k in texts):
        raise InvalidCalibrationFile(f"a run has an empty or non-text field: {str(item)[:120]}")
    if item["size_class"] not in SIZE_CLASS_NAMES:
        raise InvalidCalibrationFile(f"unknown size class {item['size_class']!r}")
    for key in ("context", "parallel"):
        if type(item[key]) is not int or item[key] < 1:
            raise InvalidCalibrationFile(f"{key} must be a positive integer, got {item[key]!r}")
    ratios = [item[k] for k in _RATIOS]
    for ratio in ratios:
        # A ratio is measured / predicted: positive and finite, or absent when that metric was not measured.
        if ratio is not None and (type(ratio) not in (int, float) or not math.isfinite(ratio) or ratio <= 0):
            raise InvalidCalibrationFile(f"a ratio must be a positive number, got {ratio!r}")
    if all(r is None for r in ratios):
        raise InvalidCalibrationFile("a run measured nothing")
    decode, prefill, memory = (None if r is None else float(r) for r in ratios)
    return CalibrationRun(
        when=item["when"],
        engine=item["engine"],
        size_class=item["size_class"],
        model=item["model"],
        context=item["context"],
        parallel=item["parallel"],
        kv_type=item["kv_type"],
        decode_ratio=decode,
        prefill_ratio=prefill,
        memory_ratio=memory,
        decode_tps=_number(item.get("decode_tps")),
        prefill_tps=_number(item.get("prefill_tps")),
        memory_bytes=None if item.get("memory_bytes") is None else int(item["memory_bytes"]),
        speculative_speedup=_number(item.get("speculative_speedup")),
    )


def _run_to_json(run: CalibrationRun) -> dict[str, Any]:
    """The run as stored: every field, but those added later only when measured, so that a file whose
    runs never measured them stays readable by a launcher from before them."""
    item = asdict(run)
    for key in _OMITTED_WHEN_NONE:
        if item[key] is None:
            del item[key]
    return item


def _number(value: object) -> float | None:
    return None if value is None else float(value)  # type: ignore[arg-type]


def measured_runs(machine: Machine, model_file: str, path: Path | None = None) -> tuple[CalibrationRun, ...]:
    """This machine's runs that measured the model file `model_file`, oldest first."""
    record = load_calibrations(path).get(machine_fingerprint(machine))
    runs = record.runs if record is not None else ()
    return tuple(run for run in runs if run.model == model_file and run.decode_tps is not None)


def parse_calibrations(data: object) -> dict[str, MachineRecord]:
    """The machines of a parsed calibration file; InvalidCalibrationFile when anything in it is off."""
    if not isinstance(data, dict) or data.get("format") != FILE_FORMAT:
        raise InvalidCalibrationFile(f"not a {FILE_FORMAT} file")
    if data.get("version") != FILE_VERSION:
        raise InvalidCalibrationFile(f"version {data.get('version')!r}, this launcher reads version {FILE_VERSION}")
    machines = data.get("machines")
    if not isinstance(machines, dict):
        raise InvalidCalibrationFile("'machines' is not an object")
    records: dict[str, MachineRecord] = {}
    for fingerprint, entry in machines.items():
        if not _FINGERPRINT.fullmatch(fingerprint):
            raise InvalidCalibrationFile(f"{fingerprint!r} is not a machine fingerprint")
        if not isinstance(entry, dict) or not isinstance(entry.get("runs"), list):
            raise InvalidCalibrationFile(f"machine {fingerprint} has no list of runs")
        description = entry.get("machine", "")
        runs = tuple(_run_from_json(item) for item in entry["runs"])
        records[fingerprint] = MachineRecord(description if isinstance(description, str) else "", runs)
    return records


def _signature(path: Path) -> tuple[int, int] | None:
    try:
        stat = path.stat()
    except OSError:
        return None
    return (stat.st_mtime_ns, stat.st_size)


_cache: dict[Path, tuple[tuple[int, int], dict[str, MachineRecord]]] = {}
_cache_lock = threading.Lock()  # the app predicts on worker threads


def _read(path: Path) -> dict[str, MachineRecord]:
    """The file's machines; {} with a warning when it is unreadable or not ours."""
    try:
        return parse_calibrations(json.loads(path.read_text(encoding="utf-8")))
    except FileNotFoundError:
        return {}
    except (OSError, UnicodeDecodeError, ValueError) as err:  # InvalidCalibrationFile and JSONDecodeError too
        log.warning("ignoring the calibration file %s (%s); the next calibration run replaces it", path, err)
        return {}


def load_calibrations(path: Path | None = None) -> Mapping[str, MachineRecord]:
    """Every machine's runs, read once per change of the file (missing or ignored file: none)."""
    path = path or calibration_file()
    signature = _signature(path)
    if signature is None:
        return {}
    with _cache_lock:
        cached = _cache.get(path)
        if cached is not None and cached[0] == signature:
            return cached[1]
    records = _read(path)
    with _cache_lock:
        _cache[path] = (signature, records)
    return records


def stored_calibration(machine: Machine, path: Path | None = None) -> MachineCalibration:
    """This machine's stored runs (none when it was never calibrated)."""
    fingerprint = machine_fingerprint(machine)
    record = load_calibrations(path).get(fingerprint)
    return MachineCalibration(fingerprint, record.runs if record else ())


def resolve_calibration(machine: Machine, choice: CalibrationChoice) -> MachineCalibration | None:
    """The runs a prediction for `machine` uses: "stored" reads them (cached), others pass through."""
    return stored_calibration(machine) if choice == "stored" else choice


def predict_memory(
    machine: Machine, arch: Architecture, fit: FitResult, *, engine: str, calibration: CalibrationChoice = "stored"
) -> MemoryEstimate | None:
    """The fit's needed bytes as this machine's runs for `engine` and the model's size correct them
    (None when there are none: show the fit's own figure). Never a verdict: fit badges stay the fit's."""
    runs = resolve_calibration(machine, calibration)
    return calibrated_memory(fit, runs.for_model(engine, arch.params_active_b) if runs is not None else None)


def _trimmed(runs: tuple[CalibrationRun, ...]) -> tuple[CalibrationRun, ...]:
    """The last RUNS_KEPT runs of each (engine, size class), in the order they were made."""
    kept: list[CalibrationRun] = []
    for index, run in enumerate(runs):
        later = sum(1 for r in runs[index + 1 :] if (r.engine, r.size_class) == (run.engine, run.size_class))
        if later < RUNS_KEPT:
            kept.append(run)
    return tuple(kept)


def _atomic_write(path: Path, text: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, temp_name = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as handle:
            handle.write(text)
            handle.flush()
            os.fsync(handle.fileno())
        os.replace(temp_name, path)
    except BaseException:
        Path(temp_name).unlink(missing_ok=True)
        raise


def record_run(machine: Machine, run: CalibrationRun, path: Path | None = None) -> MachineCalibration:
    """Add a run to this machine's and save; returns the machine's runs as now stored."""
    path = path or calibration_file()
    records = dict(_read(path))  # fresh from disk: another process may have added runs
    fingerprint = machine_fingerprint(machine)
    previous = records.get(fingerprint)
    runs = _trimmed((*(previous.runs if previous else ()), run))
    records[fingerprint] = MachineRecord(describe_machine(machine), runs)
    payload: dict[str, Any] = {
        "format": FILE_FORMAT,
        "version": FILE_VERSION,
        "machines": {
            key: {"machine": record.description, "runs": [_run_to_json(r) for r in record.runs]}
            for key, record in sorted(records.items())
        },
    }
    _atomic_write(path, json.dumps(payload, indent=2) + "\n")
    with _cache_lock:
        _cache.pop(path, None)  # a rewrite within the clock's resolution could keep the old signature
    return MachineCalibration(fingerprint, runs)
