"""The bench against a real HTTP server (a streaming FastAPI app on uvicorn, see fake_openai_server).

These check what a user of `launcher bench` relies on: TTFT is measured from the send, token
counts come from usage (or chunks when there is none), the sweep really runs N streams at
once, and the CLI writes a report naming the model and engine.
"""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

import pytest

from launcher.bench.report import build_report, render_markdown
from launcher.bench.suite import BenchConfig, run_suite
from launcher.bench.workloads import WorkloadSettings
from launcher.cli import main
from tests.bench.fake_openai_server import MODEL_ID, FakeServerState, serve_fake

SMALL = WorkloadSettings(requests=2, max_tokens=12, concurrency=(1, 4), prefix_tokens=200, long_prompt_tokens=150)


def test_suite_measures_every_workload() -> None:
    state = FakeServerState(first_token_delay=0.05)
    with serve_fake(state) as base_url:
        suite = asyncio.run(run_suite(BenchConfig(base_url=base_url, settings=SMALL)))
    assert suite.model_id == MODEL_ID
    assert suite.tokens_per_word_measured  # calibrated from the server's usage counts
    names = [w.workload.name for w in suite.workloads]
    assert names == ["short", "long", "prefix", "sweep", "json"]
    for workload in suite.workloads:
        for summary in workload.summaries:
            assert summary.errors == 0, summary.error_samples
            assert summary.ttft.p50 is not None and summary.ttft.p50 >= 0.05  # the server's first-token delay
    short = suite.workloads[0].summaries[0]
    assert short.completion_tokens.mean == 12
    assert short.usage_reported
    # The suite sent the model id and asked for usage on every request.
    assert all(b["model"] == MODEL_ID and b["stream_options"]["include_usage"] for b in state.bodies)
    # Peak memory came from the listening process (this test process) via psutil.
    assert suite.peak_memory.peak_bytes and suite.peak_memory.peak_bytes > 0
    assert "psutil" in suite.peak_memory.source
    assert suite.host_load.server_cpu_seconds is not None and suite.host_load.server_cpu_seconds > 0


def test_sweep_really_runs_streams_concurrently() -> None:
    state = FakeServerState(first_token_delay=0.2)
    settings = WorkloadSettings(requests=4, max_tokens=4, concurrency=(4,))
    with serve_fake(state) as base_url:
        suite = asyncio.run(
            run_suite(BenchConfig(base_url=base_url, settings=settings, workloads=("sweep",), calibrate=False))
        )
    assert state.max_running == 4
    (summary,) = suite.workloads[0].summaries
    assert summary.concurrency == 4 and summary.requests == 4 and summary.errors == 0


def test_mixed_sends_the_long_prompt_once_every_stream_streams_and_sees_the_stall() -> None:
    # A server without chunked prefill: the long prompt holds every other stream for 0.3 s.
    state = FakeServerState(first_token_delay=0.05, token_delay=0.01, stall_prompt_words=200, prefill_stall=0.3)
    # 200 tokens at >= 10 ms each keep the background streams going well past the stall.
    settings = WorkloadSettings(mixed_streams=3, max_tokens=200, long_prompt_tokens=400)
    with serve_fake(state) as base_url:
        config = BenchConfig(base_url=base_url, settings=settings, workloads=("mixed",), calibrate=False)
        suite = asyncio.run(run_suite(config))
    (mixed,) = suite.workloads
    background, arriving = mixed.phases
    assert [s.label for s in mixed.summaries] == ["background c=3", "long prompt"]
    assert all(s.errors == 0 for s in mixed.summaries)
    (long,) = arriving.results
    assert long.ttft is not None
    assert all(r.ttft is not None and long.sent_at >= r.sent_at + r.ttft for r in background.results)
    assert state.max_running == 4  # the long prompt joined the three streams, it did not wait for them

    report = build_report(suite, flags={}, label="mixed")
    numbers = report["workloads"][0]["mixed"]
    assert numbers["background_streams"] == numbers["streams_through_window"] == 3
    assert numbers["long_prompt_tokens"] >= 300
    assert numbers["gaps_in_window"] >= 3  # each stream paused at least once while the prompt was read
    # The stall is the longest gap in the window. Half of it as the bound leaves room for loopback
    # and event-loop jitter around the two tokens (the exact arithmetic is in test_metrics).
    assert numbers["gap_in_window_max"] >= state.prefill_stall / 2
    assert numbers["gap_in_window_p95"] is not None and numbers["itl_outside_window_p50"] is not None
    assert "mixed: the long prompt (" in render_markdown(report)


def test_server_without_usage_gets_chunks_counted() -> None:
    state = FakeServerState(send_usage=False)
    with serve_fake(state) as base_url:
        suite = asyncio.run(run_suite(BenchConfig(base_url=base_url, settings=SMALL, workloads=("short",))))
    assert not suite.tokens_per_word_measured
    (summary,) = suite.workloads[0].summaries
    assert not summary.usage_reported
    assert summary.completion_tokens.mean == 12
    assert summary.prompt_tokens.count == 0


def test_cli_writes_json_and_markdown_reports(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    json_out, md_out = tmp_path / "bench.json", tmp_path / "bench.md"
    with serve_fake(FakeServerState()) as base_url:
        code = main(
            [
                "bench",
                "--base-url",
                base_url,
                "--workloads",
                "short,prefix,json",
                "--requests",
                "2",
                "--max-tokens",
                "8",
                "--prefix-tokens",
                "100",
                "--json",
                str(json_out),
                "--markdown",
                str(md_out),
            ]
        )
    assert code == 0
    report = json.loads(json_out.read_text())
    assert report["target"]["model"] == MODEL_ID
    assert report["target"]["engine"] == "fake-engine"
    assert report["target"]["quant"] == "Q4_K_M"
    assert report["flags"]["workloads"] == "short,prefix,json"
    assert "mixed_streams" not in report["flags"]  # only recorded when the mixed workload runs
    assert report["machine"]["logical_cores"] >= 1
    assert [w["name"] for w in report["workloads"]] == ["short", "prefix", "json"]
    assert len(report["workloads"][1]["prefix_pairs"]) == 2
    assert report["workloads"][2]["json_valid"] == {"valid": 2, "checked": 2}
    markdown = md_out.read_text()
    assert MODEL_ID in markdown and "| short | c=1 | 1 | 2/0 |" in markdown
    assert "host load average (1 min)" in markdown
    assert markdown in capsys.readouterr().out


def test_cli_runs_the_mixed_workload_when_asked(tmp_path: Path) -> None:
    json_out = tmp_path / "bench.json"
    with serve_fake(FakeServerState(token_delay=0.005)) as base_url:
        arguments = ["bench", "--base-url", base_url, "--workloads", "mixed", "--mixed-streams", "2"]
        code = main([*arguments, "--max-tokens", "40", "--long-prompt-tokens", "100", "--json", str(json_out)])
    assert code == 0
    report = json.loads(json_out.read_text())
    assert report["flags"]["workloads"] == "mixed" and report["flags"]["mixed_streams"] == 2
    assert report["settings"]["mixed_streams"] == 2
    (mixed,) = report["workloads"]
    assert [(p["label"], p["concurrency"], p["errors"]) for p in mixed["phases"]] == [
        ("background c=2", 2, 0),
        ("long prompt", 1, 0),
    ]
    assert set(mixed["mixed"]) >= {
        "long_ttft",
        "gap_in_window_max",
        "gap_in_window_p95",
        "tokens_in_window",
        "itl_outside_window_p50",
    }


def test_cli_reports_request_errors_and_exits_non_zero(capsys: pytest.CaptureFixture[str]) -> None:
    with serve_fake(FakeServerState()) as base_url:
        code = main(
            [
                "bench",
                "--base-url",
                base_url,
                "--model",
                "no-such-model",
                "--workloads",
                "short",
                "--requests",
                "1",
            ]
        )
    assert code == 1
    assert "HTTP 404" in capsys.readouterr().out


def test_cli_says_clearly_when_nothing_listens(capsys: pytest.CaptureFixture[str]) -> None:
    code = main(["bench", "--base-url", "http://127.0.0.1:9/v1", "--workloads", "short"])
    assert code != 0
    err = capsys.readouterr().err
    assert "nothing answers at http://127.0.0.1:9/v1" in err and "Traceback" not in err


def test_cli_rejects_unknown_workload(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit):
        main(["bench", "--base-url", "http://127.0.0.1:9/v1", "--workloads", "short,warp"])
    assert "unknown workload" in capsys.readouterr().err
