"""Constraints are compiled when a request is made: a bad or oversized schema is refused at once,
even while every slot is busy, and a schema's `pattern` is matched anywhere in the string."""

from __future__ import annotations

import json
import re
import time
from pathlib import Path

from launcher.engines.base import Constraint, GenerationRequest
from launcher.engines.mlx.model import MlxModel
from tests.engines.mlx.support import CHAT_PROMPT, load
from tests.engines.support import GREEDY, greedy, run, until

HUGE = {"type": "string", "minLength": 10**8, "maxLength": 10**8}


async def test_a_bad_schema_is_refused_while_another_request_holds_the_only_slot(tiny_mlx_model: Path) -> None:
    model = load(tiny_mlx_model, parallel=1)
    try:
        prompt = model.tokenize(CHAT_PROMPT)
        running = model.generate(greedy(prompt, 900))
        assert (await anext(running)).token_ids
        await until(lambda: model.stats().requests_running == 1, "the first request to hold the slot")
        for schema, named in [({"type": "nonsense"}, "schema"), (HUGE, "minLength")]:
            refused = await run(model, greedy(prompt, 4, constraint=Constraint(kind="json_schema", schema=schema)))
            assert refused.last.finish_reason == "error" and refused.last.request_error
            assert named in (refused.last.error or "")
            assert model.stats().requests_running == 1, "refused while the slot was still taken"
        assert model.stats().requests_waiting == 0
        await running.aclose()
    finally:
        model.close()


async def test_a_huge_schema_is_refused_in_milliseconds_naming_the_keyword(
    mlx_model: MlxModel, chat_prompt: list[int]
) -> None:
    started = time.monotonic()
    outcome = await run(mlx_model, greedy(chat_prompt, 4, constraint=Constraint(kind="json_schema", schema=HUGE)))
    assert time.monotonic() - started < 2.0
    assert outcome.last.request_error and "minLength at # is 100000000" in (outcome.last.error or "")


async def test_an_unanchored_pattern_is_found_anywhere_in_the_output(
    mlx_model: MlxModel, chat_prompt: list[int]
) -> None:
    schema = {"type": "string", "pattern": "ab", "maxLength": 12}
    request = GenerationRequest(
        prompt_tokens=chat_prompt,
        max_tokens=40,
        sampling=GREEDY,
        constraint=Constraint(kind="json_schema", schema=schema),
    )
    outcome = await run(mlx_model, request)
    value = json.loads(outcome.text)
    assert isinstance(value, str) and re.search("ab", value) and len(value) <= 12
