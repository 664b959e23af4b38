"""A reply cut by a stopping server says so in its protocol's own terms, never "complete".

Each test runs a real `launcher serve` on the tiny GGUF with one sequence (`--parallel 1`), starts
a long reply, queues a second request behind it, and sends SIGTERM once the reply is under way and
the second one is counted as waiting: the stream ends with its API's error event, the queued
request gets a 503 with Retry-After, and the official openai and anthropic SDKs raise.
Nothing here waits on a fixed delay: each step waits for what the server says (an event, /metrics).
"""

from __future__ import annotations

import json
import signal
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import anthropic
import httpx
import openai
import pytest

from tests.conformance.servers import SERVERS, RunningServer, start_server
from tests.metrics_text import metric_total

HELLO = [{"role": "user", "content": "hi"}]
SDK_HELLO: Any = HELLO  # each SDK types its messages its own way
LONG = 4000  # tokens: seconds of generation on this machine, far more than a stop takes
WAIT_S = 60.0  # generous: the machine running these tests is small and shared


@contextmanager
def one_sequence_server(tiny_gguf: Path, tmp_path: Path, parallel: int = 1) -> Iterator[RunningServer]:
    spec = SERVERS[0]
    if spec.available():
        pytest.skip(str(spec.available()))
    server = start_server(spec, tiny_gguf, tmp_path, "--parallel", str(parallel), "--context", "4096")
    try:
        yield server
    finally:
        server.stop()


def wait_for_metric(server: RunningServer, name: str, at_least: float) -> None:
    deadline = time.monotonic() + WAIT_S
    while True:
        value = metric_total(httpx.get(f"{server.url}/metrics", timeout=WAIT_S).text, name)
        if value >= at_least:
            return
        assert time.monotonic() < deadline, f"{name} stayed at {value}"
        time.sleep(0.02)


class Background:
    """A request sent on a thread; `response` once it has been answered."""

    def __init__(self, send: Callable[[], httpx.Response]) -> None:
        self.response: httpx.Response | None = None
        self.error: BaseException | None = None
        self._thread = threading.Thread(target=self._run, args=(send,), daemon=True)
        self._thread.start()

    def _run(self, send: Callable[[], httpx.Response]) -> None:
        try:
            self.response = send()
        except BaseException as err:  # reported by `result`
            self.error = err

    def result(self) -> httpx.Response:
        self._thread.join(WAIT_S)
        assert self.error is None, self.error
        assert self.response is not None, "the request was never answered"
        return self.response


@dataclass(frozen=True)
class Protocol:
    """One API: where to post, a long request, and what marks generated text in its stream."""

    path: str
    body: dict[str, Any]
    content_marker: str  # a stream line that carries generated text


CHAT = Protocol(
    "/v1/chat/completions",
    {"model": "m", "max_tokens": LONG, "messages": HELLO, "temperature": 1.0, "ignore_eos": True},
    '"delta":{"content":"',
)
MESSAGES = Protocol(
    "/v1/messages",
    {"model": "m", "max_tokens": LONG, "messages": HELLO, "temperature": 1.0},
    "event: content_block_delta",
)
RESPONSES = Protocol(
    "/v1/responses",
    {"model": "m", "max_output_tokens": LONG, "input": "hi", "temperature": 1.0},
    "event: response.output_text.delta",
)


def cut_mid_stream(server: RunningServer, protocol: Protocol) -> tuple[list[str], httpx.Response]:
    """Stream a long reply; once text flows, queue the same request unstreamed behind it, SIGTERM
    the server when the queued one is waiting; the stream's lines and the queued one's answer."""
    lines: list[str] = []
    queued: Background | None = None
    sent_at = 0.0
    with httpx.stream(
        "POST", server.url + protocol.path, json={**protocol.body, "stream": True}, timeout=WAIT_S
    ) as response:
        assert response.status_code == 200
        for line in response.iter_lines():
            lines.append(line)
            if queued is None and protocol.content_marker in line:
                queued = Background(lambda: httpx.post(server.url + protocol.path, json=protocol.body, timeout=WAIT_S))
                wait_for_metric(server, "launcher_requests_waiting", 1)
                server.process.send_signal(signal.SIGTERM)
                sent_at = time.monotonic()
    assert queued is not None, f"no generated text came: {lines[-5:]}"
    assert time.monotonic() - sent_at < 10, "the stream was not ended by the stop"
    # uvicorn re-raises the signal once it has shut down cleanly: -SIGTERM is the normal exit here
    assert server.process.wait(timeout=WAIT_S) in (0, -signal.SIGTERM)
    return lines, queued.result()


def data_of(line: str) -> Any:
    return json.loads(line.removeprefix("data: "))


def events_of(lines: list[str]) -> list[str]:
    return [line.removeprefix("event: ") for line in lines if line.startswith("event: ")]


def assert_retry_later(answer: httpx.Response) -> None:
    assert answer.status_code == 503, answer.text
    assert answer.headers["content-type"] == "application/json"
    assert int(answer.headers["retry-after"]) >= 1


def test_a_chat_stream_cut_by_sigterm_ends_with_an_error_and_no_finish(tiny_gguf: Path, tmp_path: Path) -> None:
    with one_sequence_server(tiny_gguf, tmp_path) as server:
        lines, queued = cut_mid_stream(server, CHAT)
    data = [line for line in lines if line.startswith("data: ")]
    assert data[-1] == "data: [DONE]"
    error = data_of(data[-2])["error"]
    assert "shutting down" in error["message"] and error["code"] == "reply_cut_short"
    chunks = [data_of(line) for line in data[:-2]]
    assert any(chunk["choices"][0]["delta"].get("content") for chunk in chunks)  # it was cut mid-way
    assert all(chunk["choices"][0]["finish_reason"] is None for chunk in chunks)  # never a finish
    assert_retry_later(queued)
    assert queued.json()["error"]["code"] == "reply_cut_short"


def test_a_messages_stream_cut_by_sigterm_ends_with_an_overloaded_error(tiny_gguf: Path, tmp_path: Path) -> None:
    with one_sequence_server(tiny_gguf, tmp_path) as server:
        lines, queued = cut_mid_stream(server, MESSAGES)
    events = events_of(lines)
    assert "content_block_delta" in events and events[-1] == "error"
    assert not {"message_delta", "message_stop"} & set(events)  # no stop_reason: none would be true
    error = data_of(lines[-1] if lines[-1] else lines[-2])
    assert error["error"]["type"] == "overloaded_error" and "shutting down" in error["error"]["message"]
    assert_retry_later(queued)
    assert queued.json()["type"] == "error" and queued.json()["error"]["type"] == "overloaded_error"


def test_a_responses_stream_cut_by_sigterm_ends_as_failed(tiny_gguf: Path, tmp_path: Path) -> None:
    with one_sequence_server(tiny_gguf, tmp_path) as server:
        lines, queued = cut_mid_stream(server, RESPONSES)
    events = events_of(lines)
    assert "response.output_text.delta" in events and events[-1] == "response.failed"
    assert not {"response.completed", "response.incomplete", "response.output_text.done"} & set(events)
    failed = data_of(next(line for line in reversed(lines) if line.startswith("data: ")))["response"]
    assert failed["status"] == "failed" and "shutting down" in failed["error"]["message"]
    assert [item["status"] for item in failed["output"]] == ["incomplete"]  # the text so far, marked so
    assert_retry_later(queued)
    assert queued.json()["error"]["code"] == "reply_cut_short"


def test_an_unstreamed_reply_cut_by_sigterm_is_a_503_and_a_queued_stream_an_error(
    tiny_gguf: Path, tmp_path: Path
) -> None:
    with one_sequence_server(tiny_gguf, tmp_path) as server:
        running = Background(lambda: httpx.post(server.url + CHAT.path, json=CHAT.body, timeout=WAIT_S))
        wait_for_metric(server, "launcher_generation_tokens_total", 1)  # it has output by now
        body = {"model": "m", "prompt": "hi", "max_tokens": LONG, "stream": True}
        queued = Background(lambda: httpx.post(f"{server.url}/v1/completions", json=body, timeout=WAIT_S))
        wait_for_metric(server, "launcher_requests_waiting", 1)
        server.process.send_signal(signal.SIGTERM)
        assert server.process.wait(timeout=WAIT_S) in (0, -signal.SIGTERM)
    assert_retry_later(running.result())
    assert "shutting down" in running.result().json()["error"]["message"]
    stream = queued.result()
    assert stream.status_code == 200  # its headers went out before it waited
    data = [line for line in stream.text.splitlines() if line.startswith("data: ")]
    assert data[-1] == "data: [DONE]" and data_of(data[-2])["error"]["code"] == "reply_cut_short"
    assert not any(data_of(line).get("choices", [{}])[0].get("finish_reason") for line in data[:-2])


def test_the_sdks_raise_on_a_stream_cut_by_sigterm(tiny_gguf: Path, tmp_path: Path) -> None:
    errors: dict[str, BaseException] = {}
    flowing = {"openai": threading.Event(), "anthropic": threading.Event()}

    def read_openai(server: RunningServer) -> None:
        client = openai.OpenAI(base_url=server.base_url, api_key="none", max_retries=0, timeout=WAIT_S)
        try:
            stream = client.chat.completions.create(
                model="m",
                max_tokens=LONG,
                messages=SDK_HELLO,
                stream=True,
                extra_body={"ignore_eos": True},
            )
            for chunk in stream:
                if chunk.choices and chunk.choices[0].delta.content:
                    flowing["openai"].set()
        except BaseException as err:  # checked below
            errors["openai"] = err
        finally:
            flowing["openai"].set()

    def read_anthropic(server: RunningServer) -> None:
        client = anthropic.Anthropic(base_url=server.url, api_key="none", max_retries=0, timeout=WAIT_S)
        try:
            with client.messages.stream(model="m", max_tokens=LONG, messages=SDK_HELLO) as stream:
                for _ in stream.text_stream:
                    flowing["anthropic"].set()
        except BaseException as err:  # checked below
            errors["anthropic"] = err
        finally:
            flowing["anthropic"].set()

    with one_sequence_server(tiny_gguf, tmp_path, parallel=2) as server:
        readers = [threading.Thread(target=read, args=(server,)) for read in (read_openai, read_anthropic)]
        for reader in readers:
            reader.start()
        assert all(event.wait(WAIT_S) for event in flowing.values())
        assert not errors, errors  # both streams are under way
        server.process.send_signal(signal.SIGTERM)
        for reader in readers:
            reader.join(WAIT_S)
    assert isinstance(errors["openai"], openai.APIError) and "shutting down" in str(errors["openai"])
    cut = errors["anthropic"]
    assert isinstance(cut, anthropic.APIStatusError), cut
    assert cut.body["error"]["type"] == "overloaded_error"  # type: ignore[index,call-overload]
