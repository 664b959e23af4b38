"""`tool_choice: auto` through a real `launcher serve` (llama.cpp, the tiny GGUF) and the official openai
SDK: a call the model starts comes out as a valid call to a known tool, whole and streamed.

The random model never starts a call by itself: `logit_bias` makes `<tool_call>` its likeliest token, as
a trained model's is once it decides to call. Without the lazy grammar, what it writes after the marker
is no call at all (tests/engines/llamacpp/test_lazy_tool_grammar.py shows that on the engine).
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import openai
import pytest
from gguf import GGUFReader

from tests.conformance.servers import SERVERS, RunningServer, start_server
from tests.metrics_text import metric_total

TOOLS: Any = [
    {
        "type": "function",
        "function": {
            "name": "read_file",
            "description": "Read a file of the project",
            "parameters": {
                "type": "object",
                "properties": {"path": {"type": "string", "maxLength": 40}, "lines": {"type": "integer"}},
                "required": ["path", "lines"],
            },
        },
    }
]
MESSAGES: Any = [{"role": "user", "content": "Show me the first lines of main.py"}]


def _token_id(path: Path, text: str) -> int:
    reader = GGUFReader(path)
    field = reader.fields["tokenizer.ggml.tokens"]
    tokens = [bytes(field.parts[index]).decode() for index in field.data]
    return tokens.index(text)


@pytest.fixture(scope="module")
def server(tiny_gguf: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[RunningServer]:
    spec = SERVERS[0]
    if spec.available():
        pytest.skip(str(spec.available()))
    running = start_server(spec, tiny_gguf, tmp_path_factory.mktemp("lazy-tools"))
    try:
        yield running
    finally:
        running.stop()


def _request(tiny_gguf: Path) -> dict[str, Any]:
    bias = {str(_token_id(tiny_gguf, "<tool_call>")): 30}
    return {
        "model": "tiny",
        "messages": MESSAGES,
        "tools": TOOLS,
        "max_tokens": 120,
        "temperature": 0,
        "logit_bias": bias,
        "parallel_tool_calls": False,
        "extra_body": {"speculative": "off"},
    }


def _check(name: str, arguments: str) -> None:
    assert name == "read_file"
    parsed = json.loads(arguments)
    assert isinstance(parsed["path"], str) and isinstance(parsed["lines"], int), arguments


def test_a_started_call_is_a_valid_call(server: RunningServer, tiny_gguf: Path) -> None:
    api = openai.OpenAI(base_url=f"{server.url}/v1", api_key="unused", timeout=120)
    reply = api.chat.completions.create(**_request(tiny_gguf))
    choice = reply.choices[0]
    assert choice.finish_reason == "tool_calls", choice.message
    assert choice.message.tool_calls is not None and len(choice.message.tool_calls) == 1
    call = choice.message.tool_calls[0]
    assert call.type == "function"
    _check(call.function.name, call.function.arguments)


def test_a_streamed_call_is_the_same_call(server: RunningServer, tiny_gguf: Path) -> None:
    api = openai.OpenAI(base_url=f"{server.url}/v1", api_key="unused", timeout=120)
    whole = api.chat.completions.create(**_request(tiny_gguf))
    names: dict[int, str] = {}
    arguments: dict[int, str] = {}
    finish = None
    for chunk in api.chat.completions.create(stream=True, **_request(tiny_gguf)):
        if not chunk.choices:
            continue
        delta = chunk.choices[0].delta
        for call in delta.tool_calls or []:
            names[call.index] = names.get(call.index, "") + ((call.function and call.function.name) or "")
            arguments[call.index] = arguments.get(call.index, "") + ((call.function and call.function.arguments) or "")
        finish = chunk.choices[0].finish_reason or finish
    assert finish == "tool_calls" and list(names) == [0]
    _check(names[0], arguments[0])
    assert whole.choices[0].message.tool_calls is not None
    assert json.loads(arguments[0]) == json.loads(whole.choices[0].message.tool_calls[0].function.arguments)


def test_calls_are_counted_in_metrics_and_the_request_log(server: RunningServer, tiny_gguf: Path) -> None:
    api = openai.OpenAI(base_url=f"{server.url}/v1", api_key="unused", timeout=120)
    before = httpx.get(f"{server.url}/metrics", timeout=30).text
    api.chat.completions.create(**_request(tiny_gguf))
    # max_tokens cuts the next call short: what the model wrote reaches the client as text, counted so
    cut = api.chat.completions.create(**{**_request(tiny_gguf), "max_tokens": 6})
    assert cut.choices[0].finish_reason == "length" and not cut.choices[0].message.tool_calls
    assert (cut.choices[0].message.content or "").startswith("<tool_call>")
    after = httpx.get(f"{server.url}/metrics", timeout=30).text

    def delta(outcome: str) -> float:
        labels = {"outcome": outcome, "grammar": "lazy"}
        name = "launcher_tool_calls_total"
        return metric_total(after, name, **labels) - (
            metric_total(before, name, **labels) if f'outcome="{outcome}"' in before else 0.0
        )

    assert delta("parsed") == 1 and delta("left_as_text") == 1
    log = server.stderr_path.read_text(errors="replace")
    assert "calls=1 (lazy grammar)" in log and "calls=0 (lazy grammar) left-as-text=1" in log


@pytest.fixture(scope="module")
def server_without_grammar(tiny_gguf: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[RunningServer]:
    spec = SERVERS[0]
    if spec.available():
        pytest.skip(str(spec.available()))
    home = tmp_path_factory.mktemp("no-call-grammar")
    running = start_server(spec, tiny_gguf, home, "--tool-call-grammar", "off")
    try:
        yield running
    finally:
        running.stop()


def test_with_the_grammar_off_a_started_call_is_free_text(
    server_without_grammar: RunningServer, tiny_gguf: Path
) -> None:
    """`--tool-call-grammar off`: the same request gets no grammar, so what the random model writes after
    `<tool_call>` is no call; it reaches the client as text, counted under grammar "none"."""
    server = server_without_grammar
    api = openai.OpenAI(base_url=f"{server.url}/v1", api_key="unused", timeout=120)
    before = httpx.get(f"{server.url}/metrics", timeout=30).text
    reply = api.chat.completions.create(**_request(tiny_gguf))
    after = httpx.get(f"{server.url}/metrics", timeout=30).text
    choice = reply.choices[0]
    assert not choice.message.tool_calls and (choice.message.content or "").startswith("<tool_call>")
    assert 'grammar="lazy"' not in after
    assert metric_total(after, "launcher_tool_calls_total", outcome="left_as_text", grammar="none") >= 1
    assert 'grammar="none"' not in before
    log = server.wait_for_log("calls=0 left-as-text=")
    assert "calls=0 left-as-text=" in log and "lazy grammar" not in log
