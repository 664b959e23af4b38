"""Real text end to end: the official SDKs against `launcher serve` on the starter model (gemma-3-270m)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import anthropic
import openai
import pytest

from tests.conformance.servers import SERVERS, RunningServer, start_server

pytestmark = pytest.mark.slow

MARKERS = ("<start_of_turn>", "<end_of_turn>", "<bos>", "<eos>")


@pytest.fixture(scope="module")
def starter_server(starter_gguf: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[RunningServer]:
    llamacpp = next(spec for spec in SERVERS if spec.engine == "llamacpp")
    server = start_server(
        llamacpp, starter_gguf, tmp_path_factory.mktemp("starter"), "--context", "2048", "--parallel", "2"
    )
    yield server
    server.stop()


def test_openai_sdk_chat_gets_real_text(starter_server: RunningServer) -> None:
    api = openai.OpenAI(base_url=starter_server.base_url, api_key="unused", max_retries=0)
    # The same greedy text streamed and not: speculation off for both (its draft sizes follow step timings,
    # and this base model's near-tie logits follow the batch's shape), which also checks the SDK passes it.
    reply = api.chat.completions.create(
        model=starter_server.ready["model"],
        max_tokens=24,
        temperature=0,
        messages=[{"role": "system", "content": "You answer briefly."}, {"role": "user", "content": "Name a color."}],
        extra_body={"speculative": "off"},
    )
    text = reply.choices[0].message.content or ""
    assert any(ch.isalpha() for ch in text)
    assert not any(marker in text for marker in MARKERS)
    stream = api.chat.completions.create(
        model="any",
        max_tokens=24,
        temperature=0,
        stream=True,
        messages=[{"role": "system", "content": "You answer briefly."}, {"role": "user", "content": "Name a color."}],
        extra_body={"speculative": "off"},
    )
    assert "".join(c.choices[0].delta.content or "" for c in stream if c.choices) == text


def test_anthropic_sdk_message_gets_real_text(starter_server: RunningServer) -> None:
    claude = anthropic.Anthropic(base_url=starter_server.url, api_key="unused", max_retries=0)
    message = claude.messages.create(
        model="any", max_tokens=24, system="You answer briefly.", messages=[{"role": "user", "content": "Say hello."}]
    )
    text = "".join(block.text for block in message.content if block.type == "text")
    assert any(ch.isalpha() for ch in text) and not any(marker in text for marker in MARKERS)
    assert message.usage.output_tokens > 0
