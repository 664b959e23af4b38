"""The arithmetic behind every bench number: percentiles, TPOT, aggregate rates, prefix ratios, report."""

from __future__ import annotations

import math

import pytest

from launcher.bench.metrics import (
    Distribution,
    inter_token_latencies,
    json_validity,
    percentile,
    prefill_interference,
    prefix_pairs,
    summarize_phase,
    time_per_output_token,
)
from launcher.bench.runner import PhaseResult, RequestResult


def test_percentile_interpolates_between_ranks_like_numpy() -> None:
    values = [1.0, 2.0, 3.0, 4.0, 5.0, 6.0, 7.0, 8.0, 9.0, 10.0]
    assert percentile(values, 50) == pytest.approx(5.5)
    assert percentile(values, 95) == pytest.approx(9.55)
    assert percentile(values, 99) == pytest.approx(9.91)
    assert percentile(values, 0) == 1.0
    assert percentile(values, 100) == 10.0


def test_percentile_ignores_input_order_and_handles_edges() -> None:
    assert percentile([3.0, 1.0, 2.0], 50) == 2.0
    assert percentile([7.0], 99) == 7.0
    assert percentile([], 50) is None
    with pytest.raises(ValueError, match=r"0\.\.100"):
        percentile([1.0], 101)


def test_distribution_of_empty_samples_is_all_none() -> None:
    assert Distribution.of([]) == Distribution(0, None, None, None, None)
    assert Distribution.of([2.0, 4.0]).mean == 3.0


def _result(ttft: float, gaps: list[float], tokens: int | None = None, prompt: int | None = 100) -> RequestResult:
    times = [ttft]
    for gap in gaps:
        times.append(times[-1] + gap)
    count = tokens if tokens is not None else len(times)
    return RequestResult(
        ok=True,
        e2e=times[-1] + 0.01,
        ttft=ttft,
        token_times=times,
        completion_tokens=count,
        prompt_tokens=prompt,
        usage_reported=True,
    )


def test_tpot_uses_reported_token_count_not_chunk_count() -> None:
    # 3 chunks over 0.2 s, but the server says 5 tokens (multi-token chunks): 0.2 / 4.
    result = _result(0.5, [0.1, 0.1], tokens=5)
    assert time_per_output_token(result) == pytest.approx(0.05)
    assert inter_token_latencies(result) == pytest.approx([0.1, 0.1])


def test_tpot_undefined_for_single_token_answers() -> None:
    assert time_per_output_token(_result(0.5, [], tokens=1)) is None


def test_phase_summary_rates() -> None:
    ok = [_result(0.5, [0.1] * 9), _result(1.0, [0.05] * 9)]
    failed = RequestResult(ok=False, e2e=0.1, error="HTTP 500: boom")
    summary = summarize_phase(PhaseResult("c=2", 2, [*ok, failed], wall_time=2.0))
    assert summary.requests == 3 and summary.errors == 1
    assert summary.error_samples == ("HTTP 500: boom",)
    assert summary.aggregate_tps == pytest.approx(20 / 2.0)
    assert summary.requests_per_s == pytest.approx(1.0)
    assert summary.ttft.p50 == pytest.approx(0.75)
    assert summary.tpot.mean == pytest.approx(0.075)
    assert summary.decode_tps_per_stream.p50 == pytest.approx(15.0)  # mean of 10 and 20 tok/s
    assert summary.prefill_tps.p50 == pytest.approx((200 + 100) / 2)
    assert summary.usage_reported


def test_prefix_pairs_ratio_warm_over_cold() -> None:
    phase = PhaseResult("pair 1", 1, [_result(2.0, [0.1]), _result(0.25, [0.1])], wall_time=3.0)
    broken = PhaseResult("pair 2", 1, [_result(2.0, [0.1]), RequestResult(ok=False, e2e=0.1)], wall_time=3.0)
    pairs = prefix_pairs([phase, broken])
    assert len(pairs) == 1
    assert pairs[0].ratio == pytest.approx(0.125)
    assert math.isinf(type(pairs[0])(None, 0.0, 1.0).ratio)


def test_json_validity_requires_every_key() -> None:
    results = [
        RequestResult(ok=True, e2e=1, text='{"a": 1, "b": 2}'),
        RequestResult(ok=True, e2e=1, text='{"a": 1}'),
        RequestResult(ok=True, e2e=1, text="not json"),
        RequestResult(ok=False, e2e=1, text='{"a": 1, "b": 2}'),
    ]
    assert json_validity(results, ["a", "b"]) == (1, 3)


def _stream(sent_at: float, arrivals: list[float], prompt: int | None = None) -> RequestResult:
    """A request sent at `sent_at` whose tokens arrived at the given absolute perf_counter times."""
    times = [t - sent_at for t in arrivals]
    return RequestResult(
        ok=True,
        e2e=times[-1] + 0.01,
        ttft=times[0],
        token_times=times,
        completion_tokens=len(times),
        prompt_tokens=prompt,
        sent_at=sent_at,
    )


def test_prefill_interference_takes_the_gaps_that_overlap_the_long_prompts_read() -> None:
    # The long prompt is sent at 100.5 and its first token comes at 101.5: that is the window.
    long = _stream(100.5, [101.5, 101.6], prompt=1500)
    background = [
        # A 0.7 s pause fully inside the window, and pauses straddling its start (0.2) and end (0.3).
        _stream(100.0, [100.1, 100.2, 100.3, 100.4, 100.6, 101.3, 101.6, 101.7, 101.8]),
        # A 1.45 s gap after the window must not count as inside, however long it is.
        _stream(100.05, [100.2, 100.4, 101.0, 101.1, 101.55, 103.0]),
        # Finished before the long prompt was sent: its gap is outside, and it did not stream through.
        _stream(100.0, [100.1, 100.2]),
        RequestResult(ok=False, e2e=0.1, error="HTTP 500: boom", sent_at=100.0),
    ]
    interference = prefill_interference(background, long)
    assert interference is not None
    assert interference.long_ttft == pytest.approx(1.0)
    assert interference.long_prompt_tokens == 1500
    assert interference.background_streams == 3
    assert interference.streams_through_window == 2
    assert interference.tokens_in_window == 4  # 100.6, 101.3, 101.0 and 101.1
    assert interference.gaps_in_window == 6  # 0.2, 0.7, 0.3 and 0.6, 0.1, 0.45
    assert interference.gap_in_window_max == pytest.approx(0.7)
    assert interference.gap_in_window_p95 == pytest.approx(0.675)
    assert interference.itl_outside_window_p50 == pytest.approx(0.1)


def test_prefill_interference_needs_the_long_prompts_first_token() -> None:
    background = [_stream(100.0, [100.1, 100.2])]
    assert prefill_interference(background, RequestResult(ok=False, e2e=1.0, error="timeout")) is None
    no_tokens = prefill_interference([], _stream(100.0, [100.5]))
    assert no_tokens is not None and no_tokens.gap_in_window_max is None and no_tokens.tokens_in_window == 0
