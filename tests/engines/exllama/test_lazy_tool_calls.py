"""Lazy tool-call grammars on both ExLlama engines: free text until a call starts, then only a
well-formed call to one of the request's tools.

THESE ENGINES ARE VERIFIED ONLY ON AN NVIDIA GPU, AND THEIR LAZY FILTERS HAVE NEVER RUN ON ONE. Here the
runtime is the CPU stand-in (standin.py), which drives filters as exllamav2 (begin/next/feed) and
exllamav3 1.4.1 (is_active, get_next_logit_mask, feed) do; the grammar side is real llguidance. As in
the MLX and llama.cpp tests, the stand-in "model" never writes a call on its own: `Behaviour.lead`
makes it write a call marker first, as a trained model does when it decides to call; what follows is
its own choice, under the grammar or not.
"""

from __future__ import annotations

import json
from typing import Any

import pytest

from launcher.engines.base import Constraint
from launcher.engines.exllamav3._filter import runs_lazy_filters
from launcher.server.core.toolcalls import lazy_tool_constraint, parse_tool_calls
from tests.engines.exllama.conftest import LoadFn
from tests.engines.exllama.standin import Behaviour, Runtime
from tests.engines.exllama.support import greedy
from tests.engines.support import run

KINDS = ["exl3", "exl2"]
CHAT = "<|im_start|>user\nSet a timer, please.<|im_end|>\n<|im_start|>assistant\n"
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
LEAD = "Sure. <tool_call>"


def hermes() -> Constraint:
    constraint = lazy_tool_constraint("hermes", TOOLS, parallel=False, thinking="no")
    assert constraint is not None and constraint.triggers
    return constraint


def constrained_steps(job: Any) -> int:
    """Steps at which the job's filters constrained the sample (each runtime's stand-in counts them)."""
    filters = job.grammar
    return int(getattr(filters, "masks_asked", getattr(filters, "constrained_steps", 0)))


@pytest.mark.parametrize("kind", KINDS)
def test_both_engines_take_lazy_constraints(load: LoadFn, kind: str) -> None:
    assert load(kind).lazy_constraints  # the server gives their requests a call grammar on tool_choice auto


@pytest.mark.parametrize("kind", KINDS)
async def test_a_started_call_is_a_valid_call_to_a_known_tool(load: LoadFn, kind: str) -> None:
    runtime = Runtime(Behaviour(lead=LEAD))
    model = load(kind, runtime=runtime)
    prompt = model.tokenize(CHAT)
    free = await run(model, greedy(prompt, 120))
    lazy = await run(model, greedy(prompt, 120, constraint=hermes()))

    assert free.text.startswith(LEAD) and parse_tool_calls("hermes", free.text)[1] == []  # junk after the marker
    text, calls = parse_tool_calls("hermes", lazy.text)
    assert lazy.text.startswith(LEAD) and text.strip() == "Sure." and len(calls) == 1, lazy.text
    assert lazy.last.finish_reason == "stop"  # the grammar ends the reply after the call
    arguments = json.loads(calls[0].arguments)
    if calls[0].name == "set_timer":
        assert isinstance(arguments["minutes"], int) and arguments["sound"] in ("bell", "chime")
    else:
        assert (calls[0].name, arguments) == ("stop_timer", {})
    # Nothing was masked while the model wrote its prose and the marker.
    lead_tokens = len(model.tokenize(LEAD))
    assert 0 < constrained_steps(runtime.log.jobs[-1]) <= len(lazy.tokens) - lead_tokens + 1


@pytest.mark.parametrize("kind", KINDS)
async def test_before_a_call_starts_the_tokens_are_the_unconstrained_ones(load: LoadFn, kind: str) -> None:
    runtime = Runtime()
    model = load(kind, runtime=runtime)
    prompt = model.tokenize(CHAT)
    plain = await run(model, greedy(prompt, 48))
    lazy = await run(model, greedy(prompt, 48, constraint=hermes()))
    assert "<tool_call>" not in plain.text
    assert lazy.tokens == plain.tokens
    assert constrained_steps(runtime.log.jobs[-1]) == 0  # no mask was ever computed


async def test_an_exllamav3_without_filter_feed_takes_no_lazy_constraints(load: LoadFn) -> None:
    # Before 1.4.1, exllamav3 told only active filters of sampled tokens: a lazy filter never woke up.
    runtime = Runtime()
    runtime.exllamav3.Filter = type("Filter", (), {"accept_token": lambda self, token: None})
    assert not runs_lazy_filters(runtime.exllamav3.Filter)
    model = load("exl3", runtime=runtime)
    assert not model.lazy_constraints
    outcome = await run(model, greedy(model.tokenize(CHAT), 8, constraint=hermes()))
    assert outcome.last.finish_reason == "error" and "cannot run lazy grammars" in (outcome.last.error or "")


async def test_a_trigger_that_is_no_pattern_is_an_error_event(load: LoadFn) -> None:
    model = load()
    broken = Constraint(kind="json_object", triggers=("(unclosed",))
    outcome = await run(model, greedy(model.tokenize(CHAT), 8, constraint=broken))
    assert outcome.last.finish_reason == "error" and "not a valid pattern" in (outcome.last.error or "")
