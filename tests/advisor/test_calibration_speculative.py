"""The speculative decoding speed-up in the calibration store: kept, loaded, validated, and its median per engine."""

from __future__ import annotations

import json
import logging

import pytest

from launcher.advisor.calibration import CalibrationRun, MachineCalibration, machine_fingerprint
from launcher.advisor.calibration_store import calibration_file, load_calibrations, record_run, stored_calibration
from tests.advisor.machines import laptop_cpu


def _run(speedup: float | None = None, **kw: object) -> CalibrationRun:
    fields: dict[str, object] = {
        "when": "2025-01-01T00:00:00+00:00",
        "engine": "llamacpp",
        "size_class": "<1B",
        "model": "small-Q4_K_M.gguf",
        "context": 4096,
        "parallel": 1,
        "kv_type": "f16",
        "decode_ratio": 1.0,
        "prefill_ratio": None,
        "memory_ratio": None,
        "speculative_speedup": speedup,
    } | kw
    return CalibrationRun(**fields)  # type: ignore[arg-type]


def _stored_runs() -> list[dict[str, object]]:
    (entry,) = json.loads(calibration_file().read_text())["machines"].values()
    runs: list[dict[str, object]] = entry["runs"]
    return runs


def test_the_speedup_round_trips_and_is_left_out_of_runs_that_did_not_measure_it() -> None:
    machine = laptop_cpu()
    record_run(machine, _run(1.62))
    record_run(machine, _run(None))
    assert [r.speculative_speedup for r in stored_calibration(machine).runs] == [1.62, None]
    measured, unmeasured = _stored_runs()
    assert measured["speculative_speedup"] == 1.62
    # A launcher from before the field rejects runs with keys it does not know: only measured runs carry it.
    assert "speculative_speedup" not in unmeasured


def test_a_file_written_before_the_speedup_was_kept_still_loads() -> None:
    machine = laptop_cpu()
    record_run(machine, _run(None, decode_tps=40.0))
    data = json.loads(calibration_file().read_text())
    (entry,) = data["machines"].values()
    assert "speculative_speedup" not in entry["runs"][0]
    entry["runs"].append(dict(entry["runs"][0], speculative_speedup=None))  # an explicit null loads too
    calibration_file().write_text(json.dumps(data))
    runs = stored_calibration(machine).runs
    assert [(r.decode_tps, r.speculative_speedup) for r in runs] == [(40.0, None), (40.0, None)]


@pytest.mark.parametrize("value", [-1.5, 0, float("nan"), float("inf"), "fast", True, [1.5]])
def test_a_garbage_speedup_makes_the_file_ignored(value: object, caplog: pytest.LogCaptureFixture) -> None:
    record_run(laptop_cpu(), _run(1.5))
    data = json.loads(calibration_file().read_text())
    (entry,) = data["machines"].values()
    entry["runs"][0]["speculative_speedup"] = value
    calibration_file().write_text(json.dumps(data))  # NaN and Infinity as Python's json writes them
    with caplog.at_level(logging.WARNING):
        assert load_calibrations() == {}
    assert "ignoring the calibration file" in caplog.text


def test_the_speedup_is_the_median_of_this_engines_runs() -> None:
    runs = (
        _run(1.2),
        _run(None),  # not measured: left out, not counted as 1.0
        _run(2.0),
        _run(1.6),
        _run(0.9, engine="mlx"),
        _run(3.0, size_class="4-10B"),
    )
    calibration = MachineCalibration(machine_fingerprint(laptop_cpu()), runs)
    assert calibration.speculative_speedups("llamacpp") == (1.2, 2.0, 1.6, 3.0)
    assert calibration.speculative_speedup("llamacpp") == pytest.approx(1.8)
    assert calibration.speculative_speedup("mlx") == 0.9
    assert calibration.speculative_speedup("vllm") is None
    # With the model's size: its size class's runs when there are some, else all of the engine's.
    assert calibration.speculative_speedup("llamacpp", 0.27) == pytest.approx(1.6)
    assert calibration.speculative_speedup("llamacpp", 8.0) == 3.0
    assert calibration.speculative_speedup("llamacpp", 14.0) == pytest.approx(1.8)
    assert calibration.speculative_speedup("mlx", 8.0) == 0.9
    assert MachineCalibration("0" * 16).speculative_speedup("llamacpp") is None
    only_unmeasured = MachineCalibration("0" * 16, (_run(None),))
    assert only_unmeasured.speculative_speedup("llamacpp") is None


def test_the_speed_prediction_says_what_speculation_gave_copied_text_here() -> None:
    from launcher.advisor.calibration import Calibration
    from launcher.advisor.speed import SpeedEstimate, calibrated

    raw = SpeedEstimate(decode_low=40, decode_high=60, prefill_low=500, prefill_high=900, bound="RAM bandwidth")
    measured = calibrated(raw, Calibration((_run(1.4), _run(1.8), _run(None))))
    assert measured.copy_speedup == pytest.approx(1.6)
    assert "1.6x on copied text" in measured.summary()
    assert "copied text" not in calibrated(raw, Calibration((_run(None),))).summary()
