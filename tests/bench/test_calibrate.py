"""`launcher bench --calibrate` against a fake `launcher serve` whose timings and memory are scripted,
so the measured rates, the ratios and what is stored are known in advance."""

from __future__ import annotations

import asyncio
import json
import socket
from dataclasses import replace
from pathlib import Path

import pytest

from launcher.advisor.calibration import measurable_bytes
from launcher.advisor.calibration_store import calibration_file, stored_calibration
from launcher.bench.calibrate import CalibrationOutcome, ServedModel, calibrate, predict_served
from launcher.bench.calibrate_measure import CalibrationWorkload
from launcher.cli import main
from launcher.hardware.machine import Machine, MemoryInfo
from tests.advisor.machines import laptop_cpu, macbook_m2
from tests.bench.fake_launcher_serve import MIB, MODEL_ID, FakeServe, build_app
from tests.server.harness import running_app

QUICK = CalibrationWorkload(decode_requests=3, decode_tokens=16, prefill_requests=2, prefill_prompt_tokens=1000)


def _calibrate(fake: FakeServe, machine: Machine, api_key: str | None = None) -> CalibrationOutcome:
    with running_app(build_app(fake)) as url:
        return asyncio.run(calibrate(f"{url}/v1", machine, api_key=api_key, workload=QUICK))


def test_measures_the_scripted_rates_and_stores_their_ratios_to_the_raw_prediction(tiny_gguf: Path) -> None:
    machine = laptop_cpu()
    fake = FakeServe(tiny_gguf, api_key="sekrit", decode_delay=0.02, prefill_delay=0.25)
    outcome = _calibrate(fake, machine, api_key="sekrit")

    measured = outcome.measured
    assert measured.decode_tps == pytest.approx(1 / 0.02, rel=0.15)  # one chunk every 20 ms
    assert len(measured.prefill_samples) == 2
    for tokens, rate in zip(measured.prefill_prompt_tokens, measured.prefill_samples, strict=True):
        assert 1000 <= tokens <= 1050  # ~1,000 words of fresh text + the question; the template was cached
        assert rate == pytest.approx(tokens / 0.25, rel=0.15)
    assert measured.memory_bytes == (100 + 20 + 5) * MIB  # weights + KV + compute, not the checkpoints
    assert fake.health_headers[0] == "Bearer sekrit"
    long_prompts = [b for b in fake.bodies if b["max_tokens"] == QUICK.prefill_max_tokens]
    assert len({b["messages"][0]["content"] for b in long_prompts}) == 2  # no two alike: nothing cached
    assert all(b["temperature"] == 0.0 and b["stream"] for b in fake.bodies)

    served = ServedModel.from_health({"model": MODEL_ID, "engine": "llamacpp", "serving": fake.serving()}, "x")
    assert outcome.served == served
    expected = predict_served(machine, served)  # the raw model, nothing calibrated
    assert outcome.prediction == expected
    run = outcome.run
    assert run is not None
    assert run.decode_ratio == pytest.approx(measured.decode_tps / expected.speed.decode_mid)
    assert run.prefill_ratio == pytest.approx(measured.prefill_tps / expected.speed.prefill_mid)  # type: ignore[operator]
    assert run.memory_ratio == pytest.approx(measured.memory_bytes / measurable_bytes(expected.fit))
    assert (run.engine, run.size_class, run.model, run.context, run.kv_type) == (
        "llamacpp",
        "<1B",
        tiny_gguf.name,
        4096,
        "f16",
    )

    assert stored_calibration(machine).runs == (run,)
    assert json.loads(calibration_file().read_text())["machines"]  # on disk, under this machine
    calibrated = outcome.calibrated_speed
    assert calibrated is not None and calibrated.calibrated_runs == 1
    # One run: centred on what was measured, +-20%.
    assert calibrated.decode_low == pytest.approx(measured.decode_tps * 0.8)
    assert calibrated.decode_high == pytest.approx(measured.decode_tps * 1.2)
    assert outcome.calibrated_memory is not None
    assert outcome.calibrated_memory.needed == pytest.approx(
        measured.memory_bytes + expected.fit.checkpoint_bytes, abs=1
    )


def test_an_older_server_without_compute_figures_counts_weights_and_kv(tiny_gguf: Path) -> None:
    fake = FakeServe(tiny_gguf, decode_delay=0.002, prefill_delay=0.02)
    del fake.memory["compute"]
    outcome = _calibrate(fake, laptop_cpu())
    assert outcome.measured.memory_bytes == 120 * MIB


def test_the_cli_prints_predicted_vs_measured_and_counts_the_runs(
    tiny_gguf: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setattr("launcher.hardware.probe.probe_machine", laptop_cpu)
    monkeypatch.setattr("launcher.bench.calibrate_measure.load_average", lambda: 0.5)
    fake = FakeServe(tiny_gguf, decode_delay=0.002, prefill_delay=0.02)
    out = tmp_path / "calibration.json"
    with running_app(build_app(fake)) as url:
        argv = ["bench", "--calibrate", "--base-url", f"{url}/v1", "--json", str(out)]
        assert main(argv) == 0
        first = capsys.readouterr().out
        monkeypatch.setattr("launcher.bench.calibrate_measure.load_average", lambda: 9.0)  # 9 on 8 threads
        assert main(argv) == 0
        second = capsys.readouterr().out
    assert "predicted by the model" in first and "decode" in first and "%" in first
    assert "calibrated from 1 run on this machine" in first
    assert "calibrated from 2 runs on this machine" in second
    assert "busy" not in first and "The machine was busy when this run began (load average 9.0" in second
    report = json.loads(out.read_text())
    assert report["stored"] and report["calibrated"]["runs"] == 2
    assert report["serving"]["model_path"] == str(tiny_gguf)
    assert report["measured"]["memory_bytes"] == 125 * MIB
    assert len(stored_calibration(laptop_cpu()).runs) == 2


def test_a_health_without_serving_stops_with_a_clear_message(
    tiny_gguf: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setattr("launcher.hardware.probe.probe_machine", laptop_cpu)
    for fake in (FakeServe(tiny_gguf, report_serving=False), FakeServe(tiny_gguf, api_key="sekrit")):
        with running_app(build_app(fake)) as url:
            assert main(["bench", "--calibrate", "--base-url", f"{url}/v1"]) != 0
        assert "no 'serving' in its /health" in capsys.readouterr().err
        assert not fake.bodies  # nothing was sent to the model
    assert not calibration_file().exists()


def test_an_unreachable_server_stops_with_a_clear_message(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setattr("launcher.hardware.probe.probe_machine", laptop_cpu)
    with socket.socket() as sock:  # a port nothing listens on once it is closed
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    assert main(["bench", "--calibrate", "--base-url", f"http://127.0.0.1:{port}/v1"]) != 0
    assert "nothing answers" in capsys.readouterr().err


def test_a_model_that_is_not_on_this_machine_cannot_be_predicted(tmp_path: Path) -> None:
    fake = FakeServe(tmp_path / "elsewhere.gguf")
    with pytest.raises(Exception, match="not on this machine"):
        _calibrate(fake, laptop_cpu())


def test_a_run_that_measured_nothing_stores_nothing_and_fails(
    tiny_gguf: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setattr("launcher.hardware.probe.probe_machine", laptop_cpu)
    fake = FakeServe(tiny_gguf, chat_status=500, memory={})
    with running_app(build_app(fake)) as url:
        assert main(["bench", "--calibrate", "--base-url", f"{url}/v1"]) == 1
    out = capsys.readouterr().out
    assert "Requests that failed: HTTP 500" in out and "Nothing was measured, so nothing was stored." in out
    assert not calibration_file().exists()


def test_the_prediction_does_not_count_the_served_model_against_itself(tiny_gguf: Path) -> None:
    idle = macbook_m2()
    busy = replace(idle, memory=MemoryInfo(idle.memory.total, 0))  # the running server holds what was free
    served = ServedModel(MODEL_ID, "llamacpp", tiny_gguf, "gguf", 4096, 1, "f16", gpu_layers=-1, threads=None)
    prediction = predict_served(busy, served)
    assert prediction.fit.verdict == "unified"
    assert prediction.speed == predict_served(idle, served).speed


def test_decode_comes_from_the_servers_own_counters_when_it_has_them(tiny_gguf: Path) -> None:
    # The client sees a chunk every 20 ms; the server says its tokens took 10 ms each (HTTP and the
    # client's scheduling are not the engine's speed, and dominate for a fast model).
    fake = FakeServe(tiny_gguf, decode_delay=0.02, prefill_delay=0.02, server_decode_delay=0.01)
    outcome = _calibrate(fake, laptop_cpu())
    assert outcome.measured.decode_tps == pytest.approx(100.0)
    assert outcome.measured.decode_samples and outcome.measured.decode_samples[0] == pytest.approx(50, rel=0.2)
