"""`launcher bench --calibrate`'s edit-copy measurement: the speed-up speculative decoding gives an answer
that copies its prompt, measured against a scripted fake `launcher serve` and the real one, and stored."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

import pytest

from launcher.advisor.calibration_store import calibration_file, stored_calibration
from launcher.bench.calibrate import CalibrationOutcome, calibrate
from launcher.bench.calibrate_measure import CalibrationWorkload
from launcher.bench.calibrate_report import outcome_json, render_text
from launcher.bench.calibrate_speculative import EDIT_SNIPPET
from launcher.bench.servers import launcher_serve
from launcher.hardware.machine import Machine
from tests.advisor.machines import laptop_cpu
from tests.bench.fake_launcher_serve import FakeServe, build_app
from tests.server.harness import running_app

QUICK = CalibrationWorkload(
    decode_requests=2, decode_tokens=12, prefill_requests=1, prefill_prompt_tokens=600, edit_copy_tokens=24
)


def _calibrate(fake: FakeServe, machine: Machine, workload: CalibrationWorkload = QUICK) -> CalibrationOutcome:
    with running_app(build_app(fake)) as url:
        return asyncio.run(calibrate(f"{url}/v1", machine, workload=workload))


def test_the_speedup_is_auto_over_off_on_copied_code_stored_and_reported(tiny_gguf: Path) -> None:
    machine = laptop_cpu()
    # The server's own counters say 4 ms a token with speculation off, 2 ms with it on.
    fake = FakeServe(
        tiny_gguf, decode_delay=0.002, prefill_delay=0.02, server_decode_delay=0.004, speculative_speedup=2.0
    )
    outcome = _calibrate(fake, machine)

    off, auto = fake.completion_bodies
    assert (off["speculative"], auto["speculative"]) == ("off", "auto")
    for body in (off, auto):
        assert body["prompt"].endswith(f"```python\n{EDIT_SNIPPET}```\nThe same code again:\n```python\n")
        assert body["temperature"] == 0.0 and body["stream"] and body["max_tokens"] == 24
    assert 1200 <= len(EDIT_SNIPPET) <= 1800
    spec = outcome.measured.speculative
    assert spec is not None and spec.skipped is None
    assert spec.off_tps == pytest.approx(250.0) and spec.auto_tps == pytest.approx(500.0)
    assert (spec.draft_tokens, spec.accepted_tokens) == (24, 12)
    assert outcome.run is not None and outcome.run.speculative_speedup == pytest.approx(2.0)
    assert stored_calibration(machine).speculative_speedup("llamacpp") == pytest.approx(2.0)
    text = render_text(outcome)
    assert "Speculative decoding on copied text (edit): 2.00x (off 250 tok/s, auto 500 tok/s; 12 of 24" in text
    assert "Speculative decoding: 2.0x on copied text (edit) with llamacpp on this machine, from 1 run;" in text
    report = outcome_json(outcome)
    assert report["measured"]["speculative_speedup"] == pytest.approx(2.0)
    assert report["calibrated"]["speculative_speedup"] == pytest.approx(2.0)

    fake.speculative_speedup = 1.0  # a second run where speculation gains nothing: the median of both
    second = _calibrate(fake, machine)
    assert second.run is not None and second.run.speculative_speedup == pytest.approx(1.0)
    assert stored_calibration(machine).speculative_speedup("llamacpp") == pytest.approx(1.5)
    assert "Speculative decoding: 1.5x on copied text (edit) with llamacpp on this machine, from 2 runs;" in (
        render_text(second)
    )


def test_without_the_servers_counters_the_client_times_the_chunks(tiny_gguf: Path) -> None:
    fake = FakeServe(tiny_gguf, decode_delay=0.01, prefill_delay=0.02, speculative_speedup=2.0)
    outcome = _calibrate(fake, laptop_cpu())
    spec = outcome.measured.speculative
    assert spec is not None and spec.skipped is None and spec.off_tps and spec.auto_tps
    assert spec.off_tps == pytest.approx(100, rel=0.4)
    assert outcome.run is not None and 1.3 <= (outcome.run.speculative_speedup or 0) <= 2.6  # sleeps overshoot


def test_a_server_without_speculation_is_not_asked_and_its_run_stores_no_speedup(tiny_gguf: Path) -> None:
    fake = FakeServe(tiny_gguf, decode_delay=0.002, prefill_delay=0.02)  # no speculative counters in /metrics
    outcome = _calibrate(fake, laptop_cpu())
    assert not fake.completion_bodies
    spec = outcome.measured.speculative
    assert spec is not None and spec.speedup is None and "reports no speculative decoding" in (spec.skipped or "")
    assert outcome.run is not None and outcome.run.speculative_speedup is None  # the rest is stored as before
    assert "Speculative decoding on copied text (edit): not measured (the server reports no" in render_text(outcome)
    assert "Speculative decoding: " not in render_text(outcome)
    (entry,) = json.loads(calibration_file().read_text())["machines"].values()
    assert "speculative_speedup" not in entry["runs"][0]


def test_a_server_that_rejects_the_field_is_skipped(tiny_gguf: Path) -> None:
    fake = FakeServe(
        tiny_gguf, decode_delay=0.002, prefill_delay=0.02, speculative_speedup=2.0, reject_speculative=True
    )
    outcome = _calibrate(fake, laptop_cpu())
    assert [b["speculative"] for b in fake.completion_bodies] == ["off"]  # nothing more after the 400
    spec = outcome.measured.speculative
    assert spec is not None and spec.speedup is None and "the 'off' request failed (HTTP 400" in (spec.skipped or "")
    assert outcome.run is not None and outcome.run.speculative_speedup is None
    assert outcome.measured.errors == ()  # not a failed calibration request


def test_a_workload_without_it_sends_nothing(tiny_gguf: Path) -> None:
    fake = FakeServe(tiny_gguf, decode_delay=0.002, prefill_delay=0.02, speculative_speedup=2.0)
    outcome = _calibrate(fake, laptop_cpu(), CalibrationWorkload(decode_tokens=12, edit_copy_tokens=0))
    assert not fake.completion_bodies and outcome.measured.speculative is None
    assert outcome.run is not None and outcome.run.speculative_speedup is None


def test_against_launcher_serve_the_speedup_is_measured_and_stored(tiny_gguf: Path, tmp_path: Path) -> None:
    pytest.importorskip("llama_cpp")
    machine = laptop_cpu()
    workload = CalibrationWorkload(decode_requests=2, decode_tokens=16, prefill_requests=1, prefill_prompt_tokens=300)
    serve_args = [str(tiny_gguf), "--port", "0", "--threads", "1", "--context", "2048"]
    with launcher_serve(serve_args, log_path=tmp_path / "serve.log", timeout=120) as server:
        outcome = asyncio.run(calibrate(server.base_url, machine, workload=workload))
        process = server.process
    assert process.poll() is not None

    spec = outcome.measured.speculative
    assert spec is not None and spec.skipped is None, spec
    # The tiny random model rarely repeats its prompt: speculation may gain nothing, but it was measured.
    assert spec.off_tps and spec.auto_tps and spec.draft_tokens is not None and spec.draft_tokens >= 0
    assert outcome.run is not None and outcome.run.speculative_speedup is not None
    assert outcome.run.speculative_speedup > 0
    assert stored_calibration(machine).speculative_speedup("llamacpp") == outcome.run.speculative_speedup
    assert "Speculative decoding: " in render_text(outcome)
