"""Streams start at once and never fall silent: headers and the first event before the prompt is
read, then a keep-alive in each protocol's own form whenever nothing else is sent.

Agents drop silent streams (Codex after 300 s of no SSE event, Cline after 30 s); a 20k-token
prompt on a CPU takes minutes to read. The scripted model stands in for a slow prompt read
(`first_delay`) and for a model writing a long tool call.
"""

from __future__ import annotations

import json
import logging
import time
from typing import Any

import anthropic
import httpx
import openai
import pytest

from tests.server.conftest import ServeFn
from tests.server.fake_model import FakeModel

READ_S = 1.2  # the scripted prompt read
KEEPALIVE_S = 0.25

REQUESTS: dict[str, tuple[str, dict[str, Any]]] = {
    "chat": ("/v1/chat/completions", {"messages": [{"role": "user", "content": "hi"}]}),
    "completions": ("/v1/completions", {"prompt": "hi", "max_tokens": 50}),
    "messages": ("/v1/messages", {"max_tokens": 50, "messages": [{"role": "user", "content": "hi"}]}),
    "responses": ("/v1/responses", {"input": "hi"}),
}


def _timed_lines(url: str, path: str, body: dict[str, Any]) -> list[tuple[float, str]]:
    started = time.monotonic()
    lines: list[tuple[float, str]] = []
    with httpx.stream("POST", url + path, json={"model": "m", "stream": True, **body}, timeout=30) as response:
        assert response.status_code == 200
        lines.append((time.monotonic() - started, "HEADERS"))
        for line in response.iter_lines():
            if line:
                lines.append((time.monotonic() - started, line))
    return lines


def _is_keepalive(line: str) -> bool:
    return line.startswith(":") or '"type":"ping"' in line or '"type":"keepalive"' in line


@pytest.mark.parametrize("api", sorted(REQUESTS))
def test_headers_and_first_event_come_at_once_then_keepalives_while_the_prompt_is_read(
    serve: ServeFn, fake_model: FakeModel, api: str
) -> None:
    fake_model.first_delay = READ_S
    fake_model.reply = lambda prompt: "Hello there."
    with serve(fake_model, keepalive_s=KEEPALIVE_S) as url:
        lines = _timed_lines(url, *REQUESTS[api])
    first_event = next(t for t, line in lines if line.startswith("data:") and not _is_keepalive(line))
    first_text = next(t for t, line in lines if '"H"' in line)  # one character per token
    keepalives = [t for t, line in lines if _is_keepalive(line) and t < first_text]
    assert lines[0][0] < READ_S / 2, "the headers waited for the prompt to be read"
    if api != "completions":  # a text completion has no opening event, only keep-alives
        assert first_event < READ_S / 2, "the first event waited for the prompt to be read"
    assert first_text >= READ_S
    assert len(keepalives) >= 3, lines
    gaps = [b - a for a, b in zip([0.0, *keepalives], [*keepalives, first_text], strict=True)]
    assert max(gaps) < KEEPALIVE_S * 2.5, f"a silence of {max(gaps):.2f} s"


def test_the_official_sdks_read_streams_with_keepalives(serve: ServeFn, fake_model: FakeModel) -> None:
    fake_model.first_delay = 0.6
    fake_model.reply = lambda prompt: "Hello there."
    with (
        serve(fake_model, keepalive_s=0.1) as url,
        openai.OpenAI(base_url=f"{url}/v1", api_key="x", max_retries=0) as chat,
        anthropic.Anthropic(base_url=url, api_key="x", max_retries=0) as messages,
    ):
        pieces = chat.chat.completions.create(model="m", messages=[{"role": "user", "content": "hi"}], stream=True)
        assert "".join(c.choices[0].delta.content or "" for c in pieces if c.choices) == "Hello there."
        with chat.responses.stream(model="m", input="hi") as events:
            final = events.get_final_response()
        assert final.output_text == "Hello there."
        with messages.messages.stream(model="m", max_tokens=50, messages=[{"role": "user", "content": "hi"}]) as stream:
            assert stream.get_final_text() == "Hello there."


def test_a_long_tool_call_being_written_keeps_the_stream_alive(serve: ServeFn, fake_model: FakeModel) -> None:
    """While text that may be a call is held back, the client still hears from the server."""
    call = json.dumps({"name": "Write", "arguments": {"file_path": "a.txt", "content": "x" * 60}})
    fake_model.reply = lambda prompt: f"<tool_call>\n{call}\n</tool_call>"
    fake_model.delay = 0.02  # ~2 s to write the call
    tools = [{"name": "Write", "description": "write a file", "input_schema": {"type": "object"}}]
    with serve(fake_model, keepalive_s=KEEPALIVE_S) as url:
        lines = _timed_lines(url, "/v1/messages", {**REQUESTS["messages"][1], "max_tokens": 500, "tools": tools})
    call_at = next(t for t, line in lines if '"tool_use"' in line)
    pings = [t for t, line in lines if _is_keepalive(line) and t < call_at]
    assert call_at > 1.5 and len(pings) >= 4


@pytest.mark.parametrize("api", list(REQUESTS))
def test_unicode_line_breaks_in_the_text_do_not_split_events(serve: ServeFn, fake_model: FakeModel, api: str) -> None:
    # Clients that split lines as JavaScript or Python's str.splitlines do also break at NEL,
    # U+2028 and U+2029: raw in an event's JSON, those would cut the event in two.
    reply = "a\u2028b\x85c\u2029d\ne"
    fake_model.reply = lambda prompt: reply
    path, body = REQUESTS[api]
    with serve(fake_model) as url:
        response = httpx.post(url + path, json={"model": "m", "stream": True, **body}, timeout=30)
    assert response.status_code == 200
    lines = [line for line in response.text.splitlines() if line]
    assert lines and all(line.startswith(("data: ", "event: ", ":")) for line in lines), lines
    payloads = [json.loads(line[6:]) for line in lines if line.startswith("data: {")]
    assert "".join(_texts(payloads)) == reply  # every character arrived, in its event


def _texts(payloads: list[Any]) -> list[str]:
    """The text deltas of any of the four protocols' stream events."""
    texts = []
    for payload in payloads:
        for choice in payload.get("choices", []):
            texts.append((choice.get("delta") or {}).get("content") or choice.get("text") or "")
        delta = payload.get("delta") or {}
        if isinstance(delta, dict):
            texts.append(delta.get("text") or "")
        elif isinstance(delta, str):
            texts.append(delta)
    return texts


def test_the_request_log_says_when_a_streams_client_left_before_its_end(
    serve: ServeFn, caplog: pytest.LogCaptureFixture
) -> None:
    """A stream's status line is sent with its first byte, so the log's 200 alone cannot tell an agent
    that gave up (its own timeout, Ctrl+C) from one that read the whole reply."""
    caplog.set_level(logging.INFO, logger="launcher.requests")
    slow = FakeModel(reply=lambda _: "x" * 400, delay=0.01)
    body = {"messages": [{"role": "user", "content": "hi"}], "stream": True}
    with serve(slow) as url:
        with httpx.stream("POST", url + "/v1/chat/completions", json=body, timeout=30) as response:
            next(line for line in response.iter_lines() if '"content":"x"' in line)  # then hang up
        client = openai.OpenAI(base_url=url + "/v1", api_key="x")
        whole = client.chat.completions.create(model="m", messages=body["messages"], stream=True)
        assert sum(len(chunk.choices[0].delta.content or "") for chunk in whole if chunk.choices) == 400
        deadline = time.monotonic() + 10
        while len([r for r in caplog.records if r.name == "launcher.requests"]) < 2:
            assert time.monotonic() < deadline, "no log line"
            time.sleep(0.05)
    lines = [r.getMessage() for r in caplog.records if r.name == "launcher.requests"]
    assert "200 client-left" in lines[0] and "client-left" not in lines[1], lines
