"""n-gram speculative decoding in the llama.cpp engine: the same tokens as without it, fewer steps.

The tiny random model rarely repeats its prompt, so most of its drafts are rejected: that exercises
the rollback of rejected draft tokens (their KV dropped) on every step. The starter model copying a
file accepts most of its drafts: that exercises several tokens per step.
"""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from launcher.core.errors import ConfigError, ModelFormatError
from launcher.engines.base import Constraint, GenerationRequest, SamplingParams
from launcher.engines.llamacpp.model import LlamaCppModel
from tests.engines.llamacpp.support import load
from tests.engines.support import Outcome, greedy, run
from tests.fixtures.models import write_tiny_gguf

REPETITIVE = "alpha beta gamma delta epsilon zeta eta theta " * 6
STARTER_COPY_SOURCE = Path(__file__).resolve().parents[3] / "launcher" / "engines" / "llamacpp" / "_pacing.py"


@pytest.fixture(scope="module", params=["tiny_gguf", "tiny_swa_gguf"])
def model(request: pytest.FixtureRequest) -> object:
    """The tiny model, plain and with a sliding-window layer (whose KV rollback is its own code path)."""
    loaded = load(request.getfixturevalue(request.param))
    yield loaded
    loaded.close()


async def test_greedy_output_is_the_same_with_and_without_speculation(model: LlamaCppModel) -> None:
    prompt = model.tokenize(REPETITIVE)
    off = await run(model, greedy(prompt, 160, speculative="off"))
    drafted = await run(model, greedy(prompt, 160, speculative="ngram"))
    assert off.last.draft_tokens == 0
    assert drafted.last.draft_tokens > 20 and drafted.last.accepted_draft_tokens > 0
    assert drafted.tokens == off.tokens
    assert drafted.last.completion_tokens == off.last.completion_tokens == 160


async def test_seeded_sampling_draws_the_same_tokens_with_speculation(model: LlamaCppModel) -> None:
    # Each emitted token is sampled from its own row through the request's sampler chain, one draw per
    # token, as without speculation: a seeded request gives the same tokens (the distribution is kept).
    # Plain temperature: a top-k cut between near-equal logits of this random model would turn on the
    # float rounding of the batch's shape, not on speculation (the "ngram" drafts make that shape fixed).
    prompt = model.tokenize(REPETITIVE)
    sampling = SamplingParams(temperature=0.9, seed=7)
    off = await run(model, greedy(prompt, 120, sampling=sampling, speculative="off"))
    drafted = await run(model, greedy(prompt, 120, sampling=sampling, speculative="ngram"))
    assert drafted.last.draft_tokens > 0
    assert drafted.tokens == off.tokens


async def test_grammar_constrained_output_is_verified_through_the_grammar(model: LlamaCppModel) -> None:
    prompt = model.tokenize("<|im_start|>user\nHello there, how are you today?<|im_end|>\n<|im_start|>assistant\n")
    json_object = Constraint(kind="json_object")
    off = await run(model, greedy(prompt, 120, constraint=json_object, ignore_eos=False, speculative="off"))
    drafted = await run(model, greedy(prompt, 120, constraint=json_object, ignore_eos=False, speculative="ngram"))
    assert drafted.last.draft_tokens > 0
    assert drafted.text == off.text and drafted.text.startswith("{")


async def test_streams_drafting_in_one_batch_give_their_own_tokens(model: LlamaCppModel) -> None:
    prompts = [model.tokenize(text * 5) for text in ("one two three four ", "red green blue ", "a b c d e f ")]
    prompts.append(model.tokenize(REPETITIVE))

    async def all_at_once(mode: str) -> list[Outcome]:
        return await asyncio.gather(*(run(model, greedy(p, 100, speculative=mode)) for p in prompts))

    off, drafted = await all_at_once("off"), await all_at_once("ngram")
    assert sum(outcome.last.draft_tokens for outcome in drafted) > 40
    assert [outcome.tokens for outcome in drafted] == [outcome.tokens for outcome in off]


async def test_a_stream_cancelled_mid_draft_leaves_the_others_intact(model: LlamaCppModel) -> None:
    prompts = [model.tokenize(text * 5) for text in ("one two three four ", "red green blue ")]
    expected = [(await run(model, greedy(p, 120, speculative="off"))).tokens for p in prompts]
    doomed = model.generate(greedy(model.tokenize(REPETITIVE), 400, speculative="ngram"))
    others = [asyncio.create_task(run(model, greedy(p, 120, speculative="ngram"))) for p in prompts]
    seen = [await anext(doomed) for _ in range(12)]  # several steps in: drafts have been verified
    await doomed.aclose()  # type: ignore[attr-defined]
    results = await asyncio.gather(*others)
    assert all(event.token_ids for event in seen)
    assert [outcome.tokens for outcome in results] == expected
    assert sum(outcome.last.draft_tokens for outcome in results) > 0
    # the cancelled sequence's cells (drafts included) were freed with it
    assert model.stats().kv_cache_used_tokens == 0


async def test_speculation_counters_and_the_off_switch(tiny_gguf: Path) -> None:
    served_off = load(tiny_gguf, speculative="off")
    try:
        prompt = served_off.tokenize(REPETITIVE)
        assert (await run(served_off, greedy(prompt, 60))).last.draft_tokens == 0
        overridden = await run(served_off, greedy(prompt, 60, speculative="ngram"))  # a request may turn it on
        stats = served_off.stats()
        assert overridden.last.draft_tokens > 0
        assert stats.speculative_draft_tokens_total == overridden.last.draft_tokens
        assert stats.speculative_accepted_tokens_total == overridden.last.accepted_draft_tokens
    finally:
        served_off.close()


@pytest.mark.slow
async def test_the_starter_copying_a_file_accepts_most_drafts_and_writes_the_same_tokens(starter_gguf: Path) -> None:
    model = load(starter_gguf, context=4096, parallel=1)  # one slot: the prompt is read once, then reused
    try:
        source = STARTER_COPY_SOURCE.read_text()[:2500]
        text = f"Here is a file:\n```python\n{source}\n```\nThe same file again:\n```python\n"
        prompt = model.tokenize(text, add_special=True)

        def request(mode: str) -> GenerationRequest:
            return greedy(prompt, 120, speculative=mode)

        off = await run(model, request("off"))
        ngram, auto = await run(model, request("ngram")), await run(model, request("auto"))
        # Over long outputs a near-tie can flip: llama.cpp's CPU kernels round a multi-row batch differently
        # from a single row (decoding beside other streams flips this prompt at token 176 too). In the first
        # 120 tokens the top two candidates are at least 0.5 apart in log-probability, far above that noise
        # (~0.1); at token 171 they are 0.04 apart.
        assert ngram.tokens == off.tokens and auto.tokens == off.tokens
        assert ngram.last.accepted_draft_tokens > 60
        assert ngram.last.accepted_draft_tokens > 0.7 * ngram.last.draft_tokens
        assert auto.last.accepted_draft_tokens > 20
    finally:
        model.close()


# ----- a draft model (--draft) -----------------------------------------------------------------


@pytest.fixture(scope="module")
def other_tiny_gguf(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Another random network with the tiny model's tokenizer: a draft model that guesses poorly."""
    return write_tiny_gguf(tmp_path_factory.mktemp("tiny-draft") / "tiny-draft.gguf", seed=5)


async def test_a_draft_model_of_the_same_network_is_always_right(tiny_gguf: Path) -> None:
    # The served network drafting for itself: every confident guess is accepted, and the tokens are the
    # ones decoded without a draft; a prompt with nothing repeated leaves the n-gram drafts out.
    served = load(tiny_gguf, draft=str(tiny_gguf), speculative="draft")
    try:
        assert served.stats().memory["draft_model"] > 0
        prompt = served.tokenize("<|im_start|>user\nHello there, how are you today?<|im_end|>\n<|im_start|>assistant\n")
        off = await run(served, greedy(prompt, 100, speculative="off"))
        drafted = await run(served, greedy(prompt, 100))
        assert drafted.tokens == off.tokens
        assert drafted.last.draft_tokens > 15  # the random network is rarely over 60% sure of a token
        assert drafted.last.accepted_draft_tokens == drafted.last.draft_tokens
    finally:
        served.close()


async def test_a_poor_draft_model_changes_no_token(tiny_gguf: Path, other_tiny_gguf: Path) -> None:
    served = load(tiny_gguf, draft=str(other_tiny_gguf), speculative="draft")
    try:
        prompts = [served.tokenize(text * 3) for text in ("one two three four ", "red green blue ", "a b c d e f ")]
        off = await asyncio.gather(*(run(served, greedy(p, 80, speculative="off")) for p in prompts))
        drafted = await asyncio.gather(*(run(served, greedy(p, 80)) for p in prompts))
        assert [o.tokens for o in drafted] == [o.tokens for o in off]
        assert sum(o.last.draft_tokens for o in drafted) > 0
    finally:
        served.close()


def test_a_draft_model_with_another_vocabulary_is_refused(tiny_gguf: Path, starter_gguf: Path) -> None:
    with pytest.raises(ModelFormatError, match="vocabulary"):
        load(tiny_gguf, draft=str(starter_gguf))


def test_draft_mode_needs_a_draft_model(tiny_gguf: Path) -> None:
    with pytest.raises(ConfigError, match="--draft"):
        load(tiny_gguf, speculative="draft")
