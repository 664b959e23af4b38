"""Generation on the tiny MLX model: determinism under batching, sampling, constraints, logprobs."""

from __future__ import annotations

import asyncio
import json

from launcher.engines.base import Constraint, GenerationRequest, SamplingParams
from launcher.engines.mlx.model import MlxModel
from tests.engines.support import exact, greedy, run


async def test_greedy_output_is_the_same_alone_and_next_to_three_other_requests(
    mlx_model: MlxModel, chat_prompt: list[int]
) -> None:
    alone = await run(mlx_model, exact(chat_prompt, 16))
    assert len(alone.tokens) == 16 and alone.last.finish_reason == "length"
    others = [mlx_model.tokenize(text) for text in ("The quick brown fox", "def add(a, b):", "What is the weather")]
    together = await asyncio.gather(
        run(mlx_model, exact(chat_prompt, 16)), *(run(mlx_model, exact(p, 16)) for p in others)
    )
    assert together[0].tokens == alone.tokens
    assert together[0].text == alone.text
    assert {len(outcome.tokens) for outcome in together} == {16}


async def test_text_pieces_add_up_to_the_decoded_tokens(mlx_model: MlxModel, chat_prompt: list[int]) -> None:
    outcome = await run(mlx_model, greedy(chat_prompt, 24))
    assert outcome.text == mlx_model.detokenize(outcome.tokens).replace("<|im_start|>", "").replace("<|endoftext|>", "")
    assert outcome.last.prompt_tokens == len(chat_prompt)
    assert outcome.last.completion_tokens == 24


async def test_a_seed_makes_sampling_repeatable_even_in_a_batch(mlx_model: MlxModel, chat_prompt: list[int]) -> None:
    def seeded(seed: int) -> GenerationRequest:
        sampling = SamplingParams(temperature=1.0, top_p=0.95, seed=seed)
        return GenerationRequest(prompt_tokens=chat_prompt, max_tokens=12, sampling=sampling, ignore_eos=True)

    first = await run(mlx_model, seeded(7))
    again, other, _noise = await asyncio.gather(
        run(mlx_model, seeded(7)), run(mlx_model, seeded(8)), run(mlx_model, greedy(chat_prompt, 12))
    )
    assert again.tokens == first.tokens
    assert other.tokens != first.tokens


async def test_end_of_turn_stops_generation_without_showing_the_token(
    mlx_model: MlxModel, chat_prompt: list[int]
) -> None:
    end = mlx_model.info.eos_token_ids[0]
    request = GenerationRequest(
        prompt_tokens=chat_prompt, max_tokens=50, sampling=SamplingParams(temperature=0.0, logit_bias={end: 100.0})
    )
    outcome = await run(mlx_model, request)
    assert outcome.last.finish_reason == "stop"
    assert outcome.tokens == [] and outcome.text == ""
    assert outcome.last.completion_tokens == 0


async def test_reply_marker_tokens_are_written_out_other_control_tokens_are_not(
    mlx_model: MlxModel, chat_prompt: list[int]
) -> None:
    # [TOOL_CALLS] is a special token the tool-call parser must see; <|im_start|> is a turn marker.
    marker, turn = mlx_model.tokenize("[TOOL_CALLS]")[0], mlx_model.tokenize("<|im_start|>")[0]
    for token, text in ((marker, "[TOOL_CALLS]" * 2), (turn, "")):
        sampling = SamplingParams(temperature=0.0, logit_bias={token: 100.0})
        outcome = await run(mlx_model, GenerationRequest(prompt_tokens=chat_prompt, max_tokens=2, sampling=sampling))
        assert outcome.tokens == [token, token]
        assert outcome.text == text


async def test_json_schema_constraint_gives_parseable_json_on_random_weights(
    mlx_model: MlxModel, chat_prompt: list[int]
) -> None:
    schema = {
        "type": "object",
        "properties": {"ok": {"type": "boolean"}, "size": {"enum": ["small", "large"]}},
        "required": ["ok", "size"],
        "additionalProperties": False,
    }
    for seed in (1, 2, 3):
        request = GenerationRequest(
            prompt_tokens=chat_prompt,
            max_tokens=80,
            sampling=SamplingParams(temperature=1.0, seed=seed),
            constraint=Constraint(kind="json_schema", schema=schema),
        )
        outcome = await run(mlx_model, request)
        assert outcome.last.finish_reason == "stop", outcome.text
        value = json.loads(outcome.text)
        assert set(value) == {"ok", "size"} and isinstance(value["ok"], bool) and value["size"] in ("small", "large")


async def test_open_schemas_still_end_in_valid_json(mlx_model: MlxModel, chat_prompt: list[int]) -> None:
    """No additionalProperties and an unbounded integer: the engine closes the object and caps the digits."""
    schema = {"type": "object", "properties": {"answer": {"type": "integer"}}, "required": ["answer"]}
    request = GenerationRequest(
        prompt_tokens=chat_prompt,
        max_tokens=60,
        sampling=SamplingParams(temperature=0.0),
        constraint=Constraint(kind="json_schema", schema=schema),
    )
    outcome = await run(mlx_model, request)
    assert outcome.last.finish_reason == "stop", outcome.text
    value = json.loads(outcome.text)
    assert set(value) == {"answer"} and abs(value["answer"]) < 2**53


async def test_tool_call_tags_wrap_the_constrained_json(mlx_model: MlxModel, chat_prompt: list[int]) -> None:
    schema = {
        "type": "object",
        "properties": {"name": {"const": "get_weather"}, "arguments": {"type": "object", "properties": {}}},
        "required": ["name", "arguments"],
        "additionalProperties": False,
    }
    constraint = Constraint(
        kind="json_schema", schema=schema, prefix_text="<tool_call>\n", suffix_text="\n</tool_call>"
    )
    request = GenerationRequest(
        prompt_tokens=chat_prompt, max_tokens=80, sampling=greedy([]).sampling, constraint=constraint
    )
    outcome = await run(mlx_model, request)
    assert outcome.last.finish_reason == "stop", outcome.text
    assert outcome.text.startswith("<tool_call>\n") and outcome.text.endswith("\n</tool_call>")
    call = json.loads(outcome.text.removeprefix("<tool_call>\n").removesuffix("\n</tool_call>"))
    assert call["name"] == "get_weather" and isinstance(call["arguments"], dict)


async def test_json_object_and_regex_constraints(mlx_model: MlxModel, chat_prompt: list[int]) -> None:
    obj = await run(
        mlx_model,
        GenerationRequest(
            prompt_tokens=chat_prompt,
            max_tokens=60,
            sampling=SamplingParams(temperature=0.0),
            constraint=Constraint(kind="json_object"),
        ),
    )
    if obj.last.finish_reason == "stop":  # random weights may run out of tokens inside an open object
        assert isinstance(json.loads(obj.text), dict)
    else:
        assert obj.text.startswith("{")
    digits = await run(
        mlx_model,
        GenerationRequest(
            prompt_tokens=chat_prompt,
            max_tokens=20,
            sampling=SamplingParams(temperature=0.0),
            constraint=Constraint(kind="regex", pattern=r"[0-9]{3}-[a-c]{2}"),
        ),
    )
    assert digits.last.finish_reason == "stop"
    assert len(digits.text) == 6 and digits.text[:3].isdigit() and digits.text[3] == "-"


async def test_a_bad_schema_is_an_error_event_not_a_crash(mlx_model: MlxModel, chat_prompt: list[int]) -> None:
    request = GenerationRequest(
        prompt_tokens=chat_prompt, max_tokens=8, constraint=Constraint(kind="json_schema", schema={"type": "nonsense"})
    )
    outcome = await run(mlx_model, request)
    assert outcome.last.finish_reason == "error"
    assert outcome.last.error is not None and "schema" in outcome.last.error
    after = await run(mlx_model, greedy(chat_prompt, 3))
    assert after.last.finish_reason == "length"


async def test_logprobs_come_with_the_top_alternatives(mlx_model: MlxModel, chat_prompt: list[int]) -> None:
    outcome = await run(mlx_model, greedy(chat_prompt, 4, logprobs=3))
    token_events = [event for event in outcome.events if event.token_ids]
    assert len(token_events) == 4
    for event in token_events:
        (logprob,) = event.logprobs
        assert logprob.token_id == event.token_ids[0]
        assert logprob.logprob <= 0.0
        assert len(logprob.top) == 3
        assert logprob.top[0][1] == max(value for _text, value in logprob.top)
        assert abs(logprob.top[0][1] - logprob.logprob) < 1e-4  # greedy picks the most likely token


async def test_requests_the_engine_cannot_run_get_an_error_event(mlx_model: MlxModel) -> None:
    too_long = await run(mlx_model, greedy([1] * 2000, 4))
    assert too_long.last.finish_reason == "error" and "--context" in (too_long.last.error or "")
    outside = await run(mlx_model, greedy([10**6], 4))
    assert outside.last.finish_reason == "error" and "vocabulary" in (outside.last.error or "")
    empty = await run(mlx_model, greedy([], 4))
    assert empty.last.finish_reason == "error"
