"""`launcher detect` as a user runs it."""

from __future__ import annotations

import importlib.metadata
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from launcher import engine_specs
from launcher.cli import main
from launcher.engine_specs import EngineSpec

ROOT = Path(__file__).resolve().parents[2]


def run_cli(*args: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    return subprocess.run(
        [sys.executable, "-m", "launcher", "detect", *args], capture_output=True, text=True, env=env, timeout=120
    )


def test_json_for_this_machine_has_the_machine_and_every_engine() -> None:
    done = run_cli("--json")
    assert done.returncode == 0, done.stderr
    data = json.loads(done.stdout)
    assert data["cpu"]["logical_cores"] > 0 and data["memory"]["total"] > 0
    assert set(data["engines"]) == set(engine_specs.names())
    for answer in data["engines"].values():
        assert isinstance(answer["usable"], bool) and answer["reason"]
    llamacpp = data["engines"]["llamacpp"]  # installed in every test environment
    assert llamacpp["usable"] and llamacpp["version"] == importlib.metadata.version("llama-cpp-python")
    assert llamacpp["version"] in llamacpp["reason"]
    assert "Traceback" not in done.stderr


def test_text_summary_for_this_machine() -> None:
    done = run_cli("--no-engines")
    assert done.returncode == 0, done.stderr
    assert "CPU:" in done.stdout and "RAM:" in done.stdout and "Disk:" in done.stdout
    assert "features:" in done.stdout


def test_recorded_h100_server_summary(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["detect", "--recorded", "8x-h100-server", "--no-engines"]) == 0
    out = capsys.readouterr().out
    assert "GPUs:    8 (NVIDIA driver 550.90.07, CUDA 12.4)" in out
    assert "GPU 7: NVIDIA H100 80GB HBM3" in out and "3350 GB/s" in out and "NVSwitch" in out
    assert "compute capability 9.0" in out


def test_recorded_mac_summary_and_json(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["detect", "--recorded", "macbook-air-m2-16gb", "--no-engines"]) == 0
    out = capsys.readouterr().out
    assert "Apple M2, 10-core GPU, 16.0 GiB unified memory, 100 GB/s" in out
    assert "wired limit" in out
    assert main(["detect", "--recorded", "macbook-air-m2-16gb", "--json", "--no-engines"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert data["apple"]["chip"] == "Apple M2" and "engines" not in data


def test_recorded_old_cpu_lists_what_was_not_seen(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["detect", "--recorded", "old-cpu-no-avx2", "--no-engines"]) == 0
    out = capsys.readouterr().out
    assert "features: avx sse4_2" in out
    assert "Not detected:\n  - NVIDIA: NVML library not found (no NVIDIA driver)" in out


def test_engine_that_fails_to_import_is_shown_not_fatal(capsys: pytest.CaptureFixture[str]) -> None:
    # An engine whose code is missing (a plug-in built for another version): detect names it and goes on.
    broken = EngineSpec(
        name="broken-test-engine",
        label="Broken",
        formats=("gguf",),
        factory="launcher_no_such_plugin.engine:Engine",
        runtime_module="json",  # "installed", so the engine's own code is what fails
        distribution="launcher",
        pip_extra="broken",
    )
    engine_specs.register(broken)
    try:
        assert main(["detect", "--recorded", "rtx4090-desktop", "--json"]) == 0
    finally:
        engine_specs.unregister("broken-test-engine")
    answer = json.loads(capsys.readouterr().out)["engines"]["broken-test-engine"]
    assert answer["usable"] is False and answer["version"] is None
    assert answer["reason"].startswith("not available: Broken is not built into this launcher")
    assert "launcher_no_such_plugin" in answer["reason"]


def test_list_and_unknown_recorded(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["detect", "--list-recorded"]) == 0
    assert "rtx2080ti" in capsys.readouterr().out.split()
    done = run_cli("--recorded", "nope")
    assert done.returncode == 2
    assert done.stderr.startswith("error: No recorded machine named 'nope'")
    assert "Traceback" not in done.stderr
