"""Workload prompts are deterministic, sized in tokens, and shaped as docs/benchmarks.md describes."""

from __future__ import annotations

import pytest

from launcher.bench.workloads import (
    DEFAULT_WORKLOADS,
    WORKLOAD_NAMES,
    Phase,
    Workload,
    WorkloadSettings,
    build_workloads,
)


def test_same_seed_same_prompts_other_seed_other_prompts() -> None:
    first = build_workloads(WORKLOAD_NAMES, WorkloadSettings(seed=1))
    again = build_workloads(WORKLOAD_NAMES, WorkloadSettings(seed=1))
    other = build_workloads(WORKLOAD_NAMES, WorkloadSettings(seed=2))
    assert first == again
    assert first[0].phases[0].requests != other[0].phases[0].requests


def test_prompt_lengths_follow_tokens_per_word() -> None:
    settings = WorkloadSettings(long_prompt_tokens=1500, tokens_per_word=1.5, requests=2)
    (long,) = build_workloads(("long",), settings)
    words = len(long.phases[0].requests[0].messages[0]["content"].split())
    assert 1000 <= words <= 1030  # 1500 / 1.5 words of notes plus the question


def test_prefix_pairs_share_the_document_and_differ_in_the_question() -> None:
    (prefix,) = build_workloads(("prefix",), WorkloadSettings(prefix_pairs=2, tokens_per_word=1.0))
    assert len(prefix.phases) == 2
    for phase in prefix.phases:
        cold, warm = (request.messages[0]["content"] for request in phase.requests)
        assert phase.sequential
        document, question = cold.split("Question:")
        assert warm.startswith(document) and len(document.split()) >= 2000
        assert not warm.endswith(question)
    first_documents = [phase.requests[0].messages[0]["content"][:200] for phase in prefix.phases]
    assert first_documents[0] != first_documents[1]  # each pair starts cold


def test_sweep_has_one_phase_per_level_with_at_least_that_many_requests() -> None:
    (sweep,) = build_workloads(("sweep",), WorkloadSettings(concurrency=(1, 4, 8), requests=4))
    assert [(p.concurrency, len(p.requests)) for p in sweep.phases] == [(1, 4), (4, 4), (8, 8)]


def test_json_workload_asks_for_a_schema_and_streams_usage() -> None:
    (json_workload,) = build_workloads(("json",), WorkloadSettings(requests=1))
    body = json_workload.phases[0].requests[0].body("m", seed=3)
    assert body["response_format"]["type"] == "json_schema"
    assert body["stream"] and body["stream_options"] == {"include_usage": True}
    assert body["model"] == "m" and body["seed"] == 3


def test_unknown_workload_is_rejected() -> None:
    with pytest.raises(ValueError, match="unknown workload"):
        build_workloads(("bogus",), WorkloadSettings())


def test_mixed_starts_its_streams_together_then_one_long_prompt_joins_them() -> None:
    settings = WorkloadSettings(mixed_streams=2, max_tokens=40, long_prompt_tokens=600, tokens_per_word=1.0)
    (mixed,) = build_workloads(("mixed",), settings)
    background, arriving = mixed.phases
    assert background.concurrency == len(background.requests) == 2 and not background.joins_running_streams
    assert all(r.max_tokens == 40 for r in background.requests)
    assert arriving.joins_running_streams and arriving.concurrency == 1
    (long,) = arriving.requests
    assert len(long.messages[0]["content"].split()) >= 600
    assert long.max_tokens == settings.short_answer_tokens


def test_mixed_is_opt_in() -> None:
    assert "mixed" in WORKLOAD_NAMES and "mixed" not in DEFAULT_WORKLOADS
    assert DEFAULT_WORKLOADS == ("short", "long", "prefix", "sweep", "json")


def test_a_phase_can_only_join_a_phase_that_runs_before_it() -> None:
    joining = Phase("late", 1, (), joins_running_streams=True)
    with pytest.raises(ValueError, match="no running phase to join"):
        Workload("bad", "joins nothing", (joining,))
    with pytest.raises(ValueError, match="no running phase to join"):
        Workload("bad", "a chain", (Phase("first", 1, ()), joining, joining))
