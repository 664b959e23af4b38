"""A prompt longer than the context, sent as a stream to a model that must load first.

Such a stream starts before the model is there (its client hears keep-alives while it loads), so
the overflow can only be told in the stream, in each API's error shape, with the code and the
counts the 400 of a loaded model has (tests/conformance/test_context_overflow.py). The engine seam
is scripted (a 64-token context); the pool, routes and SSE are the real server's.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import anthropic
import openai
import pytest

from launcher.core.config import ServeConfig
from launcher.engines.base import LoadedModel
from launcher.server.app import serving_app
from launcher.server.metrics import ServerMetrics
from launcher.server.pool.model_names import ModelNames
from launcher.server.pool.model_pool import ModelPool, PreparedLoad
from launcher.server.pool.model_slot import ModelEntry
from launcher.server.state import ServerState
from tests.server.fake_model import FakeModel, fake_info
from tests.server.harness import running_app

LONG = "hello " * 40  # 240 characters: one token each for the scripted model, over its 64


@pytest.fixture
def url() -> Iterator[str]:
    def load() -> LoadedModel:
        return FakeModel(info=fake_info(context_length=64))  # type: ignore[return-value]

    config = ServeConfig(port=0, library=True)
    names = ModelNames({"cold": ModelEntry("cold", config, None, "library")})
    metrics = ServerMetrics()
    pool = ModelPool(names, lambda entry: PreparedLoad("fake", "scripted", config, 0, load), metrics)
    with running_app(serving_app(ServerState(config=config, pool=pool, metrics=metrics))) as base:
        yield base


def assert_says_how_long(message: str) -> None:
    assert "prompt is too long" in message and "maximum context length" in message and "64 tokens" in message


def test_chat_stream_ends_with_the_overflow_error(url: str) -> None:
    with openai.OpenAI(base_url=f"{url}/v1", api_key="unused", max_retries=0) as api:
        stream = api.chat.completions.create(
            model="cold", messages=[{"role": "user", "content": LONG}], stream=True, n=2
        )
        with pytest.raises(openai.APIError) as caught:
            for _ in stream:
                pass
    assert caught.value.code == "context_length_exceeded" and caught.value.type == "invalid_request_error"
    assert_says_how_long(caught.value.message)


def test_responses_stream_fails_with_the_overflow_error(url: str) -> None:
    with openai.OpenAI(base_url=f"{url}/v1", api_key="unused", max_retries=0) as api:
        events = list(api.responses.create(model="cold", input=LONG, stream=True))
    failed: Any = events[-1]
    assert failed.type == "response.failed" and failed.response.status == "failed"
    # Codex compacts the conversation on this code; on any other it retries the same prompt
    assert failed.response.error.code == "context_length_exceeded"
    assert_says_how_long(failed.response.error.message)


def test_messages_stream_ends_with_an_invalid_request_error(url: str) -> None:
    with anthropic.Anthropic(base_url=url, api_key="unused", max_retries=0) as claude:
        stream = claude.messages.create(
            model="cold", max_tokens=4, messages=[{"role": "user", "content": LONG}], stream=True
        )
        with pytest.raises(anthropic.APIStatusError) as caught:  # the SDK's error for an error event
            for _ in stream:
                pass
    body: Any = caught.value.body
    assert body["error"]["type"] == "invalid_request_error"
    assert_says_how_long(body["error"]["message"])
