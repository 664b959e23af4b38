"""The chat turn with tools (launcher/chat/session.py) against the real server.

The server is the launcher's own app, with a scripted model at the engine seam only
(tests/server/fake_model.py): the real template renders the tools, the real parser turns the
model's Hermes `<tool_call>` into streamed `delta.tool_calls`, and a tool result comes back to the
model inside `<tool_response>`. What the model writes depends on markers in the conversation.
"""

from __future__ import annotations

import re
import socket
import threading
import time
from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass, replace
from typing import Any

import httpx
import pytest

from launcher.chat.session import (
    DENIED_TEXT,
    Decision,
    Endpoint,
    Event,
    Failed,
    Finished,
    ReasoningDelta,
    RoundFinished,
    TextDelta,
    ToolCallProposed,
    ToolCallResult,
    accepts_images,
    run_turn,
    to_openai_messages,
)
from launcher.chat.store import Attachment, ChatSettings, Message
from launcher.core.config import ServeConfig
from launcher.engines.base import GenerationEvent, GenerationRequest
from launcher.server.app import create_app
from tests.agents.scripted import scripted_info
from tests.server.fake_model import FakeModel
from tests.server.harness import running_app

MODEL = "scripted-model"
TOOL = "demo__add"
TOOLS = [
    {
        "type": "function",
        "function": {
            "name": TOOL,
            "description": "Add two numbers.",
            "parameters": {
                "type": "object",
                "properties": {"a": {"type": "number"}, "b": {"type": "number"}},
                "required": ["a", "b"],
            },
        },
    }
]
PLAIN = "Hello **there**, here is `code`."
THOUGHT = "The user wants a greeting."
LONG = "word " * 5000
# Like Qwen3's template, it mentions <think>, so the server splits the model's thinking out of the reply.
THINKING_TEMPLATE = "{#- the model reasons in <think></think> before answering -#}"


def scripted(prompt: str) -> str:
    """What the model writes: a call to the offered tool until it has as many results as the user's
    marker asks for ([twice], [forever]), then what the tool said; thinking for [think]; plain text
    otherwise."""
    results = re.findall(r"<tool_response>\n(.*?)\n</tool_response>", prompt, re.DOTALL)
    if "[long]" in prompt:
        return LONG
    if "[think]" in prompt:
        return f"<think>\n{THOUGHT}\n</think>\n\n{PLAIN}"
    if "<tools>" not in prompt:  # the template lists the offered tools there
        return PLAIN
    wanted = 100 if "[forever]" in prompt else 2 if "[twice]" in prompt else 1
    if len(results) < wanted:
        return f'<tool_call>\n{{"name": "{TOOL}", "arguments": {{"a": {len(results) + 2}, "b": 3}}}}\n</tool_call>'
    return "The tool said: " + " | ".join(results)


@dataclass(frozen=True)
class Outcome:
    """A tool result (the MCP host's ToolResult has the same two fields)."""

    text: str
    is_error: bool


@dataclass
class Turn:
    """One run_turn's events, confirmations and tool calls, as the page would see them."""

    decisions: list[Decision]
    results: list[Outcome]
    events: list[Event]
    asked: list[ToolCallProposed]
    called: list[tuple[str, dict[str, Any]]]
    added: list[dict[str, Any]]

    def of(self, kind: type[Any]) -> list[Any]:
        return [event for event in self.events if isinstance(event, kind)]

    @property
    def text(self) -> str:
        return "".join(event.text for event in self.of(TextDelta))


@pytest.fixture(scope="module")
def served() -> Iterator[tuple[str, FakeModel]]:
    info = replace(scripted_info(), chat_template=THINKING_TEMPLATE + str(scripted_info().chat_template))
    model = FakeModel(reply=scripted, info=info)
    with running_app(create_app(model, ServeConfig(port=0))) as url:
        yield url, model


@pytest.fixture
def server(served: tuple[str, FakeModel]) -> Iterator[tuple[Endpoint, FakeModel]]:
    url, model = served
    yield Endpoint(url + "/v1", None, MODEL), model
    model.delay, model.first_delay = 0.0, 0.0


def turn(
    endpoint: Endpoint,
    user_text: str,
    *,
    decisions: list[Decision] | None = None,
    results: list[Outcome] | None = None,
    always_allowed: set[str] | None = None,
    settings: ChatSettings | None = None,
    tools: list[dict[str, Any]] | None = None,
    cancel: threading.Event | None = None,
    max_rounds: int = 8,
    history: list[dict[str, Any]] | None = None,
) -> Turn:
    record = Turn(list(decisions or []), list(results or []), [], [], [], [])

    def confirm(proposed: ToolCallProposed) -> Decision:
        record.asked.append(proposed)
        return record.decisions.pop(0)

    def call_tool(qualified: str, arguments: dict[str, Any]) -> Outcome:
        record.called.append((qualified, arguments))
        return record.results.pop(0) if record.results else Outcome(str(sum(arguments.values())), False)

    messages = history if history is not None else [{"role": "user", "content": user_text}]
    record.added = run_turn(
        endpoint,
        messages,
        tools=TOOLS if tools is None else tools,
        settings=settings or ChatSettings(),
        on_event=record.events.append,
        confirm=confirm,
        call_tool=call_tool,
        cancel=cancel or threading.Event(),
        always_allowed=always_allowed if always_allowed is not None else set(),
        max_rounds=max_rounds,
    )
    return record


def test_a_plain_answer_streams_in_pieces_and_ends_with_its_numbers(server: tuple[Endpoint, FakeModel]) -> None:
    endpoint, _ = server
    done = turn(endpoint, "Say hello.", tools=[])
    assert len(done.of(TextDelta)) > 1  # streamed, not one block at the end
    assert done.text == PLAIN
    assert done.added == [{"role": "assistant", "content": PLAIN}]
    assert done.of(RoundFinished) == [RoundFinished(done.added[0])]
    finished = done.events[-1]
    assert isinstance(finished, Finished) and finished.finish_reason == "stop"
    assert finished.usage is not None and finished.usage["completion_tokens"] == len(PLAIN)
    assert finished.ttft is not None and 0 < finished.ttft <= finished.seconds
    assert not done.asked and not done.called


def test_thinking_arrives_apart_from_the_answer(server: tuple[Endpoint, FakeModel]) -> None:
    endpoint, _ = server
    done = turn(endpoint, "[think] Say hello.", tools=[])
    assert "".join(event.text for event in done.of(ReasoningDelta)).strip() == THOUGHT
    assert done.text == PLAIN
    assert done.added[0]["content"] == PLAIN
    assert done.added[0]["reasoning_content"].strip() == THOUGHT


def test_settings_reach_the_server(server: tuple[Endpoint, FakeModel]) -> None:
    endpoint, model = server
    done = turn(endpoint, "Say hello.", tools=[], settings=ChatSettings(temperature=0.25, top_p=0.5, max_tokens=5))
    assert done.text == PLAIN[:5]
    assert isinstance(done.events[-1], Finished) and done.events[-1].finish_reason == "length"
    sampling = model.requests[-1].sampling
    assert (sampling.temperature, sampling.top_p) == (0.25, 0.5)


def test_a_tool_round_trip_asks_runs_and_sends_the_result_back(server: tuple[Endpoint, FakeModel]) -> None:
    endpoint, model = server
    done = turn(endpoint, "Add two and three.", decisions=["once"])
    [proposed] = done.asked
    assert (proposed.qualified, proposed.arguments) == (TOOL, {"a": 2, "b": 3})
    assert done.called == [(TOOL, {"a": 2, "b": 3})]
    assert done.of(ToolCallResult) == [ToolCallResult(proposed.call_id, "5", False, False)]
    call, result, answer = done.added
    assert call["tool_calls"] == [
        {"id": proposed.call_id, "type": "function", "function": {"name": TOOL, "arguments": proposed.raw_arguments}}
    ]
    assert result == {"role": "tool", "tool_call_id": proposed.call_id, "content": "5"}
    assert answer == {"role": "assistant", "content": "The tool said: 5"}
    assert "<tool_response>\n5\n</tool_response>" in model.detokenize(model.requests[-1].prompt_tokens)
    assert [type(event) for event in done.events if not isinstance(event, TextDelta)] == [
        RoundFinished,
        ToolCallProposed,
        ToolCallResult,
        RoundFinished,
        Finished,
    ]
    assert done.events[-1].finish_reason == "stop"  # type: ignore[union-attr]


def test_a_tool_error_reaches_the_model(server: tuple[Endpoint, FakeModel]) -> None:
    endpoint, _ = server
    done = turn(endpoint, "Add two and three.", decisions=["once"], results=[Outcome("demo: the server crashed", True)])
    assert done.of(ToolCallResult)[0].is_error
    assert done.added[-1]["content"] == "The tool said: demo: the server crashed"


def test_deny_runs_nothing_and_tells_the_model(server: tuple[Endpoint, FakeModel]) -> None:
    endpoint, _ = server
    done = turn(endpoint, "Add two and three.", decisions=["deny"])
    assert len(done.asked) == 1 and not done.called
    [result] = done.of(ToolCallResult)
    assert result.denied and result.text == DENIED_TEXT
    assert done.added[1]["content"] == DENIED_TEXT
    assert done.added[-1]["content"] == f"The tool said: {DENIED_TEXT}"


def test_always_allow_asks_once_per_tool(server: tuple[Endpoint, FakeModel]) -> None:
    endpoint, _ = server
    allowed: set[str] = set()
    done = turn(endpoint, "[twice] Add.", decisions=["always"], always_allowed=allowed)
    assert len(done.asked) == 1  # the second round's call ran without asking
    assert done.called == [(TOOL, {"a": 2, "b": 3}), (TOOL, {"a": 3, "b": 3})]
    assert allowed == {TOOL}
    assert done.added[-1]["content"] == "The tool said: 5 | 6"
    again = turn(endpoint, "Add two and three.", always_allowed=allowed)  # the page keeps the set
    assert not again.asked and len(again.called) == 1


def test_max_rounds_stops_a_model_that_keeps_calling(server: tuple[Endpoint, FakeModel]) -> None:
    endpoint, _ = server
    done = turn(endpoint, "[forever] Add.", always_allowed={TOOL}, max_rounds=3)
    assert len(done.called) == 2  # the last round's call is reported, not run: nothing would read it
    failed = done.events[-1]
    assert isinstance(failed, Failed) and "3 rounds" in failed.message
    last = done.of(ToolCallResult)[-1]
    assert last.is_error and "limit of 3 rounds" in last.text
    # Every call in the history has its result, so the conversation can go on.
    calls = [call["id"] for message in done.added for call in message.get("tool_calls", [])]
    answered = [message["tool_call_id"] for message in done.added if message["role"] == "tool"]
    assert calls == answered and len(calls) == 3


def wait_until_idle(model: FakeModel) -> None:
    deadline = time.monotonic() + 5
    while model.running and time.monotonic() < deadline:
        time.sleep(0.02)
    assert model.running == 0, "the server kept generating for a client that left"


def cancel_after(seconds: float) -> threading.Event:
    cancel = threading.Event()
    threading.Timer(seconds, cancel.set).start()
    return cancel


def test_stop_while_the_prompt_is_read_returns_at_once(server: tuple[Endpoint, FakeModel]) -> None:
    endpoint, model = server
    model.first_delay = 30  # a long prompt: nothing arrives, the reader waits on the socket
    began = time.monotonic()
    done = turn(endpoint, "Say hello.", tools=[], cancel=cancel_after(0.3))
    assert time.monotonic() - began < 2
    assert done.added == [] and done.text == ""
    assert isinstance(done.events[-1], Finished) and done.events[-1].finish_reason == "cancelled"
    wait_until_idle(model)


def test_stop_mid_stream_keeps_the_partial_answer(server: tuple[Endpoint, FakeModel]) -> None:
    endpoint, model = server
    model.delay = 0.002  # the whole answer would take 50 s
    began = time.monotonic()
    done = turn(endpoint, "[long] Write a lot.", tools=[], cancel=cancel_after(0.4))
    assert time.monotonic() - began < 2
    [partial] = done.added
    assert partial["content"] and LONG.startswith(partial["content"]) and len(partial["content"]) < len(LONG)
    assert partial["content"] == done.text
    assert done.of(RoundFinished) == [RoundFinished(partial)]
    assert isinstance(done.events[-1], Finished) and done.events[-1].finish_reason == "cancelled"
    wait_until_idle(model)


def test_stop_while_asked_runs_nothing(server: tuple[Endpoint, FakeModel]) -> None:
    endpoint, _ = server
    cancel = threading.Event()

    def confirm_then_stop(proposed: ToolCallProposed) -> Decision:
        cancel.set()  # the user pressed Stop while the card asked
        return "once"

    events: list[Event] = []
    added = run_turn(
        endpoint,
        [{"role": "user", "content": "Add two and three."}],
        tools=TOOLS,
        settings=ChatSettings(),
        on_event=events.append,
        confirm=confirm_then_stop,
        call_tool=lambda name, arguments: pytest.fail("a stopped turn ran a tool"),
        cancel=cancel,
        always_allowed=set(),
    )
    assert [message["role"] for message in added] == ["assistant", "tool"]
    assert isinstance(events[-1], Finished) and events[-1].finish_reason == "cancelled"


def test_an_http_error_fails_with_the_servers_words(server: tuple[Endpoint, FakeModel]) -> None:
    endpoint, _ = server
    bad_tool = [{"type": "function", "function": {"name": "two words", "parameters": {"type": "object"}}}]
    done = turn(endpoint, "Add.", tools=bad_tool)
    failed = done.events[-1]
    assert isinstance(failed, Failed)
    assert failed.message.startswith("The server answered 400: Tool name 'two words' is not allowed")
    assert done.added == []


def test_a_wrong_api_key_fails_with_the_servers_words() -> None:
    model = FakeModel(reply=scripted, info=scripted_info())
    with running_app(create_app(model, ServeConfig(port=0, api_key="right-key"))) as url:
        done = turn(Endpoint(url + "/v1", "wrong-key", MODEL), "Say hello.", tools=[])
        right = turn(Endpoint(url + "/v1", "right-key", MODEL), "Say hello.", tools=[])
    failed = done.events[-1]
    assert isinstance(failed, Failed) and failed.message.startswith("The server answered 401: ")
    assert right.text == PLAIN


class BreakingModel(FakeModel):
    """Writes a few characters and then fails, as an engine that dies mid-reply."""

    async def _run(self, request: GenerationRequest) -> AsyncIterator[GenerationEvent]:
        for char in "Half an ans":
            yield GenerationEvent(token_ids=(ord(char),), text=char)
        yield GenerationEvent(finish_reason="error", error="the GPU fell off the bus", completion_tokens=11)


def test_a_reply_that_fails_midway_keeps_its_text_and_says_why() -> None:
    with running_app(create_app(BreakingModel(info=scripted_info()), ServeConfig(port=0))) as url:
        done = turn(Endpoint(url + "/v1", None, MODEL), "Say hello.", tools=[])
    failed = done.events[-1]
    assert isinstance(failed, Failed) and failed.message.startswith("The server stopped the reply: ")
    assert "the GPU fell off the bus" in failed.message
    assert done.added == [{"role": "assistant", "content": "Half an ans"}]
    assert done.of(RoundFinished) == [RoundFinished(done.added[0])]


def test_no_server_fails_clearly() -> None:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    done = turn(Endpoint(f"http://127.0.0.1:{port}/v1", None, MODEL), "Say hello.", tools=[])
    failed = done.events[-1]
    assert isinstance(failed, Failed) and failed.message.startswith(
        f"Could not reach the server at http://127.0.0.1:{port}/v1"
    )


def message(role: str, content: str = "", **fields: Any) -> Message:
    return Message(id=0, conversation_id=1, role=role, content=content, created=0.0, **fields)  # type: ignore[arg-type]


NOTES = Attachment(name="notes.md", kind="text", mime="text/markdown", text="# Notes\n```py\nx = 1\n```\n", size=24)
PIXEL = Attachment(name="dot.png", kind="image", mime="image/png", data_base64="iVBORw0KGgo=", size=8)


def test_stored_messages_become_openai_messages() -> None:
    call = {"id": "call_1", "type": "function", "function": {"name": TOOL, "arguments": '{"a": 2, "b": 3}'}}
    stored = [
        message("user", "Add two and three."),
        message("assistant", "", tool_calls=[call], reasoning="I should add."),
        message("tool", "5", tool_call_id="call_1"),
        message("assistant", "It is 5."),
        message("assistant", "", error="The server answered 500: boom", finished=False),  # failed before any text
        message("user", "Read this.", attachments=[NOTES, PIXEL]),
    ]
    sent = to_openai_messages("Be brief.", stored, accepts_images=False)
    assert sent[:5] == [
        {"role": "system", "content": "Be brief."},
        {"role": "user", "content": "Add two and three."},
        {"role": "assistant", "content": "", "tool_calls": [call]},
        {"role": "tool", "tool_call_id": "call_1", "content": "5"},
        {"role": "assistant", "content": "It is 5."},
    ]
    # The file is fenced under its name, with a fence longer than the one inside it; the image is left out.
    assert sent[5] == {"role": "user", "content": "Read this.\n\nnotes.md:\n````\n# Notes\n```py\nx = 1\n```\n````"}
    assert len(sent) == 6
    assert to_openai_messages("  ", stored[:1], accepts_images=False) == [
        {"role": "user", "content": "Add two and three."}
    ]


def test_images_go_as_data_urls_only_to_a_model_that_takes_them() -> None:
    stored = [message("user", "What is this?", attachments=[PIXEL])]
    assert to_openai_messages("", stored, accepts_images=False) == [{"role": "user", "content": "What is this?"}]
    assert to_openai_messages("", stored, accepts_images=True) == [
        {
            "role": "user",
            "content": [
                {"type": "text", "text": "What is this?"},
                {"type": "image_url", "image_url": {"url": "data:image/png;base64,iVBORw0KGgo="}},
            ],
        }
    ]


def test_a_stored_conversation_with_tools_and_files_is_what_the_model_reads(
    server: tuple[Endpoint, FakeModel],
) -> None:
    endpoint, model = server
    call = {"id": "call_1", "type": "function", "function": {"name": TOOL, "arguments": '{"a": 2, "b": 3}'}}
    stored = [
        message("user", "Add two and three."),
        message("assistant", "", tool_calls=[call]),
        message("tool", "5", tool_call_id="call_1"),
        message("assistant", "It is 5."),
        message("user", "Read this.", attachments=[NOTES, PIXEL]),
    ]
    history = to_openai_messages("Be brief.", stored, accepts_images=False)
    done = turn(endpoint, "", tools=[], history=history)
    assert done.text == PLAIN
    prompt = model.detokenize(model.requests[-1].prompt_tokens)
    assert prompt.startswith("<|im_start|>system\nBe brief.<|im_end|>")
    assert '<tool_call>\n{"name": "demo__add", "arguments": {"a": 2, "b": 3}}\n</tool_call>' in prompt
    assert "<tool_response>\n5\n</tool_response>" in prompt
    assert "notes.md:\n````\n# Notes\n```py\nx = 1\n```\n````" in prompt


def test_accepts_images_reads_the_models_entry(server: tuple[Endpoint, FakeModel]) -> None:
    endpoint, _ = server
    [entry] = httpx.get(endpoint.base_url + "/models").json()["data"]
    assert entry["id"] == MODEL
    assert accepts_images(entry) is False  # the launcher's server serves text-only models
    assert accepts_images({"id": "llava", "capabilities": ["completion", "vision"]})
    assert accepts_images({"id": "m", "architecture": {"input_modalities": ["text", "image"]}})
    assert accepts_images({"id": "m", "vision": True})
    assert not accepts_images({"id": "m", "capabilities": ["completion", "tools"]})
