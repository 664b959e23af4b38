"""Generation on the real engine: determinism, batching invariance, limits, logprobs, UTF-8."""

from __future__ import annotations

import asyncio

from launcher.engines.base import GenerationRequest, SamplingParams
from launcher.engines.llamacpp.model import LlamaCppModel
from tests.engines.support import exact, greedy, run


async def test_greedy_generation_is_deterministic(tiny_model: LlamaCppModel, text_prompt: list[int]) -> None:
    first = await run(tiny_model, exact(text_prompt, 16))
    second = await run(tiny_model, exact(text_prompt, 16))
    assert len(first.tokens) == 16
    assert first.tokens == second.tokens
    assert first.text == second.text != ""


async def test_same_tokens_alone_or_next_to_three_others(tiny_model: LlamaCppModel) -> None:
    target = tiny_model.tokenize("The weather in Paris is")
    others = [tiny_model.tokenize(text) for text in ("def add(a, b):", "Hello world!", "Tool calls are JSON")]
    alone = await run(tiny_model, exact(target, 24))
    together = await asyncio.gather(
        *(run(tiny_model, exact(p, 24 + 3 * i)) for i, p in enumerate(others)),
        run(tiny_model, exact(target, 24)),
    )
    assert together[-1].tokens == alone.tokens
    for index, prompt in enumerate(others):
        solo = await run(tiny_model, exact(prompt, 24 + 3 * index))
        assert together[index].tokens == solo.tokens


async def test_greedy_fast_path_picks_what_the_sampler_chain_picks(tiny_model: LlamaCppModel) -> None:
    # Plain greedy requests take the argmax of their logits row; a zero logit bias changes no logit
    # but sends the same request through llama.cpp's sampler chain. Run side by side in one batch, so
    # a wrong row would show.
    prompts = [tiny_model.tokenize(text) for text in ("The weather in Paris is", "def add(a, b):")]
    neutral = SamplingParams(temperature=0.0, logit_bias={prompts[0][0]: 0.0})
    outcomes = await asyncio.gather(
        *(
            run(tiny_model, GenerationRequest(p, 24, SamplingParams(temperature=0.0), speculative="off"))
            for p in prompts
        ),
        *(run(tiny_model, GenerationRequest(p, 24, neutral, speculative="off")) for p in prompts),
    )
    fast, chained = outcomes[:2], outcomes[2:]
    assert [o.tokens for o in fast] == [o.tokens for o in chained]
    assert fast[0].tokens != fast[1].tokens


async def test_max_tokens_ends_with_length(tiny_model: LlamaCppModel, text_prompt: list[int]) -> None:
    outcome = await run(tiny_model, greedy(text_prompt, 5))
    assert outcome.last.finish_reason == "length"
    assert outcome.last.completion_tokens == 5
    assert outcome.last.prompt_tokens == len(text_prompt)
    assert len(outcome.tokens) == 5


async def test_end_of_generation_token_stops(tiny_model: LlamaCppModel, text_prompt: list[int]) -> None:
    eos = tiny_model.tokenize("<|im_end|>")[0]
    sampling = SamplingParams(temperature=0.0, logit_bias={eos: 100.0})
    outcome = await run(tiny_model, GenerationRequest(text_prompt, max_tokens=10, sampling=sampling))
    assert outcome.last.finish_reason == "stop"
    assert outcome.last.completion_tokens == 0
    assert "<|im_end|>" not in outcome.text


async def test_reply_marker_tokens_are_written_out_other_control_tokens_are_not(
    tiny_model: LlamaCppModel, text_prompt: list[int]
) -> None:
    # [TOOL_CALLS] is a control token the tool-call parser must see; <|im_start|> is a turn marker.
    marker, turn = tiny_model.tokenize("[TOOL_CALLS]")[0], tiny_model.tokenize("<|im_start|>")[0]
    for token, text in ((marker, "[TOOL_CALLS]"), (turn, "")):
        sampling = SamplingParams(temperature=0.0, logit_bias={token: 100.0})
        outcome = await run(tiny_model, GenerationRequest(text_prompt, max_tokens=1, sampling=sampling))
        assert outcome.tokens == [token]
        assert outcome.text == text


async def test_ignore_eos_keeps_going(tiny_model: LlamaCppModel, text_prompt: list[int]) -> None:
    eos = tiny_model.tokenize("<|im_end|>")[0]
    sampling = SamplingParams(temperature=0.0, logit_bias={eos: 100.0})
    request = GenerationRequest(text_prompt, max_tokens=6, sampling=sampling, ignore_eos=True)
    outcome = await run(tiny_model, request)
    assert outcome.last.finish_reason == "length"
    assert eos not in outcome.tokens


async def test_seeded_sampling_is_reproducible(tiny_model: LlamaCppModel, text_prompt: list[int]) -> None:
    sampling = SamplingParams(temperature=1.0, top_p=0.9, top_k=40, min_p=0.01, seed=1234)
    request = GenerationRequest(text_prompt, max_tokens=20, sampling=sampling, ignore_eos=True)
    first, second = await run(tiny_model, request), await run(tiny_model, request)
    assert first.tokens == second.tokens
    other = await run(
        tiny_model,
        GenerationRequest(text_prompt, 20, SamplingParams(temperature=1.0, seed=99), ignore_eos=True),
    )
    assert other.tokens != first.tokens


async def test_penalties_change_greedy_output(tiny_model: LlamaCppModel, text_prompt: list[int]) -> None:
    plain = await run(tiny_model, greedy(text_prompt, 30))
    penalised = SamplingParams(temperature=0.0, presence_penalty=2.0, frequency_penalty=2.0, repeat_penalty=1.5)
    outcome = await run(tiny_model, GenerationRequest(text_prompt, 30, penalised, ignore_eos=True))
    assert outcome.tokens != plain.tokens
    assert len(set(outcome.tokens)) >= len(set(plain.tokens))


async def test_logprobs_have_the_asked_shape(tiny_model: LlamaCppModel, text_prompt: list[int]) -> None:
    outcome = await run(tiny_model, greedy(text_prompt, 4, logprobs=3))
    token_events = [event for event in outcome.events if event.token_ids]
    assert len(token_events) == 4
    for event in token_events:
        (entry,) = event.logprobs
        assert entry.token_id == event.token_ids[0]
        assert entry.logprob <= 0.0
        assert len(entry.top) == 3
        assert entry.top[0] == (entry.text, entry.logprob)  # greedy picks the most likely token
        assert entry.top[0][1] >= entry.top[1][1] >= entry.top[2][1]
    without = await run(tiny_model, greedy(text_prompt, 2))
    assert all(event.logprobs == () for event in without.events)


async def test_streamed_text_is_utf8_safe(tiny_model: LlamaCppModel) -> None:
    # Random weights over a byte-level vocabulary emit raw bytes, so multi-byte characters are split
    # across tokens: the streamed pieces must add up to the decoded whole, with nothing lost.
    prompt = tiny_model.tokenize("Café naïve 日本")
    request = GenerationRequest(prompt, 80, SamplingParams(temperature=1.5, seed=7), ignore_eos=True)
    outcome = await run(tiny_model, request)
    raw = b"".join(tiny_model.token_bytes(t) for t in outcome.tokens)
    assert any(byte >= 0x80 for byte in raw)
    assert outcome.text == raw.decode("utf-8", errors="replace")


async def test_bad_requests_get_an_error_event(tiny_model: LlamaCppModel) -> None:
    too_long = await run(tiny_model, greedy([65] * 5000, 4))
    assert too_long.last.finish_reason == "error"
    assert too_long.last.error is not None and "--context" in too_long.last.error
    empty = await run(tiny_model, greedy([], 4))
    assert empty.last.finish_reason == "error"
    out_of_vocab = await run(tiny_model, greedy([10**6], 4))
    assert out_of_vocab.last.finish_reason == "error"


async def test_context_limit_ends_with_length(tiny_gguf: object) -> None:
    from tests.engines.llamacpp.support import load

    model = load(tiny_gguf, context=256, parallel=1)  # type: ignore[arg-type]
    try:
        prompt = model.tokenize("Hello world! " * 20)
        outcome = await run(model, greedy(prompt, 1000))
        assert outcome.last.finish_reason == "length"
        assert len(prompt) + outcome.last.completion_tokens == 256
    finally:
        model.close()
