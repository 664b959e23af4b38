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
