"""Lazy tool-call grammars on the real llama.cpp engine: free text until a call starts, then only a
well-formed call to one of the request's tools.

The random tiny model never writes a call on its own: a logit bias makes `<tool_call>` its likeliest
token, as a trained model's is when it decides to call. What follows the marker is then the random
model's own choice under the grammar, which unconstrained is no call at all.
"""

from __future__ import annotations

import json
import re

import pytest

from launcher.engines.base import Constraint, GenerationRequest, SamplingParams
from launcher.engines.llamacpp.model import LlamaCppModel
from launcher.server.core.toolcalls import lazy_tool_constraint, parse_tool_calls
from tests.engines.support import exact, run

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


def _calling(model: LlamaCppModel, prompt: list[int], max_tokens: int = 200, **extra: object) -> GenerationRequest:
    """Greedy, with `<tool_call>` the likeliest token wherever the grammar allows it."""
    marker = model.tokenize("<tool_call>")
    assert len(marker) == 1
    sampling = SamplingParams(temperature=0.0, logit_bias={marker[0]: 30.0})
    return GenerationRequest(prompt, max_tokens, sampling=sampling, speculative="off", **extra)  # type: ignore[arg-type]


@pytest.mark.parametrize(("parallel", "thinking"), [(False, "no"), (True, "no"), (False, "maybe")])
async def test_a_started_call_is_a_valid_call_to_a_known_tool(
    tiny_model: LlamaCppModel, text_prompt: list[int], parallel: bool, thinking: str
) -> None:
    constraint = lazy_tool_constraint("hermes", TOOLS, parallel=parallel, thinking=thinking)  # type: ignore[arg-type]
    assert constraint is not None
    free = await run(tiny_model, _calling(tiny_model, text_prompt))
    constrained = await run(tiny_model, _calling(tiny_model, text_prompt, constraint=constraint))

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


async def test_before_a_call_starts_the_tokens_are_the_unconstrained_ones(
    tiny_model: LlamaCppModel, text_prompt: list[int]
) -> None:
    constraint = lazy_tool_constraint("hermes", TOOLS, parallel=True, thinking="no")
    plain = await run(tiny_model, exact(text_prompt, 48))
    lazy = await run(tiny_model, exact(text_prompt, 48, constraint=constraint))
    assert "<tool_call>" not in plain.text
    assert lazy.tokens == plain.tokens


async def test_a_call_marker_inside_thinking_is_not_a_call(tiny_model: LlamaCppModel, text_prompt: list[int]) -> None:
    # The prompt opens a thinking block: a marker there leaves the output free (the bias keeps writing
    # markers, none of them parsed as a call and none constrained into one).
    constraint = lazy_tool_constraint("hermes", TOOLS, parallel=False, thinking="inside")
    outcome = await run(tiny_model, _calling(tiny_model, text_prompt, 8, constraint=constraint))
    assert outcome.text == "<tool_call>" * 8


@pytest.mark.parametrize(
    ("thinking", "reply", "call_at"),
    [
        ("no", "Let me look. <tool_call>", 13),
        ("maybe", "<tool_call>", 0),
        ("maybe", "\n <tool_call>", 2),
        ("maybe", "<think>a <tool_call> here?</think>\n\n<tool_call>", 36),
        ("maybe", "<think>a <tool_call> here?", None),
        ("maybe", "Some words first <tool_call>", None),  # parsed afterwards, unconstrained
        ("inside", "a <tool_call> here?", None),
        ("inside", "done.</think><tool_call>", 13),
    ],
)
def test_the_grammar_waits_for_a_call_outside_thinking(thinking: str, reply: str, call_at: int | None) -> None:
    # llama.cpp searches the reply so far with each trigger and constrains from its first group; these
    # patterns mean the same in Python's re as in llama.cpp's ECMAScript std::regex.
    constraint = lazy_tool_constraint("hermes", TOOLS, parallel=True, thinking=thinking)  # type: ignore[arg-type]
    assert constraint is not None
    found = [m.start(1) for m in (re.search(t, reply) for t in constraint.triggers) if m]
    assert (min(found) if found else None) == call_at


def test_mistral_calls_are_lazy_on_their_marker() -> None:
    mistral = lazy_tool_constraint("mistral", TOOLS, parallel=False, thinking="no")
    assert mistral is not None and mistral.triggers == (r"(\[TOOL_CALLS\])",)
    assert mistral.schema is not None and mistral.schema["maxItems"] == 1


async def test_a_trigger_completed_by_a_token_that_carries_text_the_grammar_refuses_leaves_the_reply_free(
    tiny_model: LlamaCppModel, text_prompt: list[int]
) -> None:
    """A Gemma model writes `<tool_call>{"` with the token `>{"`: the trigger `(<tool_call>)` completes inside
    a token that carries `{"`, which the grammar (`<tool_call>\n{`) refuses there. llama.cpp's own lazy
    sampler would replay that text into the grammar and abort the process; the reply must go on free."""
    token = next(t for t in range(tiny_model.info.vocab_size) if _two_letters(tiny_model.token_bytes(t)))
    piece = tiny_model.token_bytes(token).decode()
    # the trigger is the token's first letter; the grammar wants that letter and then a newline
    constraint = Constraint(
        kind="json_schema", schema={"type": "object"}, prefix_text=piece[0] + "\n", triggers=(f"({piece[0]})",)
    )
    sampling = SamplingParams(temperature=0.0, logit_bias={token: 30.0})
    reply = await run(tiny_model, GenerationRequest(text_prompt, 8, sampling=sampling, constraint=constraint))
    assert reply.tokens[0] == token and reply.last.finish_reason == "length"
    assert reply.tokens == [token] * 8  # unconstrained: the bias keeps winning


def _two_letters(piece: bytes) -> bool:
    return len(piece) == 2 and piece.isalpha() and piece.isascii()


async def test_tools_whose_grammar_is_over_budget_are_served_unconstrained_and_not_compiled_again(
    tiny_model: LlamaCppModel, text_prompt: list[int], monkeypatch: pytest.MonkeyPatch
) -> None:
    from launcher.engines.llamacpp import _sampling

    huge = [{"type": "function", "function": {"name": "t", "parameters": {"type": "string", "minLength": 10**8}}}]
    constraint = lazy_tool_constraint("hermes", huge, parallel=False, thinking="no")
    calls = 0
    compile_once = _sampling._compile

    def counting(*args: object) -> str:
        nonlocal calls
        calls += 1
        return compile_once(*args)  # type: ignore[arg-type]

    monkeypatch.setattr(_sampling, "_compile", counting)
    plain = await run(tiny_model, exact(text_prompt, 12))
    for _ in range(2):  # an agent's next turn sends the same tools
        lazy = await run(tiny_model, exact(text_prompt, 12, constraint=constraint))
        assert lazy.last.finish_reason == "length" and lazy.tokens == plain.tokens  # served, not refused
    assert calls == 1
