"""`launcher bench` against the real `launcher serve` (llama.cpp engine) on the tiny GGUF fixture.

What a user relies on when benchmarking our own server: every workload completes, token
counts come from the server's usage, prefix-cache counters are read from /metrics, memory
and CPU are sampled from the pid in the LAUNCHER_READY line, and the server is stopped after.
"""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from launcher.bench.report import build_report, render_markdown
from launcher.bench.servers import launcher_serve
from launcher.bench.suite import BenchConfig, run_suite
from launcher.bench.workloads import WorkloadSettings

pytest.importorskip("llama_cpp")


def test_bench_runs_every_workload_against_launcher_serve(tiny_gguf: Path, tmp_path: Path) -> None:
    settings = WorkloadSettings(
        requests=2, max_tokens=8, concurrency=(1, 2), prefix_tokens=120, long_prompt_tokens=100, prefix_pairs=1
    )
    serve_args = [str(tiny_gguf), "--port", "0", "--parallel", "2", "--threads", "1", "--context", "2048"]
    with launcher_serve(serve_args, log_path=tmp_path / "serve.log", timeout=120) as server:
        config = BenchConfig(base_url=server.base_url, settings=settings, server_pid=server.pid)
        suite = asyncio.run(run_suite(config))
        process = server.process
    assert process.poll() is not None  # stopped when the block ended

    assert suite.model_id == server.ready["model"]
    assert suite.tokens_per_word_measured
    assert [w.workload.name for w in suite.workloads] == ["short", "long", "prefix", "sweep", "json"]
    for workload in suite.workloads:
        for summary in workload.summaries:
            assert summary.errors == 0, (workload.workload.name, summary.error_samples)
            assert summary.usage_reported
            assert summary.completion_tokens.mean is not None and summary.completion_tokens.mean >= 1
    long = suite.workloads[1].summaries[0]
    assert long.prompt_tokens.mean is not None and long.prompt_tokens.mean >= 80  # the prompt was sized in tokens
    assert suite.metrics_available
    prefix_counters = suite.workloads[2].counters
    assert prefix_counters is not None and prefix_counters["launcher_prompt_tokens_total"] > 0
    assert suite.peak_memory.peak_bytes and str(server.pid) in suite.peak_memory.source
    assert suite.host_load.server_cpu_seconds is not None and suite.host_load.server_cpu_seconds > 0

    report = build_report(suite, flags={}, label="launcher serve")
    assert report["target"]["engine"] is not None
    assert "launcher serve" in render_markdown(report)


def test_mixed_workload_against_launcher_serve(tiny_gguf: Path, tmp_path: Path) -> None:
    # Two streams plus the long prompt need three sequences at once, or the long prompt would queue.
    settings = WorkloadSettings(mixed_streams=2, max_tokens=32, long_prompt_tokens=300)
    serve_args = [str(tiny_gguf), "--port", "0", "--parallel", "3", "--threads", "1", "--context", "2048"]
    with launcher_serve(serve_args, log_path=tmp_path / "serve.log", timeout=120) as server:
        config = BenchConfig(base_url=server.base_url, settings=settings, workloads=("mixed",), server_pid=server.pid)
        suite = asyncio.run(run_suite(config))

    (mixed,) = suite.workloads
    assert [s.label for s in mixed.summaries] == ["background c=2", "long prompt"]
    for summary in mixed.summaries:
        assert summary.errors == 0, summary.error_samples
        assert summary.usage_reported
    background, arriving = mixed.phases
    (long,) = arriving.results
    assert all(r.ttft is not None and long.sent_at >= r.sent_at + r.ttft for r in background.results)

    report = build_report(suite, flags={}, label="launcher serve")
    numbers = report["workloads"][0]["mixed"]
    assert numbers is not None and numbers["background_streams"] == 2
    assert numbers["long_ttft"] > 0 and numbers["long_prompt_tokens"] >= 240  # sized in the server's tokens
    for key in ("gap_in_window_max", "gap_in_window_p95", "itl_outside_window_p50", "tokens_in_window"):
        assert key in numbers
    assert "mixed: the long prompt (" in render_markdown(report)
