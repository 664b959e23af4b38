"""A sliding-window model behind the real `launcher serve`: agent turns reuse the prompt, and
/metrics shows the checkpoints that make it possible, with their bounds."""

from __future__ import annotations

from pathlib import Path

import httpx

from tests.conformance.servers import SERVERS, start_server
from tests.metrics_text import metric_total

LLAMACPP = next(spec for spec in SERVERS if spec.engine == "llamacpp")


def _metric(text: str, name: str, **labels: str) -> float:
    return metric_total(text, name, **labels)


def test_agent_turns_reuse_the_prompt_and_metrics_show_the_checkpoints(tiny_swa_gguf: Path, tmp_path: Path) -> None:
    server = start_server(LLAMACPP, tiny_swa_gguf, tmp_path, "--parallel", "1", "--context", "2048")
    try:
        system = "You are a helpful assistant. Please explain the following code. " * 30
        messages = [{"role": "system", "content": system}, {"role": "user", "content": "What does def add do?"}]
        body = {"model": "m", "messages": messages, "max_tokens": 24, "temperature": 0}
        first = httpx.post(f"{server.base_url}/chat/completions", json=body, timeout=60).json()
        reply = first["choices"][0]["message"]["content"]
        messages += [{"role": "assistant", "content": reply}, {"role": "user", "content": "And def sub?"}]
        second = httpx.post(f"{server.base_url}/chat/completions", json={**body, "messages": messages}, timeout=60)
        metrics = httpx.get(f"{server.url}/metrics", timeout=10).text
    finally:
        server.stop()
    assert first["usage"]["prompt_tokens"] > 10 * 32  # many windows long
    assert second.json()["usage"]["prompt_tokens_details"]["cached_tokens"] >= first["usage"]["prompt_tokens"] - 4
    assert _metric(metrics, "launcher_swa_checkpoints") >= 1
    assert _metric(metrics, "launcher_swa_checkpoints_max") == 8
    assert _metric(metrics, "launcher_swa_checkpoint_budget_bytes") == 1024 * 1024 * 1024
    assert _metric(metrics, "launcher_engine_memory_bytes", kind="swa_checkpoints") > 0
    assert _metric(metrics, "launcher_swa_checkpoint_restores_total") >= 0
