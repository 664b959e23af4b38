"""n-gram speculative decoding in the MLX engine: the same tokens as without it, drafts verified in the batch.

The tiny random model seldom repeats its prompt, so most drafts are rejected (their KV taken back on
every step); on REPETITIVE it falls into runs it does repeat, so some drafts are accepted too. Every
test checks that drafts were verified and accepted, so none can pass by never speculating.
"""

from __future__ import annotations

import asyncio
import json
import shutil
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from launcher.engines.base import Constraint, SamplingParams
from launcher.engines.mlx.model import MlxModel
from launcher.engines.speculation import PROBE_EVERY, DraftStats, Offer, StepCost
from tests.engines.mlx.support import load
from tests.engines.support import Outcome, greedy, run

REPETITIVE = "dark two tree light three " * 6
OTHERS = ("one two three four ", "the cat sat on the mat ", "light tree sun ")


@pytest.fixture
def shifts(monkeypatch: pytest.MonkeyPatch) -> list[list[int]]:
    """Records the tokens each step kept per row (`_take_back`'s `kept`), on the scheduler thread."""
    from launcher.engines.mlx._speculative import SpeculativeBatch

    seen: list[list[int]] = []
    original = SpeculativeBatch._take_back

    def recording(self: Any, kept: list[int], written: int) -> None:
        seen.append(list(kept))
        original(self, kept, written)

    monkeypatch.setattr(SpeculativeBatch, "_take_back", recording)
    return seen


@pytest.mark.parametrize("mode", ["ngram", "auto"])
async def test_greedy_output_is_the_same_with_and_without_speculation(
    mlx_model: MlxModel, mode: str, shifts: list[list[int]]
) -> None:
    prompt = mlx_model.tokenize(REPETITIVE)
    off = await run(mlx_model, greedy(prompt, 200, speculative="off", logprobs=0))
    assert off.last.draft_tokens == 0 and not shifts  # "off" alone takes mlx-lm's own step
    drafted = await run(mlx_model, greedy(prompt, 200, speculative=mode, logprobs=0))
    assert drafted.last.draft_tokens > (100 if mode == "ngram" else 10)
    assert drafted.last.accepted_draft_tokens > (20 if mode == "ngram" else 0)
    if mode == "ngram":  # auto sizes drafts from step timings: how many a step keeps varies with the load
        assert any(max(kept) > 2 for kept in shifts)  # a step that kept more than one draft token
    assert drafted.tokens == off.tokens
    assert drafted.text == off.text
    assert drafted.last.completion_tokens == off.last.completion_tokens == 200
    # each token's logprob comes from the row it was sampled from
    assert [e.logprobs[0].logprob for e in drafted.events if e.token_ids] == pytest.approx(
        [e.logprobs[0].logprob for e in off.events if e.token_ids], abs=1e-4
    )


async def test_seeded_sampling_draws_the_same_tokens_with_speculation(mlx_model: MlxModel) -> None:
    # Each emitted token is sampled from its own row through the request's sampler, one draw per token
    # as without speculation, so a seeded request gives the same tokens.
    prompt = mlx_model.tokenize(REPETITIVE)
    sampling = SamplingParams(temperature=0.9, seed=7)
    off = await run(mlx_model, greedy(prompt, 120, sampling=sampling, speculative="off"))
    drafted = await run(mlx_model, greedy(prompt, 120, sampling=sampling, speculative="ngram"))
    assert drafted.last.draft_tokens > 0
    assert drafted.tokens == off.tokens


async def test_processors_and_grammars_see_only_kept_tokens(mlx_model: MlxModel) -> None:
    # Rows with logits processors (a penalty, a grammar) are sampled position by position through them.
    prompt = mlx_model.tokenize(REPETITIVE)
    penalized = SamplingParams(temperature=0.0, repeat_penalty=1.05)
    off = await run(mlx_model, greedy(prompt, 120, sampling=penalized, speculative="off"))
    drafted = await run(mlx_model, greedy(prompt, 120, sampling=penalized, speculative="ngram"))
    assert drafted.last.draft_tokens > 0
    assert drafted.tokens == off.tokens
    # A grammar that makes the text repeat: drafts many tokens long, accepted through the grammar.
    schema = {
        "type": "object",
        "properties": {
            "items": {"type": "array", "items": {"enum": ["dark two", "tree light"]}, "minItems": 10, "maxItems": 10}
        },
        "required": ["items"],
    }
    for constraint in (
        Constraint(kind="regex", pattern="(dark two tree light three ){4}"),
        Constraint(kind="json_schema", schema=schema),
    ):
        plain = await run(mlx_model, greedy(prompt, 150, constraint=constraint, ignore_eos=False, speculative="off"))
        constrained = await run(
            mlx_model, greedy(prompt, 150, constraint=constraint, ignore_eos=False, speculative="ngram")
        )
        assert constrained.last.accepted_draft_tokens > 20
        assert constrained.last.finish_reason == plain.last.finish_reason == "stop"
        assert constrained.text == plain.text and constrained.tokens == plain.tokens
    assert json.loads(constrained.text)["items"]


async def test_streams_drafting_in_one_batch_give_their_own_tokens(
    mlx_model: MlxModel, shifts: list[list[int]]
) -> None:
    prompts = [mlx_model.tokenize(REPETITIVE)] + [mlx_model.tokenize(text * 5) for text in OTHERS]

    async def all_at_once(mode: str) -> list[Outcome]:
        return await asyncio.gather(*(run(mlx_model, greedy(p, 150, speculative=mode)) for p in prompts))

    off, drafted = await all_at_once("off"), await all_at_once("ngram")
    assert sum(outcome.last.draft_tokens for outcome in drafted) > 100
    assert sum(outcome.last.accepted_draft_tokens for outcome in drafted) > 20
    # steps where all four rows were verified together, and rows kept different numbers of tokens
    assert any(len(kept) == 4 and len(set(kept)) > 1 for kept in shifts)
    assert [outcome.tokens for outcome in drafted] == [outcome.tokens for outcome in off]


async def test_streams_off_and_drafting_share_a_batch(mlx_model: MlxModel) -> None:
    prompts = [mlx_model.tokenize(REPETITIVE), mlx_model.tokenize(OTHERS[0] * 5)]
    expected = await asyncio.gather(*(run(mlx_model, greedy(p, 120, speculative="off")) for p in prompts))
    mixed = await asyncio.gather(
        run(mlx_model, greedy(prompts[0], 120, speculative="ngram")),
        run(mlx_model, greedy(prompts[1], 120, speculative="off")),
    )
    assert mixed[0].last.accepted_draft_tokens > 0 and mixed[1].last.draft_tokens == 0
    assert [outcome.tokens for outcome in mixed] == [outcome.tokens for outcome in expected]


async def test_a_stream_cancelled_mid_draft_leaves_the_others_intact(mlx_model: MlxModel) -> None:
    prompts = [mlx_model.tokenize(text * 5) for text in OTHERS[:2]]
    expected = [(await run(mlx_model, greedy(p, 120, speculative="off"))).tokens for p in prompts]
    before = mlx_model.stats().speculative_draft_tokens_total
    doomed = mlx_model.generate(greedy(mlx_model.tokenize(REPETITIVE), 600, speculative="ngram"))
    others = [asyncio.create_task(run(mlx_model, greedy(p, 120, speculative="ngram"))) for p in prompts]
    seen = [await anext(doomed) for _ in range(40)]  # several steps in: drafts have been verified
    assert mlx_model.stats().speculative_draft_tokens_total > before
    await doomed.aclose()  # type: ignore[attr-defined]
    results = await asyncio.gather(*others)
    assert all(event.token_ids for event in seen)
    assert [outcome.tokens for outcome in results] == expected
    assert sum(outcome.last.draft_tokens for outcome in results) > 0
    assert mlx_model.stats().requests_running == 0
    assert mlx_model.stats().kv_cache_used_tokens == 0


async def test_speculation_counters_and_the_off_switch(tiny_mlx_model: Path) -> None:
    served_off = load(tiny_mlx_model, parallel=2, speculative="off")
    try:
        prompt = served_off.tokenize(REPETITIVE)
        plain = await run(served_off, greedy(prompt, 160))
        assert plain.last.draft_tokens == 0
        overridden = await run(served_off, greedy(prompt, 160, speculative="ngram"))  # a request may turn it on
        stats = served_off.stats()
        assert overridden.last.accepted_draft_tokens > 0
        assert overridden.tokens == plain.tokens
        assert stats.speculative_draft_tokens_total == overridden.last.draft_tokens
        assert stats.speculative_accepted_tokens_total == overridden.last.accepted_draft_tokens
        assert stats.decode_tokens_total >= 2 * 160
    finally:
        served_off.close()


@pytest.fixture(scope="module")
def sliding_window_model(tiny_mlx_model: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[MlxModel]:
    """The tiny model with its first layer turned into a sliding-window one (a RotatingKVCache)."""
    directory = tmp_path_factory.mktemp("tiny-mlx-swa") / "tiny-mlx-swa"
    shutil.copytree(tiny_mlx_model, directory)
    config = json.loads((directory / "config.json").read_text())
    config.update(layer_types=["sliding_attention", "full_attention"], sliding_window=16)
    (directory / "config.json").write_text(json.dumps(config))
    model = load(directory, parallel=2)
    yield model
    model.close()


async def test_a_model_whose_cache_cannot_drop_tokens_does_not_speculate(sliding_window_model: MlxModel) -> None:
    prompt = sliding_window_model.tokenize(REPETITIVE)
    off = await run(sliding_window_model, greedy(prompt, 60, speculative="off"))
    asked = await run(sliding_window_model, greedy(prompt, 60, speculative="ngram"))
    assert asked.last.draft_tokens == 0 and asked.last.finish_reason == "length"
    assert asked.tokens == off.tokens
    assert sliding_window_model.stats().speculative_draft_tokens_total == 0


def test_only_plain_kv_caches_can_take_tokens_back() -> None:
    pytest.importorskip("mlx_lm", reason="the MLX engine needs the `mlx` extra")
    from mlx_lm.models.cache import ArraysCache, KVCache, RotatingKVCache

    from launcher.engines.mlx._speculative import supported

    assert supported([KVCache(), KVCache()])
    assert not supported([KVCache(), RotatingKVCache(max_size=16)])
    assert not supported([ArraysCache(size=2), KVCache()])
    assert not supported([])


def _offer(tokens: int, mode: Any = "auto", stats: DraftStats | None = None) -> Offer:
    return Offer(stats or DraftStats(), np.arange(tokens, dtype=np.int32), mode)


def _cost(per_row: float) -> StepCost:
    cost = StepCost()
    # 10 ms a step plus per_row a row, over enough steps of different sizes that the fit's starting
    # assumption (a row costs a quarter step) no longer weighs
    for rows in (1, 4, 2, 8) * 4:
        cost.record(rows, 0.010 + per_row * (rows - 1))
    return cost


def test_the_draft_width_weighs_the_padding_of_every_row() -> None:
    pytest.importorskip("mlx_lm", reason="the MLX engine needs the `mlx` extra")
    from launcher.engines.mlx._speculative import draft_width

    assert draft_width([_offer(5, "ngram"), _offer(9)], streams=2, cost=StepCost()) == 5  # nothing timed yet
    cheap, dear = _cost(0.0001), _cost(0.001)
    assert draft_width([_offer(8)], streams=1, cost=cheap) == 8
    hopeless = DraftStats(rejected=50.0)
    assert draft_width([_offer(8, stats=hopeless)], streams=1, cost=dear) == 0
    sure = DraftStats(accepted=50.0)
    assert draft_width([_offer(16, stats=sure)], streams=1, cost=dear) == 16
    # the same draft is worth less when every one of 8 rows pays for its positions
    assert draft_width([_offer(16, stats=sure)], streams=8, cost=dear) < 16
    probing = DraftStats(rejected=50.0, skipped=PROBE_EVERY - 1)
    assert draft_width([_offer(8, stats=probing)], streams=1, cost=dear) == 1
    assert probing.skipped == 0
