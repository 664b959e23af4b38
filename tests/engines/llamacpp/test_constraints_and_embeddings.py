"""Constrained decoding (grammars compiled from JSON schema) and embeddings."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest

from launcher.core.errors import EngineError
from launcher.engines.base import Constraint, GenerationRequest, SamplingParams
from launcher.engines.llamacpp.model import LlamaCppModel
from tests.engines.llamacpp.support import load
from tests.engines.support import greedy, run

SCHEMA = {
    "type": "object",
    "properties": {
        "ok": {"type": "boolean"},
        "count": {"type": "integer"},
        "mood": {"enum": ["happy", "sad"]},
    },
    "required": ["ok", "count", "mood"],
}


async def test_json_schema_output_parses_even_with_random_weights(
    tiny_model: LlamaCppModel, text_prompt: list[int]
) -> None:
    for seed in (1, 2, 3):
        request = GenerationRequest(
            text_prompt,
            max_tokens=200,
            sampling=SamplingParams(temperature=1.0, seed=seed),
            constraint=Constraint(kind="json_schema", schema=SCHEMA),
        )
        outcome = await run(tiny_model, request)
        assert outcome.last.finish_reason == "stop", outcome.text
        value = json.loads(outcome.text)
        assert isinstance(value["ok"], bool)
        assert isinstance(value["count"], int)
        assert value["mood"] in ("happy", "sad")


async def test_prefix_and_suffix_text_wrap_the_json(tiny_model: LlamaCppModel, text_prompt: list[int]) -> None:
    constraint = Constraint(
        kind="json_schema",
        schema={"type": "object", "properties": {"name": {"enum": ["get_weather"]}}, "required": ["name"]},
        prefix_text="<tool_call>\n",
        suffix_text="\n</tool_call>",
    )
    outcome = await run(tiny_model, GenerationRequest(text_prompt, 100, SamplingParams(temperature=0.0), constraint))
    assert outcome.text.startswith("<tool_call>\n")
    assert outcome.text.endswith("\n</tool_call>")
    body = outcome.text.removeprefix("<tool_call>\n").removesuffix("\n</tool_call>")
    assert json.loads(body) == {"name": "get_weather"}


async def test_json_object_and_regex_constraints(tiny_model: LlamaCppModel, text_prompt: list[int]) -> None:
    obj = await run(tiny_model, greedy(text_prompt, 60, constraint=Constraint(kind="json_object"), ignore_eos=False))
    if obj.last.finish_reason == "stop":
        assert isinstance(json.loads(obj.text), dict)
    else:
        assert obj.text.lstrip().startswith("{")
    regex = await run(
        tiny_model,
        greedy(
            text_prompt,
            20,
            constraint=Constraint(kind="regex", pattern="(yes|no)-[0-9]{3}"),
            ignore_eos=False,
        ),
    )
    assert regex.last.finish_reason == "stop"
    head, _, digits = regex.text.partition("-")
    assert head in ("yes", "no") and len(digits) == 3 and digits.isdigit()


async def test_a_constrained_reply_ends_with_its_grammar_even_when_asked_to_ignore_eos(
    tiny_model: LlamaCppModel, text_prompt: list[int]
) -> None:
    """`ignore_eos` (a client's benchmark flag) with a grammar: once the grammar is complete it allows only
    the end of generation, and a token it refused would abort llama.cpp (the server with it)."""
    constraint = Constraint(kind="regex", pattern="(yes|no)")
    reply = await run(tiny_model, greedy(text_prompt, 20, constraint=constraint, ignore_eos=True))
    assert reply.last.finish_reason == "stop" and reply.text in ("yes", "no")


async def test_invalid_constraint_is_an_error_event(tiny_model: LlamaCppModel, text_prompt: list[int]) -> None:
    broken = Constraint(kind="grammar_gbnf", pattern="root ::= ( unclosed")
    outcome = await run(tiny_model, greedy(text_prompt, 5, constraint=broken))
    assert outcome.last.finish_reason == "error"
    assert outcome.last.error


async def test_generation_model_refuses_to_embed(tiny_model: LlamaCppModel) -> None:
    with pytest.raises(EngineError, match="embedding"):
        await tiny_model.embed(["hello"])


async def test_embedding_model_embeds(tiny_embedding_gguf: Path) -> None:
    model = load(tiny_embedding_gguf, parallel=1, context=512)
    try:
        assert model.info.can_embed
        vectors = await model.embed(["Hello world!", "The weather in Paris is sunny.", "Hello world!"])
        assert len(vectors) == 3
        assert all(len(vector) == 64 for vector in vectors)
        assert all(math.isclose(math.fsum(x * x for x in vector), 1.0, rel_tol=1e-5) for vector in vectors)
        assert vectors[0] == vectors[2]
        assert vectors[0] != vectors[1]
        with pytest.raises(EngineError, match="empty"):
            await model.embed([""])
    finally:
        model.close()
