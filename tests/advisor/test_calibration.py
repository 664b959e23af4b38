"""Per-machine calibration: the store on disk, the lookup, and how runs re-centre and narrow predictions."""

from __future__ import annotations

import json
import logging
from dataclasses import replace

import pytest

from launcher.advisor import estimate_speed, predict_memory, predict_speed, recommend
from launcher.advisor.calibration import (
    Calibration,
    CalibrationRun,
    MachineCalibration,
    calibrated_memory,
    correction,
    machine_fingerprint,
    measurable_bytes,
    size_class,
)
from launcher.advisor.calibration_store import (
    FILE_FORMAT,
    calibration_file,
    load_calibrations,
    record_run,
    stored_calibration,
)
from launcher.advisor.fit import FitResult, fit_model, weights_bytes
from launcher.catalog.catalog import default_catalog
from launcher.core.model_types import Architecture
from launcher.core.units import GIB
from launcher.hardware.machine import GpuInfo, MemoryInfo
from tests.advisor.machines import desktop_4090, laptop_cpu, macbook_m2

SMALL = Architecture(
    params_total_b=0.5,
    params_active_b=0.5,
    layers=24,
    attention_heads=14,
    kv_heads=2,
    head_dim=64,
    hidden_size=896,
    max_context=32768,
)
BITS = 4.85


def _run(
    decode: float | None = 1.0, prefill: float | None = None, memory: float | None = None, **kw: object
) -> CalibrationRun:
    fields: dict[str, object] = {
        "when": "2025-01-01T00:00:00+00:00",
        "engine": "llamacpp",
        "size_class": "<1B",
        "model": "small-Q4_K_M.gguf",
        "context": 4096,
        "parallel": 1,
        "kv_type": "f16",
        "decode_ratio": decode,
        "prefill_ratio": prefill,
        "memory_ratio": memory,
    } | kw
    return CalibrationRun(**fields)  # type: ignore[arg-type]


def _fit() -> FitResult:
    return fit_model(laptop_cpu(), SMALL, weights_bytes(SMALL, BITS), context=4096, sliding="llamacpp")


def test_size_classes_bucket_active_parameters() -> None:
    assert [size_class(b) for b in (0.27, 1.0, 3.9, 8, 14, 32, 70)] == [
        "<1B",
        "1-4B",
        "1-4B",
        "4-10B",
        "10-20B",
        "20-40B",
        "40B+",
    ]


def test_fingerprint_keeps_to_stable_facts() -> None:
    machine = desktop_4090()
    busier = replace(
        machine,
        memory=MemoryInfo(machine.memory.total, 3 * GIB),
        gpus=tuple(replace(g, memory_free=GIB) for g in machine.gpus),
    )
    assert machine_fingerprint(busier) == machine_fingerprint(machine)
    assert machine_fingerprint(desktop_4090(ram_gib=128)) != machine_fingerprint(machine)
    second_card = replace(machine, gpus=(*machine.gpus, GpuInfo(1, "nvidia", "NVIDIA GeForce RTX 3090", 24 * GIB, 0)))
    assert machine_fingerprint(second_card) != machine_fingerprint(machine)


def test_store_round_trip_keeps_the_last_ten_runs_per_key() -> None:
    machine = laptop_cpu()
    for index in range(12):
        record_run(machine, _run(decode=1 + index / 100, when=f"2025-01-{index + 1:02d}T00:00:00+00:00"))
    other = record_run(machine, _run(decode=0.5, engine="mlx"))
    stored = stored_calibration(machine)
    assert stored == other
    llama = [r for r in stored.runs if r.engine == "llamacpp"]
    assert [r.decode_ratio for r in llama] == [1 + i / 100 for i in range(2, 12)]  # the oldest two aged out
    assert [r.engine for r in stored.runs].count("mlx") == 1
    data = json.loads(calibration_file().read_text())
    assert data["format"] == FILE_FORMAT and data["version"] == 1
    (entry,) = data["machines"].values()
    assert entry["machine"].startswith("Intel Core i7-1165G7, 4 cores, 16 GiB RAM")
    assert stored_calibration(macbook_m2()).runs == ()  # another machine's runs never apply


def test_runs_stored_before_the_measured_values_were_kept_still_load() -> None:
    machine = laptop_cpu()
    record_run(machine, _run(decode=0.8))
    data = json.loads(calibration_file().read_text())
    (entry,) = data["machines"].values()
    for run in entry["runs"]:
        for key in ("decode_tps", "prefill_tps", "memory_bytes"):
            run.pop(key)
    calibration_file().write_text(json.dumps(data))
    (run,) = stored_calibration(machine).runs
    assert run.decode_ratio == 0.8 and run.decode_tps is None


@pytest.mark.parametrize(
    "content",
    [
        "{not json",
        json.dumps({"format": "something-else", "version": 1, "machines": {}}),
        json.dumps({"format": FILE_FORMAT, "version": 99, "machines": {}}),
        json.dumps({"format": FILE_FORMAT, "version": 1, "machines": {"not-a-fingerprint": {"runs": []}}}),
    ],
    ids=["corrupt", "foreign-format", "other-version", "foreign-entry"],
)
def test_an_unreadable_or_foreign_file_is_ignored_with_a_warning_and_replaced_on_save(
    content: str, caplog: pytest.LogCaptureFixture
) -> None:
    path = calibration_file()
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(content)
    with caplog.at_level(logging.WARNING):
        assert stored_calibration(laptop_cpu()).runs == ()
    assert "ignoring the calibration file" in caplog.text
    record_run(laptop_cpu(), _run(decode=1.25))
    assert [r.decode_ratio for r in stored_calibration(laptop_cpu()).runs] == [1.25]
    assert json.loads(path.read_text())["format"] == FILE_FORMAT


@pytest.mark.parametrize(
    "change",
    [
        {"decode_ratio": -1.0},
        {"decode_ratio": "fast"},
        {"size_class": "huge"},
        {"context": 0},
        {"decode_ratio": None},  # a run that measured nothing
        {"extra": 1},
    ],
)
def test_a_file_with_an_invalid_run_is_ignored(change: dict[str, object], caplog: pytest.LogCaptureFixture) -> None:
    record_run(laptop_cpu(), _run(decode=1.25))
    data = json.loads(calibration_file().read_text())
    (entry,) = data["machines"].values()
    entry["runs"][0].update(change)
    calibration_file().write_text(json.dumps(data))
    with caplog.at_level(logging.WARNING):
        assert load_calibrations() == {}
    assert "ignoring the calibration file" in caplog.text


def test_one_run_centres_the_range_on_the_measured_ratio_within_20_percent() -> None:
    machine, fit = laptop_cpu(), _fit()
    raw = estimate_speed(machine, SMALL, BITS, fit)
    calibrated = estimate_speed(machine, SMALL, BITS, fit, calibration=Calibration((_run(decode=1.5),)))
    mid = (raw.decode_low + raw.decode_high) / 2
    assert calibrated.decode_low == pytest.approx(mid * 1.5 * 0.8)
    assert calibrated.decode_high == pytest.approx(mid * 1.5 * 1.2)
    assert (calibrated.prefill_low, calibrated.prefill_high) == (raw.prefill_low, raw.prefill_high)  # not measured
    assert calibrated.calibrated_runs == 1
    assert calibrated.summary().endswith("; calibrated from 1 run on this machine)")
    assert raw.calibrated_runs == 0 and "calibrated" not in raw.summary()
    assert raw.decode_high / raw.decode_low > 1.5 > calibrated.decode_high / calibrated.decode_low


def test_more_runs_narrow_to_their_spread_between_10_and_25_percent() -> None:
    machine, fit = laptop_cpu(), _fit()
    raw = estimate_speed(machine, SMALL, BITS, fit)
    runs = Calibration((_run(decode=0.9, prefill=2.0), _run(decode=1.0, prefill=2.0), _run(decode=1.2, prefill=2.2)))
    calibrated = estimate_speed(machine, SMALL, BITS, fit, calibration=runs)
    # median 1.0; deviations 0.1, 0, 0.2 -> MAD 0.1 -> +-20%
    assert calibrated.decode_low == pytest.approx(raw.decode_mid * 0.8)
    assert calibrated.decode_high == pytest.approx(raw.decode_mid * 1.2)
    # prefill: median 2.0, MAD 0 -> floored at +-10%
    assert calibrated.prefill_low == pytest.approx(raw.prefill_mid * 2.0 * 0.9)
    assert calibrated.prefill_high == pytest.approx(raw.prefill_mid * 2.0 * 1.1)
    assert "calibrated from 3 runs on this machine" in calibrated.summary()
    wild = correction([0.5, 1.0, 2.0])
    assert wild is not None and wild.spread == 0.25  # capped


def test_runs_of_other_sizes_stand_in_and_say_so() -> None:
    runs = MachineCalibration("0" * 16, (_run(decode=2.0, size_class="4-10B"), _run(decode=3.0, engine="mlx")))
    big = runs.for_model("llamacpp", 8.0)
    assert big is not None and not big.other_sizes
    small = runs.for_model("llamacpp", 0.5)
    assert small is not None and small.other_sizes and [r.decode_ratio for r in small.runs] == [2.0]
    assert small.note(1) == "calibrated from 1 run of other model sizes on this machine"
    assert runs.for_model("exllamav3", 0.5) is None
    other_sizes = correction([1.0, 1.0, 1.0], other_sizes=True)
    assert other_sizes is not None and other_sizes.spread == 0.20  # never narrower than one run of its own size


def test_calibrated_memory_scales_what_the_engine_reports_and_keeps_the_checkpoint_bound() -> None:
    fit = _fit()
    assert calibrated_memory(fit, None) is None
    assert calibrated_memory(fit, Calibration((_run(decode=1.0),))) is None  # no memory measured
    memory = calibrated_memory(fit, Calibration((_run(memory=0.9),)))
    assert memory is not None
    assert memory.needed == int(measurable_bytes(fit) * 0.9) + fit.checkpoint_bytes
    assert memory.low == int(measurable_bytes(fit) * 0.9 * 0.8) + fit.checkpoint_bytes
    assert memory.runs == 1


def test_predict_speed_uses_this_machines_stored_runs_unless_told_not_to() -> None:
    machine, fit = laptop_cpu(), _fit()
    raw = estimate_speed(machine, SMALL, BITS, fit)
    assert predict_speed(machine, SMALL, BITS, fit, engine="llamacpp") == raw  # nothing stored yet
    record_run(machine, _run(decode=0.5))
    stored = predict_speed(machine, SMALL, BITS, fit, engine="llamacpp")
    assert stored.calibrated_runs == 1 and stored.decode_high == pytest.approx(raw.decode_mid * 0.5 * 1.2)
    assert predict_speed(machine, SMALL, BITS, fit, engine="llamacpp", calibration=None) == raw
    assert predict_speed(machine, SMALL, BITS, fit, engine="mlx") == raw
    assert predict_memory(machine, SMALL, fit, engine="llamacpp") is None  # that run measured no memory
    record_run(machine, _run(decode=None, memory=1.1))
    memory = predict_memory(machine, SMALL, fit, engine="llamacpp")
    assert memory is not None and memory.needed == int(measurable_bytes(fit) * 1.1) + fit.checkpoint_bytes
    assert predict_memory(machine, SMALL, fit, engine="llamacpp", calibration=None) is None


def test_recommend_calibrates_speed_but_not_the_pick() -> None:
    machine = laptop_cpu()
    model = default_catalog().get("gemma-3-270m")
    assert model is not None
    raw = recommend(machine, model, calibration=None)
    record_run(machine, _run(decode=2.0, memory=0.8))
    rec = recommend(machine, model)
    assert (rec.choice.quant, rec.choice.fit) == (raw.choice.quant, raw.choice.fit)
    assert rec.choice.speed.calibrated_runs == 1
    assert rec.choice.speed.decode_low == pytest.approx(raw.choice.speed.decode_mid * 2.0 * 0.8)
    assert rec.choice.memory is not None and rec.choice.memory.runs == 1
    assert raw.choice.memory is None
    assert recommend(macbook_m2(), default_catalog().get("qwen3-8b")).choice.speed.calibrated_runs == 0  # type: ignore[arg-type]
