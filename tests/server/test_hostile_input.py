"""Client mistakes get a 4xx in the client's error shape, never a 500: each case a probe of the server found.

All against a real `launcher serve` on the tiny GGUF (real llama.cpp, real tokenizer and grammar
compiler), because most of these failed deep inside them.
"""

from __future__ import annotations

import json
import re
import socket
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any
from urllib.parse import quote

import httpx
import pytest

from tests.conformance.servers import SERVERS, RunningServer, start_server
from tests.metrics_text import metric_total

LLAMACPP = SERVERS[0]
HELLO = [{"role": "user", "content": "hi"}]
DEEP = "[" * 5000 + "]" * 5000
POSTS: dict[str, dict[str, Any]] = {
    "/v1/chat/completions": {"messages": HELLO, "max_tokens": 2},
    "/v1/completions": {"prompt": "hi", "max_tokens": 2},
    "/v1/embeddings": {"input": "hi"},
    "/v1/responses": {"input": "hi", "max_output_tokens": 2},
    "/v1/messages": {"model": "m", "max_tokens": 2, "messages": HELLO},
    "/v1/messages/count_tokens": {"model": "m", "messages": HELLO},
}


@pytest.fixture(scope="module")
def server(tiny_gguf: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[RunningServer]:
    """`launcher serve` on the tiny GGUF: 2,048 tokens of context, one sequence."""
    reason = LLAMACPP.available()
    if reason:
        pytest.skip(reason)
    running = start_server(LLAMACPP, tiny_gguf, tmp_path_factory.mktemp("hostile"), "--parallel", "1")
    yield running
    running.stop()


def post(server: RunningServer, path: str, body: bytes | dict[str, Any], **headers: str) -> httpx.Response:
    content = body if isinstance(body, bytes) else json.dumps(body).encode()
    return httpx.post(
        server.url + path, content=content, headers={"content-type": "application/json", **headers}, timeout=60
    )


def assert_client_error(response: httpx.Response, path: str, status: int = 400) -> str:
    """The status, and the error body in the shape of the API at `path`; returns the message."""
    assert response.status_code == status, response.text
    body = response.json()
    if path.startswith("/v1/messages"):
        assert body["type"] == "error" and set(body["error"]) == {"type", "message"}
        return str(body["error"]["message"])
    assert set(body["error"]) == {"message", "type", "param", "code"}
    return str(body["error"]["message"])


def read_until_closed(sock: socket.socket) -> str:
    data = b""
    while chunk := sock.recv(65536):
        data += chunk
    return data.decode()


def complete_response(data: bytes) -> bool:
    """True once `data` holds a response's headers and all the body its Content-Length announces."""
    head, found, body = data.partition(b"\r\n\r\n")
    length = re.search(rb"(?i)content-length: *(\d+)", head)
    return bool(found and length and len(body) >= int(length.group(1)))


def log_of(server: RunningServer) -> str:
    return server.stderr_path.read_text(errors="replace")


@pytest.mark.parametrize("path", list(POSTS))
def test_json_nested_thousands_deep_is_a_400_on_every_endpoint(server: RunningServer, path: str) -> None:
    raw = json.dumps(POSTS[path])[:-1] + ', "extra": ' + DEEP + "}"
    message = assert_client_error(post(server, path, raw.encode()), path)
    assert "nested more than" in message


def test_deeply_nested_tool_call_arguments_are_a_400(server: RunningServer) -> None:
    history = [
        *HELLO,
        {
            "role": "assistant",
            "tool_calls": [{"id": "a", "type": "function", "function": {"name": "f", "arguments": DEEP}}],
        },
        {"role": "tool", "tool_call_id": "a", "content": "x"},
    ]
    response = post(server, "/v1/chat/completions", {"messages": history, "max_tokens": 2})
    assert "nested more than" in assert_client_error(response, "/v1/chat/completions")


@pytest.mark.parametrize("path", list(POSTS))
def test_a_lone_surrogate_is_a_400_naming_where_it_is(server: RunningServer, path: str) -> None:
    raw = json.dumps(POSTS[path]).replace('"hi"', '"h\\ud800i"').encode()
    assert b"\\ud800" in raw
    message = assert_client_error(post(server, path, raw), path)
    assert "lone UTF-16 surrogate" in message
    # a real surrogate pair is one character, and fine (the tiny model cannot embed: that 400 is another)
    pair = json.dumps(POSTS[path]).replace('"hi"', '"h\\ud83d\\ude00i"').encode()
    response = post(server, path, pair)
    assert response.status_code < 400 or "surrogate" not in response.text


SCHEMAS = [{"type": "nonsense"}, {"enum": []}, {"type": "string", "pattern": "(((("}]


@pytest.mark.parametrize("schema", SCHEMAS, ids=["bad-type", "empty-enum", "bad-pattern"])
def test_a_json_schema_the_engine_cannot_compile_is_a_400(server: RunningServer, schema: dict[str, Any]) -> None:
    response_format = {"type": "json_schema", "json_schema": {"name": "r", "schema": schema}}
    chat = post(
        server, "/v1/chat/completions", {"messages": HELLO, "max_tokens": 2, "response_format": response_format}
    )
    assert "cannot run" in assert_client_error(chat, "/v1/chat/completions")
    tool = {"name": "t", "input_schema": schema}
    body = {"model": "m", "max_tokens": 2, "messages": HELLO, "tools": [tool], "tool_choice": {"type": "any"}}
    assert_client_error(post(server, "/v1/messages", body), "/v1/messages")


def test_a_tool_name_with_a_quote_is_a_400_that_says_what_is_allowed(server: RunningServer) -> None:
    tools = [{"type": "function", "function": {"name": 'a"b', "parameters": {"type": "object"}}}]
    response = post(server, "/v1/chat/completions", {"messages": HELLO, "tools": tools, "tool_choice": "required"})
    assert "Tool name" in assert_client_error(response, "/v1/chat/completions")


@pytest.mark.parametrize("token", [999_999_999, 2**31, -1])
def test_token_ids_outside_the_vocabulary_are_a_400(server: RunningServer, token: int) -> None:
    response = post(server, "/v1/completions", {"prompt": [1, token], "max_tokens": 2})
    assert "vocabulary" in assert_client_error(response, "/v1/completions")


def test_a_responses_item_with_numeric_content_is_a_400(server: RunningServer) -> None:
    response = post(server, "/v1/responses", {"input": [{"role": "user", "content": 5}], "max_output_tokens": 2})
    assert_client_error(response, "/v1/responses")


def test_an_oversize_body_is_refused_from_its_length_before_it_is_read(server: RunningServer) -> None:
    with socket.create_connection(("127.0.0.1", int(server.url.rsplit(":", 1)[1])), timeout=10) as sock:
        sock.sendall(
            b"POST /v1/chat/completions HTTP/1.1\r\nHost: 127.0.0.1\r\ncontent-type: application/json\r\n"
            b"content-length: 1000000000000\r\n\r\n{"
        )
        reply = read_until_closed(sock)
    assert reply.startswith("HTTP/1.1 413") and "limit is 32 MiB" in reply


def test_an_oversize_body_without_a_length_is_cut_off_while_read(server: RunningServer) -> None:
    def chunks() -> Iterator[bytes]:
        yield b'{"messages": [{"role": "user", "content": "'
        for _ in range(40):  # 40 MiB, streamed: no Content-Length
            yield b"a" * (1024 * 1024)
        yield b'"}]}'

    response = httpx.post(
        server.url + "/v1/chat/completions", content=chunks(), headers={"content-type": "application/json"}, timeout=60
    )
    assert_client_error(response, "/v1/chat/completions", 413)


def test_a_client_still_sending_after_its_413_is_not_reset(server: RunningServer) -> None:
    """HTTP clients write the whole body before they read the answer: the server reads (and drops)
    the rest instead of resetting the connection, which could destroy its 413 on the way."""
    with socket.create_connection(("127.0.0.1", int(server.url.rsplit(":", 1)[1])), timeout=10) as sock:
        sock.sendall(
            b"POST /v1/chat/completions HTTP/1.1\r\nHost: 127.0.0.1\r\ncontent-type: application/json\r\n"
            b"content-length: 41943040\r\n\r\n{"
        )
        reply = b""
        while not complete_response(reply):
            chunk = sock.recv(65536)
            assert chunk, f"the connection ended before the answer was whole: {reply!r}"
            reply += chunk
        assert reply.startswith(b"HTTP/1.1 413")
        time.sleep(0.3)  # the server has answered and would have closed by now
        for _ in range(64):  # 4 MiB more of the body: a reset would fail these writes
            sock.sendall(b"a" * 65536)
        sock.shutdown(socket.SHUT_WR)
        assert sock.recv(65536) == b"", "a clean end (FIN) after the answer, not more bytes or a reset"


def test_a_client_leaving_mid_upload_is_logged_as_499_not_a_server_error(server: RunningServer) -> None:
    with socket.create_connection(("127.0.0.1", int(server.url.rsplit(":", 1)[1])), timeout=10) as sock:
        sock.sendall(
            b"POST /v1/chat/completions HTTP/1.1\r\nHost: 127.0.0.1\r\ncontent-type: application/json\r\n"
            b"user-agent: leaves-mid-upload\r\ncontent-length: 5000\r\n\r\n" + b"{" * 100
        )
        time.sleep(0.3)
    line = next(
        line
        for line in server.wait_for_log("leaves-mid-upload", timeout=10).splitlines()
        if "leaves-mid-upload" in line
    )
    assert " 499 " in line
    assert "Traceback" not in log_of(server)


def test_a_non_json_content_type_is_refused_so_web_pages_cannot_post_text_plain(server: RunningServer) -> None:
    response = post(
        server, "/v1/chat/completions", {"messages": HELLO, "max_tokens": 2}, **{"content-type": "text/plain"}
    )
    assert "application/json" in assert_client_error(response, "/v1/chat/completions", 415)


def test_a_foreign_web_page_origin_is_refused(server: RunningServer) -> None:
    response = post(server, "/v1/messages", POSTS["/v1/messages"], origin="https://evil.example")
    assert "--cors-origins" in assert_client_error(response, "/v1/messages", 403)


def test_control_token_text_in_user_content_is_read_as_text(server: RunningServer) -> None:
    def prompt_tokens(text: str) -> int:
        body = {"model": "m", "messages": [{"role": "user", "content": text}]}
        return int(post(server, "/v1/messages/count_tokens", body).json()["input_tokens"])

    # `<|im_end|>` is one control token to the tokenizer; typed by a user it must not end the turn
    assert prompt_tokens("say <|im_end|>") - prompt_tokens("say ") > 2, "the typed marker became a control token"


def test_a_huge_prompt_is_refused_from_its_length_and_health_keeps_answering(server: RunningServer) -> None:
    response = post(server, "/v1/completions", {"prompt": "word " * 2_000_000, "max_tokens": 1})
    assert "characters" in assert_client_error(response, "/v1/completions")
    # one that must be tokenized to know: the event loop stays free meanwhile
    done = threading.Event()
    result: list[httpx.Response] = []

    def big() -> None:
        result.append(post(server, "/v1/completions", {"prompt": "wörd " * 100_000, "max_tokens": 1}))
        done.set()

    thread = threading.Thread(target=big)
    thread.start()
    answered_meanwhile = 0
    while not done.is_set():
        if httpx.get(server.url + "/health", timeout=5).status_code == 200 and not done.is_set():
            answered_meanwhile += 1
        time.sleep(0.01)
    thread.join()
    assert result[0].status_code == 400 and "context" in result[0].text
    assert answered_meanwhile > 0


def metric(server: RunningServer, name: str) -> float:
    return metric_total(httpx.get(server.url + "/metrics").text, name)


def test_a_client_that_leaves_the_queue_stops_counting_as_waiting(server: RunningServer) -> None:
    long = {"prompt": "once upon", "max_tokens": 1900, "ignore_eos": True, "stream": True}
    with httpx.Client(timeout=60) as first, httpx.Client(timeout=60) as second:
        running = first.send(first.build_request("POST", server.url + "/v1/completions", json=long), stream=True)
        queued = second.send(second.build_request("POST", server.url + "/v1/completions", json=long), stream=True)
        deadline = time.monotonic() + 5
        while metric(server, "launcher_requests_waiting") < 1 and time.monotonic() < deadline:
            time.sleep(0.01)
        assert metric(server, "launcher_requests_waiting") == 1  # --parallel 1: the second one waits
        queued.close()
        second.close()
        deadline = time.monotonic() + 0.5
        while metric(server, "launcher_requests_waiting") > 0 and time.monotonic() < deadline:
            time.sleep(0.01)
        assert metric(server, "launcher_requests_waiting") == 0
        assert metric(server, "launcher_requests_running") == 1, "the first one ended too soon to tell"
        running.close()


FORGED = "2099-01-01 00:00:00,000 WARNING launcher.requests: GET /forged 200 total=0.00s"


def test_line_breaks_a_client_sends_cannot_forge_lines_in_the_log(server: RunningServer) -> None:
    # In the URL path (percent-encoded: \n, \r, NEL, U+2028, U+2029) and in a model name.
    for line_break in ("%0A", "%0D", "%C2%85", "%E2%80%A8", "%E2%80%A9"):
        httpx.get(f"{server.url}/v1/models/x{line_break}{quote(FORGED)}", timeout=30)
    name = f"m\n{FORGED}\u2028{FORGED}\x85{FORGED}"
    response = post(
        server, "/v1/chat/completions", {"model": name, "messages": HELLO, "max_tokens": 1}, **{"user-agent": "forger"}
    )
    assert response.status_code == 200, response.text
    server.wait_for_log("forger", timeout=10)
    log = log_of(server)
    assert not [line for line in log.splitlines() if line.startswith("2099")]  # splitlines: NEL, U+2028 too
    assert "x\\nFORGED".replace("FORGED", FORGED) in log  # the path is there, escaped
    assert f"asked=m\\n{FORGED}\\u2028" in log


def test_no_request_above_left_a_server_error(server: RunningServer) -> None:
    statuses = re.findall(r"launcher\.requests: \S+ \S+ (\d{3}) ", log_of(server))
    assert statuses and not [s for s in statuses if s.startswith("5")]
    assert httpx.get(server.url + "/health").json()["status"] == "ok"
