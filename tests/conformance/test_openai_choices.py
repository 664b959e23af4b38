"""OpenAI's `n`: several choices for one request, whole and streamed, on chat and text completions.

Each choice is its own sample: choices differ at temperature 1 (a random-weight model at
temperature 1 writes eight equal tokens four times over with a vanishing probability), a seed
makes all of them reproducible, usage counts the prompt once and every choice's completion, and
the prompt is read once (llama.cpp: the later choices copy it from the first one's sequence).
Speculation is off where texts are compared: its draft batches are sized from step timings.
"""

from __future__ import annotations

import json
import uuid
from collections import defaultdict
from collections.abc import Iterator
from typing import Any

import httpx
import openai
import pytest

from tests.conformance.servers import ServerSpec
from tests.metrics_text import metric_total

HELLO: Any = [{"role": "user", "content": "Hello there, how are you today?"}]
# Exactly 8 tokens per choice (the server's ignore_eos extension), so usage can be checked to the token.
EIGHT: Any = {"max_tokens": 8, "temperature": 1.0, "extra_body": {"ignore_eos": True, "speculative": "off"}}
WEATHER: Any = [
    {
        "type": "function",
        "function": {
            "name": "get_weather",
            "parameters": {
                "type": "object",
                "properties": {"unit": {"type": "string", "enum": ["celsius", "fahrenheit"]}},
                "required": ["unit"],
            },
        },
    }
]


@pytest.fixture
def api(base_url: str) -> Iterator[openai.OpenAI]:
    with openai.OpenAI(base_url=base_url, api_key="unused", max_retries=0) as client:
        yield client


def texts(reply: Any) -> list[str]:
    return [choice.message.content for choice in reply.choices]


def test_n_choices_each_sampled_with_usage_for_all(api: openai.OpenAI, model_id: str) -> None:
    one = api.chat.completions.create(model=model_id, messages=HELLO, **EIGHT)
    reply = api.chat.completions.create(model=model_id, messages=HELLO, n=4, **EIGHT)
    assert [choice.index for choice in reply.choices] == [0, 1, 2, 3]
    assert all(choice.finish_reason == "length" and choice.message.content for choice in reply.choices)
    assert len(set(texts(reply))) > 1  # each choice its own sample
    assert reply.usage is not None and one.usage is not None
    assert reply.usage.prompt_tokens == one.usage.prompt_tokens  # the prompt counted once
    assert reply.usage.completion_tokens == 4 * 8
    assert reply.usage.total_tokens == reply.usage.prompt_tokens + 32


def test_a_seed_makes_every_choice_reproducible(api: openai.OpenAI, model_id: str) -> None:
    first = api.chat.completions.create(model=model_id, messages=HELLO, n=3, seed=11, **EIGHT)
    again = api.chat.completions.create(model=model_id, messages=HELLO, n=3, seed=11, **EIGHT)
    alone = api.chat.completions.create(model=model_id, messages=HELLO, seed=11, **EIGHT)
    assert texts(first) == texts(again)
    assert texts(first)[0] == texts(alone)[0]  # choice 0 is the reply n=1 gives
    assert len(set(texts(first))) > 1  # the other choices have seeds of their own


def test_streamed_choices_carry_their_index_finish_and_one_usage(api: openai.OpenAI, model_id: str) -> None:
    whole = api.chat.completions.create(model=model_id, messages=HELLO, n=3, seed=5, **EIGHT)
    stream = api.chat.completions.create(
        model=model_id, messages=HELLO, n=3, seed=5, stream=True, stream_options={"include_usage": True}, **EIGHT
    )
    chunks = list(stream)
    streamed: dict[int, str] = defaultdict(str)
    roles: list[int] = []
    finishes: list[tuple[int, str]] = []
    for chunk in chunks[:-1]:
        assert len(chunk.choices) == 1 and chunk.usage is None
        choice = chunk.choices[0]
        if choice.delta.role:
            roles.append(choice.index)
        streamed[choice.index] += choice.delta.content or ""
        if choice.finish_reason:
            finishes.append((choice.index, choice.finish_reason))
    assert roles == [0, 1, 2]
    assert sorted(finishes) == [(0, "length"), (1, "length"), (2, "length")]
    assert [streamed[index] for index in range(3)] == texts(whole)
    usage = chunks[-1].usage
    assert chunks[-1].choices == [] and usage is not None and whole.usage is not None
    assert (usage.prompt_tokens, usage.completion_tokens) == (whole.usage.prompt_tokens, 24)


def test_later_choices_read_the_prompt_from_the_first_ones_cache(
    spec: ServerSpec, api: openai.OpenAI, root_url: str, model_id: str
) -> None:
    if spec.engine != "llamacpp":
        pytest.skip("MLX's prefix cache holds finished requests only (launcher/server/core/choices.py)")
    # A prompt no earlier request sent, long enough that reading it three times would show.
    words = " ".join(f"{uuid.uuid4().hex[:6]}" for _ in range(60))
    messages: Any = [{"role": "user", "content": f"Sort these words: {words}"}]
    hits_before = metric_total(httpx.get(f"{root_url}/metrics").text, "launcher_prefix_cache_hit_tokens_total")
    reply = api.chat.completions.create(model=model_id, messages=messages, n=3, **EIGHT)
    hits = metric_total(httpx.get(f"{root_url}/metrics").text, "launcher_prefix_cache_hit_tokens_total") - hits_before
    assert reply.usage is not None
    prompt = reply.usage.prompt_tokens
    assert prompt > 100
    # Choices 1 and 2 each found all of it but the last token (which an engine reads again for its logits).
    assert hits >= 2 * (prompt - 1)


def test_each_choice_makes_its_own_tool_call(api: openai.OpenAI, model_id: str) -> None:
    reply = api.chat.completions.create(
        model=model_id, messages=HELLO, n=2, tools=WEATHER, tool_choice="required", max_tokens=60, temperature=1.0
    )
    assert len(reply.choices) == 2
    for choice in reply.choices:
        calls = choice.message.tool_calls
        assert choice.finish_reason == "tool_calls" and calls
        assert calls[0].function.name == "get_weather"  # type: ignore[union-attr]
        assert json.loads(calls[0].function.arguments)["unit"] in ("celsius", "fahrenheit")  # type: ignore[union-attr]


def test_each_choice_keeps_to_the_json_schema(api: openai.OpenAI, model_id: str) -> None:
    schema = {
        "type": "object",
        "properties": {"answer": {"type": "integer"}},
        "required": ["answer"],
        "additionalProperties": False,
    }
    reply = api.chat.completions.create(
        model=model_id,
        messages=HELLO,
        n=2,
        max_tokens=60,
        temperature=1.0,
        response_format={"type": "json_schema", "json_schema": {"name": "result", "schema": schema}},
    )
    for choice in reply.choices:
        if choice.finish_reason == "stop":
            assert isinstance(json.loads(choice.message.content or "")["answer"], int)
        else:  # cut by max_tokens: still the start of the object
            assert (choice.message.content or "").lstrip().startswith("{")


def test_too_many_choices_is_a_clear_400(api: openai.OpenAI, model_id: str) -> None:
    for stream in (False, True):
        with pytest.raises(openai.BadRequestError) as caught:
            api.chat.completions.create(model=model_id, messages=HELLO, n=17, max_tokens=4, stream=stream)
        assert caught.value.param == "n" and "16" in caught.value.message


def test_text_completions_give_n_choices(api: openai.OpenAI, model_id: str) -> None:
    common: Any = {"model": model_id, "prompt": "The quick brown fox", "n": 3, "seed": 3, **EIGHT}
    whole = api.completions.create(**common)
    assert [choice.index for choice in whole.choices] == [0, 1, 2]
    assert whole.usage is not None and whole.usage.completion_tokens == 24
    streamed: dict[int, str] = defaultdict(str)
    for chunk in api.completions.create(**common, stream=True):
        for choice in chunk.choices:
            streamed[choice.index] += choice.text
    assert [streamed[index] for index in range(3)] == [choice.text for choice in whole.choices]
    assert len({choice.text for choice in whole.choices}) > 1
