"""The comparison verdicts: per-round ratios, medians over rounds, PASS/FAIL against the issue's targets."""

from __future__ import annotations

from typing import Any

import pytest

from launcher.bench.compare import Baseline, Round, measures_table, targets, targets_table


def _dist(p50: float, p95: float | None = None) -> dict[str, Any]:
    return {"count": 4, "mean": p50, "p50": p50, "p95": p95 if p95 is not None else p50, "p99": p95 or p50}


def _phase(concurrency: int, aggregate: float, decode: float, ttft_p95: float, errors: int = 0) -> dict[str, Any]:
    return {
        "label": f"c={concurrency}",
        "concurrency": concurrency,
        "requests": 4,
        "errors": errors,
        "aggregate_tps": aggregate,
        "decode_tps_per_stream": _dist(decode),
        "ttft": _dist(ttft_p95 / 2, ttft_p95),
        "completion_tokens": _dist(64),
    }


def _report(single: float, four: float, decode: float, ttft_p95: float, prefix_ratio: float | None) -> dict[str, Any]:
    workloads: list[dict[str, Any]] = [
        {"name": "sweep", "phases": [_phase(1, single, decode, 0.2), _phase(4, four, decode / 2, ttft_p95)]}
    ]
    if prefix_ratio is not None:
        pair = {"prompt_tokens": 2010, "cold_ttft": 2.0, "warm_ttft": 2.0 * prefix_ratio, "ratio": prefix_ratio}
        workloads.insert(
            0, {"name": "prefix", "phases": [], "prefix_pairs": [pair], "prefix_ttft_ratio_max": prefix_ratio}
        )
    load = {"load_average_start": 1.0, "load_average_end": 1.5, "server_cores_busy": 1.8}
    return {"workloads": workloads, "peak_memory": {"bytes": 700 * 2**20}, "host_load": load}


def _round(ours_decode: float, ours_four: float, theirs_four: float, prefix: float = 0.1) -> Round:
    return Round(
        Baseline(decode_tps=50.0, ttft=0.1, tokens=64, tokens_per_word=1.1),
        ours=_report(single=48.0, four=ours_four, decode=ours_decode, ttft_p95=0.4, prefix_ratio=prefix),
        theirs=_report(single=45.0, four=theirs_four, decode=45.0, ttft_p95=2.0, prefix_ratio=None),
    )


def test_targets_use_the_median_of_per_round_ratios() -> None:
    # Round 2 is an outlier (a noisy neighbour); the median ignores it.
    rounds = [_round(49.0, 100.0, 30.0), _round(20.0, 40.0, 40.0), _round(48.5, 96.0, 31.0)]
    by_name = {t.name: t for t in targets(rounds)}
    decode = by_name["single-stream decode vs in-process llama-cpp-python"]
    assert decode.values == pytest.approx((0.98, 0.4, 0.97))
    assert decode.median == pytest.approx(0.97) and decode.passed
    versus_single = by_name["aggregate tok/s, 4 streams vs our 1 stream"]
    assert versus_single.median == pytest.approx(96.0 / 48.0) and versus_single.passed
    versus_theirs = by_name["aggregate tok/s, 4 streams vs llama_cpp.server's"]
    assert versus_theirs.median == pytest.approx(96.0 / 31.0) and versus_theirs.passed
    assert by_name["TTFT p95 at 4 concurrent streams"].passed
    assert by_name["warm / cold TTFT, shared ~2,000-token prefix"].median == pytest.approx(0.1)


def test_targets_fail_below_threshold_and_when_not_measured() -> None:
    slow = _round(ours_decode=40.0, ours_four=60.0, theirs_four=45.0, prefix=0.6)
    slow.ours["workloads"][1]["phases"][1]["errors"] = 2  # the 4-stream phase lost requests
    by_name = {t.name: t for t in targets([slow])}
    assert not by_name["single-stream decode vs in-process llama-cpp-python"].passed  # 0.8x
    failed_phase = by_name["aggregate tok/s, 4 streams vs our 1 stream"]
    assert failed_phase.median is None and not failed_phase.passed
    assert not by_name["warm / cold TTFT, shared ~2,000-token prefix"].passed


def test_tables_show_rounds_medians_and_verdicts() -> None:
    rounds = [_round(49.0, 100.0, 30.0), _round(48.0, 98.0, 32.0)]
    table = targets_table(rounds)
    assert "| single-stream decode vs in-process llama-cpp-python | >= 0.97x | 0.98x | 0.96x | 0.97x | PASS |" in table
    measures = measures_table(rounds)
    assert "| decode tok/s, 1 stream | 50.0 | 48.5 | 45.0 |" in measures
    assert "| peak RSS (MiB) | - | 700 | 700 |" in measures


def _round_with_native(ours_four: float, native_four: float) -> Round:
    plain = _round(48.0, ours_four, 30.0)
    native = _report(single=50.0, four=native_four, decode=52.0, ttft_p95=0.3, prefix_ratio=0.05)
    native["peak_memory"]["bytes"] = 400 * 2**20
    return Round(plain.baseline, plain.ours, plain.theirs, native=native)


def test_without_native_the_tables_keep_three_contenders_and_five_targets() -> None:
    rounds = [_round(49.0, 100.0, 30.0)]
    assert len(targets(rounds)) == 5
    assert "native" not in measures_table(rounds) + targets_table(rounds)


def test_native_llama_server_gets_a_column_and_the_at_least_as_well_target() -> None:
    rounds = [_round_with_native(100.0, 90.0), _round_with_native(96.0, 100.0), _round_with_native(98.0, 95.0)]
    measures = measures_table(rounds)
    header, rule = measures.splitlines()[:2]
    assert header == (
        "| median over rounds | in-process llama-cpp-python | launcher serve | llama_cpp.server"
        " | llama-server (native) |"
    )
    assert rule == "|---|---|---|---|---|"
    assert "| aggregate tok/s, 4 streams | - | 98.0 | 30.0 | 95.0 |" in measures
    assert "| decode tok/s, 1 stream | 50.0 | 48.0 | 45.0 | 52.0 |" in measures
    assert "| shared ~2,000-token prefix: cold / warm TTFT (ms) | - | 2000 / 200 | - / - | 2000 / 100 |" in measures
    assert "| peak RSS (MiB) | - | 700 | 700 | 400 |" in measures

    by_name = {t.name: t for t in targets(rounds)}
    assert len(by_name) == 6
    versus_native = by_name["aggregate tok/s, 4 streams vs native llama-server's"]
    assert versus_native.values == pytest.approx((100 / 90, 0.96, 98 / 95))
    assert versus_native.median == pytest.approx(98 / 95) and versus_native.passed
    table = targets_table(rounds)
    assert (
        "| aggregate tok/s, 4 streams vs native llama-server's | >= 1x | 1.11x | 0.96x | 1.03x | 1.03x | PASS |"
        in table
    )


def test_slower_than_native_fails_the_extra_target() -> None:
    # Matching llama_cpp.server three times over does not help when native batches better still.
    rounds = [_round_with_native(ours_four=90.0, native_four=100.0)]
    by_name = {t.name: t for t in targets(rounds)}
    assert by_name["aggregate tok/s, 4 streams vs llama_cpp.server's"].passed
    assert not by_name["aggregate tok/s, 4 streams vs native llama-server's"].passed
    assert "| aggregate tok/s, 4 streams vs native llama-server's | >= 1x | 0.90x | 0.90x | FAIL |" in targets_table(
        rounds
    )
