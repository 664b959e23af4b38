"""The runtime-neutral half of speculative decoding: where drafts come from and how many pay."""

from __future__ import annotations

import numpy as np
import pytest

from launcher.engines.speculation import PROBE_EVERY, DraftStats, Offer, Speculator, StepCost, ngram_draft


def tokens(*values: int) -> np.ndarray:
    return np.array(values, dtype=np.int32)


def test_a_draft_continues_the_longest_most_recent_match() -> None:
    # "1 2 3" occurs twice before the end; only the second is preceded by 9 as the end is
    history = tokens(5, 1, 2, 3, 4, 4, 9, 1, 2, 3, 7, 7, 0, 9, 1, 2, 3)
    assert list(ngram_draft(history, len(history), 3)) == [7, 7, 0]
    assert list(ngram_draft(history, len(history), 1)) == [7]
    # the trailing tokens before `length` are what is matched, whatever lies after it
    assert list(ngram_draft(history, 10, 2)) == [4, 4]


def test_no_draft_without_a_repeat_of_three_tokens() -> None:
    assert len(ngram_draft(tokens(1, 2, 3, 4, 5, 6, 2, 3), 8, 4)) == 0  # only "2 3" repeats
    assert len(ngram_draft(tokens(1, 2, 3), 3, 4)) == 0
    assert len(ngram_draft(tokens(1, 2, 3, 1, 2, 3), 6, 0)) == 0


def test_a_draft_never_runs_past_the_history() -> None:
    history = tokens(8, 1, 2, 3, 1, 2, 3)  # the match ending at 3 is followed by "1 2 3" only
    assert list(ngram_draft(history, len(history), 16)) == [1, 2, 3]


def test_acceptance_follows_what_was_accepted_lately() -> None:
    stats = DraftStats()
    prior = stats.acceptance
    for _ in range(5):
        stats.record(drafted=8, accepted=8)
    assert stats.acceptance > 0.95 > prior
    for _ in range(20):
        stats.record(drafted=4, accepted=0)
    assert stats.acceptance < 0.25


def test_the_step_cost_is_fitted_from_steps_of_different_sizes() -> None:
    cost = StepCost()
    assert cost.estimate() is None
    for rows in (1, 4, 1, 9, 2, 1, 6, 1) * 5:
        cost.record(rows, 0.030 + 0.010 * rows)
    fixed, per_row = cost.estimate() or (0.0, 0.0)
    # the assumed slope (a quarter step a row) still weighs a little: within 3% of the true line
    assert fixed == pytest.approx(0.030, rel=0.03) and per_row == pytest.approx(0.010, rel=0.03)


def test_before_the_rows_vary_a_row_is_assumed_to_cost_a_quarter_step() -> None:
    cost = StepCost()
    for _ in range(10):
        cost.record(1, 0.040)
    fixed, per_row = cost.estimate() or (0.0, 0.0)
    assert abs(per_row - 0.010) < 1e-9 and abs(fixed - 0.030) < 1e-9


def trained(accepted_share: float) -> DraftStats:
    stats = DraftStats()
    for _ in range(30):
        stats.record(drafted=10, accepted=round(10 * accepted_share))
    return stats


def speculator(fixed: float, per_row: float) -> Speculator:
    spec = Speculator()
    for rows in (1, 3, 1, 8, 2) * 6:
        spec.cost.record(rows, fixed + per_row * rows)
    return spec


def test_drafts_are_long_when_they_are_accepted_and_rows_are_cheap() -> None:
    draft = np.arange(16, dtype=np.int32)
    gpu_like = speculator(fixed=0.020, per_row=0.0005)
    assert gpu_like.plan([Offer(trained(1.0), draft, "auto")], streams=1, room=64) == [16]
    cpu_like = speculator(fixed=0.010, per_row=0.010)
    (size,) = cpu_like.plan([Offer(trained(0.9), draft, "auto")], streams=1, room=64)
    assert 1 <= size < 16  # each further token is less likely accepted than its row is worth


def test_prose_whose_drafts_fail_stops_drafting_but_probes() -> None:
    spec = speculator(fixed=0.010, per_row=0.004)
    stats = trained(0.0)
    offer = Offer(stats, np.arange(8, dtype=np.int32), "auto")
    sizes = [spec.plan([offer], streams=1, room=64)[0] for _ in range(PROBE_EVERY * 3)]
    assert sizes.count(1) == 3 and sum(sizes) == 3  # one probe token every PROBE_EVERY matches


def test_a_full_batch_drafts_less_per_stream() -> None:
    spec = speculator(fixed=0.010, per_row=0.004)
    stats = trained(0.8)
    draft = np.arange(16, dtype=np.int32)
    (alone,) = spec.plan([Offer(stats, draft, "auto")], streams=1, room=64)
    crowded = spec.plan([Offer(stats, draft, "auto") for _ in range(4)], streams=4, room=64)
    assert alone > 0 and max(crowded) < alone


def test_ngram_mode_takes_the_whole_draft_within_the_room() -> None:
    spec = Speculator()
    offers = [Offer(trained(0.0), np.arange(10, dtype=np.int32), "ngram") for _ in range(2)]
    assert spec.plan(offers, streams=2, room=16) == [10, 6]


def test_one_slow_step_of_a_new_size_does_not_stop_a_fresh_sequence_drafting() -> None:
    # A fresh server's first 3-row step was timed at three times its 1-row steps (a one-time cost); a plain
    # least-squares fit then says a row costs a whole step, and nothing is drafted until the next probe.
    spec = Speculator()
    for rows, seconds in ((1, 0.017), (1, 0.0185), (3, 0.051)):
        spec.cost.record(rows, seconds)
    fixed, per_row = spec.cost.estimate() or (0.0, 0.0)
    assert fixed > 0.005 and per_row < 0.012
    (size,) = spec.plan([Offer(DraftStats(), np.arange(64, dtype=np.int32), "auto")], streams=1, room=64)
    assert size >= 1
