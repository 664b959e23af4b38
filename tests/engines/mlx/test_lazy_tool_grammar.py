"""Lazy tool-call grammars on the real MLX engine (llguidance): free text until a call starts, then only
a well-formed call to one of the request's tools.

As in the llama.cpp engine's test, the random tiny model never writes a call on its own: a logit bias
makes `<tool_call>` its likeliest token, as a trained model's is when it decides to call. What follows
the marker is then the random model's own choice under the grammar, which unconstrained is no call.
"""

from __future__ import annotations

import json

import pytest

from launcher.engines.base import Constraint, GenerationRequest, SamplingParams
from launcher.engines.mlx.model import MlxModel
from launcher.server.core.toolcalls import lazy_tool_constraint, parse_tool_calls
from tests.engines.support import exact, run
from tests.engines.tool_call_cases import QWEN3_CODER, lazy_single_call, read_qwen3_coder, timer_arguments_are_valid

TOOLS = [
    {
        "type": "function",
        "function": {
            "name": "set_timer",
            "parameters": {
                "type": "object",
                "properties": {"minutes": {"type": "integer"}, "sound": {"enum": ["bell", "chime"]}},
                "required": ["minutes", "sound"],
            },
        },
    },
    {"type": "function", "function": {"name": "stop_timer", "parameters": {"type": "object", "properties": {}}}},
]


def _pushing(
    model: MlxModel, text: str, prompt: list[int], max_tokens: int = 200, **extra: object
) -> GenerationRequest:
    """Greedy, with the one token `text` the likeliest wherever the grammar allows it."""
    token = model.tokenize(text)
    assert len(token) == 1
    sampling = SamplingParams(temperature=0.0, logit_bias={token[0]: 30.0})
    options: dict[str, object] = {"speculative": "off", **extra}
    return GenerationRequest(prompt, max_tokens, sampling=sampling, **options)  # type: ignore[arg-type]


def test_the_mlx_engine_takes_lazy_constraints(mlx_model: MlxModel) -> None:
    assert mlx_model.lazy_constraints  # the server gives its requests a call grammar on tool_choice auto


@pytest.mark.parametrize(("parallel", "thinking"), [(False, "no"), (True, "maybe")])
async def test_a_started_call_is_a_valid_call_to_a_known_tool(
    mlx_model: MlxModel, chat_prompt: list[int], parallel: bool, thinking: str
) -> None:
    constraint = lazy_tool_constraint("hermes", TOOLS, parallel=parallel, thinking=thinking)  # type: ignore[arg-type]
    assert constraint is not None
    free = await run(mlx_model, _pushing(mlx_model, "<tool_call>", chat_prompt))
    constrained = await run(mlx_model, _pushing(mlx_model, "<tool_call>", chat_prompt, constraint=constraint))

    _, unconstrained_calls = parse_tool_calls("hermes", free.text)
    assert free.text.startswith("<tool_call>") and not unconstrained_calls  # the random model's "call" is junk
    text, calls = parse_tool_calls("hermes", constrained.text)
    if parallel:  # the bias keeps starting calls until max_tokens cuts the last one short
        assert len(calls) >= 2, constrained.text
    else:  # one call, and the grammar ends the reply after it
        assert len(calls) == 1 and text.strip() == "", constrained.text
        assert constrained.last.finish_reason == "stop"
    for call in calls:
        arguments = json.loads(call.arguments)
        if call.name == "set_timer":
            assert isinstance(arguments["minutes"], int) and arguments["sound"] in ("bell", "chime")
        else:
            assert call.name == "stop_timer"


async def test_a_call_in_tagged_parameters_comes_out_whole(mlx_model: MlxModel, chat_prompt: list[int]) -> None:
    constraint = lazy_single_call(QWEN3_CODER, r"(<tool_call>)")
    outcome = await run(mlx_model, _pushing(mlx_model, "<tool_call>", chat_prompt, constraint=constraint))
    assert outcome.last.finish_reason == "stop", outcome.text
    calls = read_qwen3_coder(outcome.text)
    assert calls is not None and len(calls) == 1, outcome.text
    name, arguments = calls[0]
    assert (name == "set_timer" and timer_arguments_are_valid(arguments)) or (name, arguments) == ("stop_timer", {})


async def test_before_a_call_starts_the_tokens_are_the_unconstrained_ones(
    mlx_model: MlxModel, chat_prompt: list[int]
) -> None:
    constraint = lazy_tool_constraint("hermes", TOOLS, parallel=True, thinking="no")
    plain = await run(mlx_model, exact(chat_prompt, 48))
    lazy = await run(mlx_model, exact(chat_prompt, 48, constraint=constraint))
    assert "<tool_call>" not in plain.text
    assert lazy.tokens == plain.tokens


async def test_a_trigger_ending_inside_a_token_constrains_from_its_match(
    mlx_model: MlxModel, chat_prompt: list[int]
) -> None:
    # ' {"' is one token here: the trigger matches its "{", so the grammar starts inside it.
    schema = {"type": "object", "properties": {"sound": {"enum": ["bell", "chime"]}}, "required": ["sound"]}
    constraint = Constraint(kind="json_schema", schema=schema, triggers=(r"(\{)",))
    free = await run(mlx_model, _pushing(mlx_model, ' {"', chat_prompt, 60))
    lazy = await run(mlx_model, _pushing(mlx_model, ' {"', chat_prompt, 60, constraint=constraint))
    assert free.text.startswith(' {"')
    assert lazy.last.finish_reason == "stop" and json.loads(lazy.text) in ({"sound": "bell"}, {"sound": "chime"})


async def test_drafted_tokens_are_held_to_the_grammar_once_it_takes_over(
    mlx_model: MlxModel, chat_prompt: list[int]
) -> None:
    # The bias makes the text repeat, so n-gram drafts run through the trigger and past it: they are
    # kept only where the grammar's sampling agrees, which gives the tokens of decoding one at a time.
    constraint = lazy_tool_constraint("hermes", TOOLS, parallel=True, thinking="no")
    one_by_one = await run(mlx_model, _pushing(mlx_model, "<tool_call>", chat_prompt, 120, constraint=constraint))
    drafted = await run(
        mlx_model, _pushing(mlx_model, "<tool_call>", chat_prompt, 120, constraint=constraint, speculative="ngram")
    )
    assert drafted.tokens == one_by_one.tokens
    assert drafted.last.accepted_draft_tokens > 0
