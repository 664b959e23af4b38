"""A reply that fails part-way says so in every API, and a request a stopping server cancels gets JSON.

The scripted model's stream breaks after a few characters, as an engine that fails mid-reply: the
streams end with their API's error event and no finish, the unstreamed replies with a 500 in their
API's shape instead of a 200 holding half an answer. (The SIGTERM cases run a real server:
tests/server/test_honest_endings.py.)
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator
from typing import Any

import httpx
import pytest
from starlette.types import Message, Receive, Scope, Send

from launcher.engines.base import GenerationEvent, GenerationRequest
from launcher.server.core.generation import Finish, Usage, cut_short
from launcher.server.errors import ErrorBoundary
from tests.server.conftest import ServeFn
from tests.server.fake_model import FakeModel

HELLO = [{"role": "user", "content": "hi"}]
ENGINE_TROUBLE = "the GPU fell off the bus"


class BreakingModel(FakeModel):
    """Writes "Half" and then fails, as an engine that dies mid-reply."""

    async def _run(self, request: GenerationRequest) -> AsyncIterator[GenerationEvent]:
        for char in "Half":
            yield GenerationEvent(token_ids=(ord(char),), text=char)
        yield GenerationEvent(finish_reason="error", error=ENGINE_TROUBLE, completion_tokens=4)


def data_lines(text: str) -> list[Any]:
    return [
        line.removeprefix("data: ") if line == "data: [DONE]" else json.loads(line.removeprefix("data: "))
        for line in text.splitlines()
        if line.startswith("data: ")
    ]


def event_names(text: str) -> list[str]:
    return [line.removeprefix("event: ") for line in text.splitlines() if line.startswith("event: ")]


@pytest.mark.parametrize("path", ["/v1/chat/completions", "/v1/completions"])
def test_an_openai_stream_that_fails_ends_with_an_error_event_and_no_finish(serve: ServeFn, path: str) -> None:
    body: dict[str, Any] = {"stream": True, "stream_options": {"include_usage": True}}
    body |= {"messages": HELLO} if "chat" in path else {"prompt": "hi"}
    with serve(BreakingModel()) as url:
        text = httpx.post(url + path, json=body, timeout=30).text
    data = data_lines(text)
    assert data[-1] == "[DONE]"
    errors = [item["error"] for item in data[:-1] if "error" in item]
    assert len(errors) == 1 and ENGINE_TROUBLE in errors[0]["message"] and errors[0]["type"] == "server_error"
    finishes = [choice["finish_reason"] for item in data[:-1] for choice in item.get("choices", [])]
    assert not any(finishes)  # no "stop": the half reply is not passed off as whole
    assert data[-2]["usage"]["completion_tokens"] == 4  # the tokens spent are still counted


def test_a_messages_stream_that_fails_ends_with_an_api_error(serve: ServeFn) -> None:
    with serve(BreakingModel()) as url:
        text = httpx.post(f"{url}/v1/messages", json={"max_tokens": 50, "messages": HELLO, "stream": True}).text
    events = event_names(text)
    assert events[-1] == "error" and "content_block_delta" in events
    assert not {"content_block_stop", "message_delta", "message_stop"} & set(events)
    error = data_lines(text)[-1]["error"]
    assert error["type"] == "api_error" and ENGINE_TROUBLE in error["message"]


def test_a_responses_stream_that_fails_ends_as_failed(serve: ServeFn) -> None:
    with serve(BreakingModel()) as url:
        text = httpx.post(f"{url}/v1/responses", json={"input": "hi", "stream": True}).text
    events = event_names(text)
    assert events[-1] == "response.failed" and "response.completed" not in events
    failed = data_lines(text)[-1]["response"]
    assert failed["status"] == "failed" and failed["error"]["code"] == "server_error"
    assert failed["output"][0]["status"] == "incomplete" and failed["output"][0]["content"][0]["text"] == "Half"


@pytest.mark.parametrize(
    ("path", "body"),
    [
        ("/v1/chat/completions", {"messages": HELLO}),
        ("/v1/completions", {"prompt": "hi"}),
        ("/v1/messages", {"max_tokens": 50, "messages": HELLO}),
        ("/v1/responses", {"input": "hi"}),
    ],
)
def test_an_unstreamed_reply_that_fails_part_way_is_a_500_not_half_an_answer(
    serve: ServeFn, path: str, body: dict[str, Any]
) -> None:
    with serve(BreakingModel()) as url:
        response = httpx.post(url + path, json=body, timeout=30)
    assert response.status_code == 500 and response.headers["content-type"] == "application/json"
    error = response.json()["error"]
    assert ENGINE_TROUBLE in error["message"] and "Half" not in response.text
    if path == "/v1/messages":
        assert response.json()["type"] == "error" and error["type"] == "api_error"


def test_only_replies_that_did_not_end_on_their_own_are_cut() -> None:
    usage = Usage(1, 1)
    assert all(cut_short(Finish(reason, usage)) is None for reason in ("stop", "length", "tool_calls"))
    stopped = cut_short(Finish("cancelled", usage, error="the server is shutting down"))
    assert stopped is not None and stopped.status == 503 and int(stopped.headers["Retry-After"]) >= 1
    refused = cut_short(Finish("error", usage, error="bad grammar", request_error=True))
    assert refused is not None and refused.status == 400


async def answer_of(boundary: ErrorBoundary, path: str) -> list[Message]:
    sent: list[Message] = []

    async def receive() -> Message:
        return {"type": "http.request", "body": b"", "more_body": False}

    async def send(message: Message) -> None:
        sent.append(message)

    scope: Scope = {"type": "http", "method": "POST", "path": path, "headers": []}
    await boundary(scope, receive, send)
    return sent


async def cancelled_app(scope: Scope, receive: Receive, send: Send) -> None:
    raise asyncio.CancelledError  # what uvicorn does to a request still running after its grace period


async def test_a_request_cancelled_by_a_stopping_server_gets_a_503_in_its_api_shape() -> None:
    for path, shape in (("/v1/chat/completions", "openai"), ("/v1/messages", "anthropic")):
        sent = await answer_of(ErrorBoundary(cancelled_app, stopping=lambda: True), path)
        start, body = sent[0], json.loads(sent[1]["body"])
        headers = dict(start["headers"])
        assert start["status"] == 503 and headers[b"content-type"] == b"application/json"
        assert int(headers[b"retry-after"]) >= 1
        assert (body.get("type") == "error") == (shape == "anthropic") and "shutting down" in body["error"]["message"]
    with pytest.raises(asyncio.CancelledError):  # not stopping: a cancellation is not answered
        await answer_of(ErrorBoundary(cancelled_app), "/v1/chat/completions")


def test_a_failure_outside_the_routes_is_a_json_500_not_text(serve: ServeFn, monkeypatch: pytest.MonkeyPatch) -> None:
    """The request log, CORS and the key check sit outside the routes' error handling; a bug in one of
    them still answers in the API's shape."""
    from launcher.server.request_log import RequestObserver

    passing = RequestObserver.__call__

    async def broken(self: RequestObserver, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http":
            raise RuntimeError("the request log broke")
        await passing(self, scope, receive, send)

    monkeypatch.setattr(RequestObserver, "__call__", broken)
    with serve(FakeModel()) as url:
        openai_reply = httpx.post(url + "/v1/chat/completions", json={"messages": HELLO}, timeout=30)
        anthropic_reply = httpx.post(url + "/v1/messages", json={"max_tokens": 4, "messages": HELLO}, timeout=30)
    for reply in (openai_reply, anthropic_reply):
        assert reply.status_code == 500 and reply.headers["content-type"] == "application/json", reply.text
        assert "RuntimeError" in reply.json()["error"]["message"]
    assert anthropic_reply.json()["type"] == "error"
