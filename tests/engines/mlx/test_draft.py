"""A draft model (`--draft`) in the MLX engine: its guesses are verified in the batch, and change no token.

The tiny random model drafting for itself guesses right whenever it is confident; another random model
with the same tokenizer guesses poorly, and its rejected guesses must leave the output as it was.
"""

from __future__ import annotations

import asyncio
import json
import shutil
from pathlib import Path

import pytest

from launcher.core.errors import ConfigError, ModelFormatError
from tests.engines.mlx.support import CHAT_PROMPT, load
from tests.engines.support import exact, greedy, run
from tests.fixtures.mlx_models import write_tiny_mlx_model


@pytest.fixture(scope="module")
def other_tiny_mlx(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Another random network with the tiny model's tokenizer: a draft model that guesses poorly."""
    return write_tiny_mlx_model(tmp_path_factory.mktemp("tiny-mlx-draft") / "tiny-mlx-draft", seed=5)


async def test_the_same_network_as_its_own_draft_is_always_right(tiny_mlx_model: Path) -> None:
    # A prompt with nothing repeated: the tokens come from the draft model, not from n-grams.
    served = load(tiny_mlx_model, draft=str(tiny_mlx_model), speculative="draft")
    try:
        assert served.stats().memory["draft_model"] > 0
        prompt = served.tokenize(CHAT_PROMPT)
        off = await run(served, exact(prompt, 100))
        drafted = await run(served, greedy(prompt, 100))
        assert drafted.tokens == off.tokens
        assert drafted.last.draft_tokens > 15  # the random network is rarely over 60% sure of a token
        assert drafted.last.accepted_draft_tokens == drafted.last.draft_tokens
        assert served.stats().speculative_accepted_tokens_total == drafted.last.accepted_draft_tokens
    finally:
        served.close()


async def test_a_poor_draft_model_changes_no_token_in_a_batch(tiny_mlx_model: Path, other_tiny_mlx: Path) -> None:
    served = load(tiny_mlx_model, draft=str(other_tiny_mlx), speculative="draft")
    try:
        prompts = [served.tokenize(text * 3) for text in ("one two three four ", "red green blue ", "a b c d e f ")]
        off = await asyncio.gather(*(run(served, exact(p, 80)) for p in prompts))
        drafted = await asyncio.gather(*(run(served, greedy(p, 80)) for p in prompts))
        assert [o.tokens for o in drafted] == [o.tokens for o in off]
        assert sum(o.last.draft_tokens for o in drafted) > 0
        # a stream closed mid-draft frees its draft cache; the next request drafts afresh
        stream = served.generate(greedy(prompts[0], 200))
        await anext(stream)
        await stream.aclose()  # type: ignore[attr-defined]
        again = await run(served, greedy(prompts[1], 80))
        assert again.tokens == off[1].tokens
    finally:
        served.close()


async def test_auto_drafts_from_the_model_where_the_text_does_not_repeat(tiny_mlx_model: Path) -> None:
    served = load(tiny_mlx_model, draft=str(tiny_mlx_model))  # auto, the default
    try:
        prompt = served.tokenize(CHAT_PROMPT)
        off = await run(served, exact(prompt, 120))
        auto = await run(served, greedy(prompt, 120))
        assert auto.last.accepted_draft_tokens > 0
        assert auto.tokens == off.tokens
    finally:
        served.close()


def test_a_draft_model_with_another_vocabulary_is_refused(tiny_mlx_model: Path, tmp_path: Path) -> None:
    other = shutil.copytree(tiny_mlx_model, tmp_path / "other-vocabulary")
    tokenizer = json.loads((other / "tokenizer.json").read_text(encoding="utf-8"))
    vocab: dict[str, int] = tokenizer["model"]["vocab"]
    first, second = sorted(vocab, key=vocab.__getitem__)[40:42]
    vocab[first], vocab[second] = vocab[second], vocab[first]  # two tokens' ids swapped
    (other / "tokenizer.json").write_text(json.dumps(tokenizer), encoding="utf-8")
    with pytest.raises(ModelFormatError, match="vocabulary"):
        load(tiny_mlx_model, draft=str(other))


def test_a_draft_model_must_be_an_mlx_model_and_draft_mode_needs_one(tiny_mlx_model: Path, tiny_gguf: Path) -> None:
    with pytest.raises(ModelFormatError, match="MLX model"):
        load(tiny_mlx_model, draft=str(tiny_gguf))
    with pytest.raises(ConfigError, match="--draft"):
        load(tiny_mlx_model, speculative="draft")
