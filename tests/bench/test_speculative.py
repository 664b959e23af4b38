"""scripts/bench-speculative's arithmetic on fixed numbers: decode rates, medians, targets, the text check."""

from __future__ import annotations

import pytest

from launcher.bench.speculative import (
    Run,
    Stream,
    all_verdicts,
    edit_prompt,
    first_difference,
    grid,
    tables,
    text_check,
)


def _stream(first: float, last: float, tokens: int, text: str = "x", drafted: int | None = None) -> Stream:
    return Stream(sent=0.0, first=first, last=last, completion_tokens=tokens, text=text, draft_n=drafted)


def _runs(contender: str, rate: float, *, text: str = "same", acc: tuple[int, int] | None = None) -> list[Run]:
    """Edit x1 at `rate` tok/s (11 tokens over 10/rate s) in three reps, and edit x4 at `rate` per stream."""
    runs = []
    for rep in range(3):
        one = Run(contender, "edit", 1, rep, [_stream(1.0, 1.0 + 10 / rate, 11, text)])
        four = Run(contender, "edit", 4, rep, [_stream(1.0 + i, 1.0 + i + 10 / rate, 11) for i in range(4)])
        if acc is not None:
            one.draft_n, one.draft_accepted = acc[1], acc[0]
        runs += [one, four]
    return runs


def test_decode_rates_skip_the_first_token() -> None:
    run = Run("ours-off", "edit", 4, 0, [_stream(1.0, 3.0, 21), _stream(2.0, 4.0, 41)])
    assert run.per_stream_tps == pytest.approx((10 + 20) / 2)
    assert run.aggregate_tps == pytest.approx(62 / 3.0)  # all tokens over first token of any to last of any
    assert Run("ours-off", "edit", 1, 0, [Stream(sent=0.0)]).per_stream_tps is None  # nothing arrived


def test_targets_and_best_native() -> None:
    runs = _runs("ours-off", 10.0) + _runs("ours-auto", 16.0, acc=(30, 40))
    runs += _runs("llama-ngram-simple", 12.0) + _runs("llama-ngram-mod", 20.0)
    found = {(w, s, m, v.name): v for w, s, m, v in all_verdicts(runs)}
    assert found["edit", 1, "per_stream_tps", "auto/off"].value == pytest.approx(1.6)
    assert found["edit", 1, "per_stream_tps", "auto/off"].passed
    assert found["edit", 1, "per_stream_tps", "auto/best n-gram"].value == pytest.approx(0.8)  # mod is the best
    assert not found["edit", 1, "per_stream_tps", "auto/best n-gram"].passed
    assert found["edit", 4, "aggregate_tps", "auto/off"].threshold == 1.0
    assert ("edit", 4, "per_stream_tps", "auto/best n-gram") not in found  # 4 streams: judged on the aggregate
    assert grid(runs)["edit", 1]["ours-auto"].acceptance == pytest.approx(0.75)
    table = tables(runs, ["ours-off", "ours-auto", "llama-ngram-simple", "llama-ngram-mod"])
    assert (
        "| edit | 1 | per stream | 10.0 | 16.0 | 12.0 | 20.0 | 1.60x (>= 1.5x PASS) | 0.80x (>= 1x MISS) [ngram-mod] |"
        in table
    )
    assert "ours-auto 75% of 120" in table  # 3 reps of 40 drafted


def test_missing_contenders_give_na() -> None:
    table = tables(_runs("ours-auto", 16.0), ["ours-off", "ours-auto"])
    assert "n/a (>= 1.5x MISS)" in table
    assert "did not both run" in table


def test_text_check_reports_the_first_difference() -> None:
    assert first_difference("abc", "abc") is None
    assert first_difference("abcd", "abXd") == 2
    assert first_difference("abc", "abcdef") == 3
    same = _runs("ours-off", 10.0, text="def f():\n    pass\n") + _runs("ours-auto", 16.0, text="def f():\n    pass\n")
    assert text_check(same, "edit").startswith("edit: identical (18 characters, 3 reps)")
    differ = _runs("ours-off", 10.0, text="def f():\n    pass\n") + _runs(
        "ours-auto", 16.0, text="def f():\n    return\n"
    )
    assert "DIFFERENT in rep 1: first difference at character 13" in text_check(differ, "edit")


def test_edit_prompt_seeds_the_answer_with_the_first_line() -> None:
    prompt = edit_prompt("a.py", '"""Doc."""\nx = 1\n', "x", "y")
    assert prompt.endswith('renamed to `y`:\n```python\n"""Doc."""\n')
