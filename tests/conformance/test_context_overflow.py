"""A prompt longer than the model's context, as each API's hosted service answers it.

A 400 before any output, streamed or not (the model is loaded, so a stream gets the error instead
of its headers): `context_length_exceeded` on the OpenAI APIs, `invalid_request_error` on
Messages, and a message with the prompt's size and the context in tokens that says "prompt is
too long" and "maximum context length", the words clients look for before they shorten a
conversation and retry. The servers here run with a 2048-token context.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from typing import Any

import anthropic
import openai
import pytest

from tests.conformance.servers import RunningServer

# About 3,000 tokens: over the context, but few enough characters to be counted in tokens.
LONG = "hello " * 3000
CONTEXT = 2048


@pytest.fixture
def api(base_url: str) -> Iterator[openai.OpenAI]:
    with openai.OpenAI(base_url=base_url, api_key="unused", max_retries=0) as client:
        yield client


@pytest.fixture
def claude(server: RunningServer) -> Iterator[anthropic.Anthropic]:
    with anthropic.Anthropic(base_url=server.url, api_key="unused", max_retries=0) as client:
        yield client


def assert_says_how_long(message: str) -> None:
    assert "prompt is too long" in message and "maximum context length" in message
    counts = [int(n) for n in re.findall(r"\d+", message)]
    assert CONTEXT in counts and any(n > CONTEXT for n in counts), message  # the prompt's tokens and the context


def assert_context_length_exceeded(error: openai.BadRequestError) -> None:
    assert error.status_code == 400 and error.code == "context_length_exceeded"
    assert error.type == "invalid_request_error"
    assert_says_how_long(error.message)


@pytest.mark.parametrize("stream", [False, True])
def test_chat_completions(api: openai.OpenAI, model_id: str, stream: bool) -> None:
    messages: Any = [{"role": "user", "content": LONG}]
    with pytest.raises(openai.BadRequestError) as caught:
        api.chat.completions.create(model=model_id, messages=messages, max_tokens=4, stream=stream, n=2)
    assert_context_length_exceeded(caught.value)


@pytest.mark.parametrize("stream", [False, True])
def test_text_completions(api: openai.OpenAI, model_id: str, stream: bool) -> None:
    with pytest.raises(openai.BadRequestError) as caught:
        api.completions.create(model=model_id, prompt=LONG, max_tokens=4, stream=stream)
    assert_context_length_exceeded(caught.value)


@pytest.mark.parametrize("stream", [False, True])
def test_responses(api: openai.OpenAI, model_id: str, stream: bool) -> None:
    with pytest.raises(openai.BadRequestError) as caught:
        api.responses.create(model=model_id, input=LONG, max_output_tokens=16, stream=stream)
    assert_context_length_exceeded(caught.value)


@pytest.mark.parametrize("stream", [False, True])
def test_anthropic_messages(claude: anthropic.Anthropic, model_id: str, stream: bool) -> None:
    with pytest.raises(anthropic.BadRequestError) as caught:
        claude.messages.create(
            model=model_id, max_tokens=4, messages=[{"role": "user", "content": LONG}], stream=stream
        )
    assert caught.value.status_code == 400
    body: Any = caught.value.body
    assert body["type"] == "error" and body["error"]["type"] == "invalid_request_error"
    assert_says_how_long(body["error"]["message"])
