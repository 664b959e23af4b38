"""The app's prediction for a running server is for that server's real settings."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from launcher.advisor import plan_local
from launcher.advisor.calibration import measurable_bytes
from launcher.catalog.gguf_meta import read_gguf_metadata
from launcher.hardware.recorded import load_recorded
from launcher.ui.model_rows import prediction_for_server


@dataclass
class Endpoint:
    serving: dict[str, Any]
    url: str = "http://127.0.0.1:1"
    model: str = "tiny"
    engine: str = "llamacpp"
    extra: dict[str, Any] = field(default_factory=dict)


def test_the_prediction_follows_the_served_context_parallel_and_kv_type(tiny_gguf: Path) -> None:
    machine = load_recorded("cpu-avx2-laptop-16gb")
    meta = read_gguf_metadata(tiny_gguf)
    predictions = {}
    for context, parallel, kv in ((1024, 1, "f16"), (4096, 4, "f16"), (4096, 4, "q8_0")):
        serving = {"model_path": str(tiny_gguf), "format": "gguf", "context": context, "parallel": parallel}
        serving |= {"kv_cache_type": kv, "gpu_layers": 0, "threads": None}
        prediction = prediction_for_server(machine, Endpoint(serving))
        assert prediction is not None
        plan = plan_local(
            machine, "gguf", meta.to_architecture(), meta.file_bytes, context=context, parallel=parallel, kv_type=kv
        )
        assert prediction.memory_bytes == measurable_bytes(plan.fit)
        predictions[(context, parallel, kv)] = prediction.memory_bytes
    assert predictions[(1024, 1, "f16")] < predictions[(4096, 4, "q8_0")] < predictions[(4096, 4, "f16")]


def test_a_server_that_does_not_say_what_it_serves_gets_no_prediction() -> None:
    assert prediction_for_server(load_recorded("cpu-avx2-laptop-16gb"), Endpoint({})) is None


def test_the_recommendation_card_sets_a_measurement_beside_the_prediction(tiny_gguf: Path) -> None:
    from launcher.advisor import SpeedEstimate
    from launcher.advisor.calibration import CalibrationRun
    from launcher.advisor.calibration_store import measured_runs, record_run
    from launcher.ui.model_rows import ModelRow, measured_text

    machine = load_recorded("cpu-avx2-laptop-16gb")
    run = CalibrationRun(
        when="2026-12-01T03:00:00+00:00",
        engine="llamacpp",
        size_class="<1B",
        model=tiny_gguf.name,
        context=4096,
        parallel=1,
        kv_type="f16",
        decode_ratio=0.9,
        prefill_ratio=1.1,
        memory_ratio=1.0,
        decode_tps=66.0,
        prefill_tps=480.0,
        memory_bytes=800 * 1024**2,
    )
    record_run(machine, run)
    assert measured_runs(machine, tiny_gguf.name) == (run,)
    assert measured_runs(machine, "other.gguf") == ()
    row = ModelRow(key="k", title="t", subtitle="s", kind="local", measured=run)
    speed = SpeedEstimate(decode_low=50, decode_high=70, prefill_low=300, prefill_high=500, bound="RAM")
    assert measured_text(row, speed) == (
        "Measured here on 2026-12-01 (llamacpp, context 4096 x 1): decode 66 tok/s (+10% of predicted) per stream, "
        "prefill 480 tok/s (+20% of predicted)"
    )
    assert measured_text(ModelRow(key="k", title="t", subtitle="s", kind="local"), speed) is None
