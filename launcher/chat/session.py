"""One chat turn with tools: stream the model's reply, run the tool calls the user allows, send the
results back, and go on until the model answers without calls.

It talks to the OpenAI-compatible `/v1/chat/completions` of the launcher's server (or any server
that speaks it) with plain httpx and server-sent events; no Qt here, so the page runs `run_turn` on a
worker thread and answers `confirm` from its own thread. The tools go to the server as OpenAI `tools`,
and the server renders them in the model's own template and parses the model's calls back into
`delta.tool_calls` (launcher/server/openai_api/routes_openai.py streams each call's id and name, then its
arguments). Thinking arrives as `delta.reasoning_content`; the usage comes in a last chunk when
`stream_options.include_usage` asks for it.
"""

from __future__ import annotations

import json
import socket
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager, suppress
from dataclasses import dataclass, field
from typing import Any, Literal, Protocol

import httpx

from launcher.chat.store import DENIED_TEXT, ChatSettings, Message, code_fence, parse_arguments

STOPPED_TEXT = "Not run: the user stopped this turn."
_CONNECT_TIMEOUT_S = 5.0
# The server sends a keepalive comment while a long prompt is read, so a silence this long is a hung server.
_READ_TIMEOUT_S = 300.0
_CANCEL_POLL_S = 0.05  # how soon a set `cancel` closes the stream


@dataclass(frozen=True)
class Endpoint:
    """Where the turn goes: the OpenAI base URL (ending in /v1), its key, and the model to ask."""

    base_url: str
    api_key: str | None
    model: str


@dataclass(frozen=True)
class TextDelta:
    """A piece of the answer."""

    text: str


@dataclass(frozen=True)
class ReasoningDelta:
    """A piece of the model's thinking (`delta.reasoning_content`), shown apart from the answer."""

    text: str


@dataclass(frozen=True)
class ToolCallProposed:
    """The model asks to call a tool; `arguments` is {} when `raw_arguments` is not a JSON object."""

    call_id: str
    qualified: str
    arguments: dict[str, Any]
    raw_arguments: str


@dataclass(frozen=True)
class ToolCallResult:
    """What a call gave back (also what the model reads); `denied` when the user said no."""

    call_id: str
    text: str
    is_error: bool
    denied: bool


@dataclass(frozen=True)
class RoundFinished:
    """One assistant message is complete (or cut short), in the shape appended to the history."""

    message: dict[str, Any]


@dataclass(frozen=True)
class Finished:
    """The turn ended: "stop", "length", or "cancelled" when the user stopped it. `usage`, `seconds`
    and `ttft` (time to the first token) are the last reply's, so tokens per second follow from them."""

    finish_reason: str
    usage: dict[str, Any] | None
    seconds: float
    ttft: float | None


@dataclass(frozen=True)
class Failed:
    """The turn could not go on; `message` says why in words a user can act on."""

    message: str


Event = TextDelta | ReasoningDelta | ToolCallProposed | ToolCallResult | RoundFinished | Finished | Failed
Decision = Literal["once", "always", "deny"]


class Approvals(Protocol):
    """The tools that run without asking: a `set[str]` of names, or a set that resolves each name to
    the tool it stands for now (the page's `ToolApprovals`)."""

    def __contains__(self, qualified: object) -> bool: ...

    def add(self, qualified: str) -> None: ...


class ToolOutcome(Protocol):
    """What a tool call returns (the MCP host's ToolResult fits)."""

    @property
    def text(self) -> str: ...

    @property
    def is_error(self) -> bool: ...


class TurnFailed(Exception):
    """A request of the turn failed; the message is the user's."""


@dataclass
class _Reply:
    """One streamed assistant reply, as it was put together."""

    text: list[str] = field(default_factory=list)
    reasoning: list[str] = field(default_factory=list)
    calls: dict[int, dict[str, Any]] = field(default_factory=dict)
    finish_reason: str | None = None
    usage: dict[str, Any] | None = None
    ttft: float | None = None
    started: float = field(default_factory=time.monotonic)
    cancelled: bool = False

    def message(self) -> dict[str, Any]:
        message: dict[str, Any] = {"role": "assistant", "content": "".join(self.text)}
        if self.reasoning:
            message["reasoning_content"] = "".join(self.reasoning)
        if self.calls:
            message["tool_calls"] = [self.calls[index] for index in sorted(self.calls)]
        return message

    def has_output(self) -> bool:
        return bool(self.text or self.reasoning or self.calls)


def run_turn(
    endpoint: Endpoint,
    messages: list[dict[str, Any]],
    *,
    tools: list[dict[str, Any]],
    settings: ChatSettings,
    on_event: Callable[[Event], None],
    confirm: Callable[[ToolCallProposed], Decision],
    call_tool: Callable[[str, dict[str, Any]], ToolOutcome],
    cancel: threading.Event,
    always_allowed: Approvals,
    max_rounds: int = 8,
    http: httpx.Client | None = None,
) -> list[dict[str, Any]]:
    """Run one turn on a worker thread and return the messages it added (assistant and tool ones,
    OpenAI shapes, for the caller to store). The last event is Finished or Failed.

    An assistant message that was cut short (stopped, or the server failed mid-reply) is returned too
    when it holds anything, without its unfinished calls. `always_allowed` is the caller's set of tools
    that run without asking; "always" adds to it.
    """
    client = (
        http if http is not None else httpx.Client(timeout=httpx.Timeout(_READ_TIMEOUT_S, connect=_CONNECT_TIMEOUT_S))
    )
    added: list[dict[str, Any]] = []
    try:
        for round_number in range(1, max_rounds + 1):
            if cancel.is_set():
                on_event(Finished("cancelled", None, 0.0, None))
                return added
            reply = _Reply()
            failure: str | None = None
            try:
                _stream_reply(client, endpoint, messages + added, tools, settings, on_event, cancel, reply)
            except TurnFailed as err:
                failure = str(err)
            if failure is None and not reply.cancelled and reply.finish_reason is None:
                failure = "The server closed the stream before the end of the reply."
            if failure is not None or reply.cancelled:
                # Calls of a reply cut short were never whole: the history keeps only its text.
                reply.calls.clear()
                if reply.has_output():
                    added.append(reply.message())
                    on_event(RoundFinished(added[-1]))
                if failure is not None:
                    on_event(Failed(failure))
                else:
                    on_event(Finished("cancelled", reply.usage, time.monotonic() - reply.started, reply.ttft))
                return added
            added.append(reply.message())
            on_event(RoundFinished(added[-1]))
            if not reply.calls:
                on_event(
                    Finished(reply.finish_reason or "stop", reply.usage, time.monotonic() - reply.started, reply.ttft)
                )
                return added
            # In the last round nothing would read the results: the calls are reported, not run.
            limit = max_rounds if round_number == max_rounds else None
            for call in added[-1]["tool_calls"]:
                added.append(_handle_call(call, on_event, confirm, call_tool, cancel, always_allowed, limit))
            if cancel.is_set():
                on_event(Finished("cancelled", reply.usage, time.monotonic() - reply.started, reply.ttft))
                return added
        on_event(
            Failed(
                f"The model was still calling tools after {max_rounds} rounds, so the turn stopped there. "
                "Ask again to let it go on."
            )
        )
        return added
    finally:
        if http is None:
            client.close()


def _handle_call(
    call: dict[str, Any],
    on_event: Callable[[Event], None],
    confirm: Callable[[ToolCallProposed], Decision],
    call_tool: Callable[[str, dict[str, Any]], ToolOutcome],
    cancel: threading.Event,
    always_allowed: Approvals,
    limit: int | None,
) -> dict[str, Any]:
    """Ask, run and report one call; returns the tool message the model reads."""
    call_id, function = str(call["id"]), call["function"]
    qualified, raw = str(function["name"]), str(function["arguments"])
    arguments = parse_arguments(raw)
    proposed = ToolCallProposed(call_id, qualified, arguments if arguments is not None else {}, raw)
    on_event(proposed)
    denied = False
    if cancel.is_set():
        text, is_error = STOPPED_TEXT, True
    elif limit is not None:
        text, is_error = f"Not run: this turn reached its limit of {limit} rounds of tool calls.", True
    elif arguments is None:
        text, is_error = f"Not run: the arguments are not a JSON object: {raw[:200]}", True
    else:
        decision: Decision = "once" if qualified in always_allowed else confirm(proposed)
        if decision == "always":
            always_allowed.add(qualified)
        if decision == "deny":
            text, is_error, denied = DENIED_TEXT, False, True
        elif cancel.is_set():  # stopped while the user was asked
            text, is_error = STOPPED_TEXT, True
        else:
            text, is_error = _call(call_tool, qualified, arguments)
    on_event(ToolCallResult(call_id, text, is_error, denied))
    return {"role": "tool", "tool_call_id": call_id, "content": text}


def _call(
    call_tool: Callable[[str, dict[str, Any]], ToolOutcome], qualified: str, arguments: dict[str, Any]
) -> tuple[str, bool]:
    try:
        result = call_tool(qualified, arguments)
    except Exception as err:  # the turn goes on: the model reads what went wrong, like any tool error
        return f"The tool {qualified} failed: {err}", True
    return result.text, result.is_error


def _request_body(
    endpoint: Endpoint, messages: list[dict[str, Any]], tools: list[dict[str, Any]], settings: ChatSettings
) -> dict[str, Any]:
    body: dict[str, Any] = {
        "model": endpoint.model,
        "messages": messages,
        "stream": True,
        "stream_options": {"include_usage": True},
    }
    if tools:
        body["tools"] = tools
    # None leaves the server's default (the model's own sampling settings, the server's output limit).
    for name in ("temperature", "top_p", "max_tokens"):
        value = getattr(settings, name)
        if value is not None:
            body[name] = value
    return body


def _stream_reply(
    client: httpx.Client,
    endpoint: Endpoint,
    messages: list[dict[str, Any]],
    tools: list[dict[str, Any]],
    settings: ChatSettings,
    on_event: Callable[[Event], None],
    cancel: threading.Event,
    reply: _Reply,
) -> None:
    """Send one request and read its stream into `reply` (which keeps what arrived when it fails);
    raises TurnFailed with the server's own words."""
    url = endpoint.base_url.rstrip("/") + "/chat/completions"
    headers = {"Authorization": f"Bearer {endpoint.api_key}"} if endpoint.api_key else {}
    try:
        with client.stream(
            "POST", url, json=_request_body(endpoint, messages, tools, settings), headers=headers
        ) as response:
            if response.status_code >= 400:
                response.read()
                raise TurnFailed(f"The server answered {response.status_code}: {_error_message(response)}")
            with _closed_on_cancel(response, cancel):
                _read_stream(response, reply, on_event, cancel)
    except httpx.ConnectError as err:
        raise TurnFailed(f"Could not reach the server at {endpoint.base_url}: {err}") from err
    except httpx.TimeoutException as err:
        if cancel.is_set():
            reply.cancelled = True
            return
        raise TurnFailed(f"The server sent nothing for {_READ_TIMEOUT_S:g} s, so the reply was given up.") from err
    except httpx.HTTPError as err:
        if cancel.is_set():  # the stream was closed under the reader on purpose
            reply.cancelled = True
            return
        raise TurnFailed(f"The connection to the server broke mid-reply: {err}") from err


def _read_stream(
    response: httpx.Response, reply: _Reply, on_event: Callable[[Event], None], cancel: threading.Event
) -> None:
    for line in response.iter_lines():
        if cancel.is_set():
            reply.cancelled = True
            return
        if not line.startswith("data:"):
            continue  # blank separators and ": keepalive" comments
        payload = line[5:].strip()
        if payload == "[DONE]":
            return
        try:
            chunk = json.loads(payload)
        except ValueError as err:
            raise TurnFailed(f"The server sent something that is not JSON: {payload[:200]}") from err
        if not isinstance(chunk, dict):
            continue
        if "error" in chunk:
            # The server cut the reply after the headers went out (an engine failure, a stopping server).
            raise TurnFailed(f"The server stopped the reply: {_message_of(chunk['error'])}")
        if chunk.get("usage"):
            reply.usage = dict(chunk["usage"])
        for choice in chunk.get("choices") or []:
            if isinstance(choice, dict) and choice.get("index", 0) == 0:
                _take_choice(choice, reply, on_event)
    if cancel.is_set():
        reply.cancelled = True


def _take_choice(choice: dict[str, Any], reply: _Reply, on_event: Callable[[Event], None]) -> None:
    delta = choice.get("delta") or {}
    # Other OpenAI-compatible servers name the thinking `reasoning`.
    reasoning = delta.get("reasoning_content") or delta.get("reasoning")
    if isinstance(reasoning, str) and reasoning:
        _first_token(reply)
        reply.reasoning.append(reasoning)
        on_event(ReasoningDelta(reasoning))
    content = delta.get("content")
    if isinstance(content, str) and content:
        _first_token(reply)
        reply.text.append(content)
        on_event(TextDelta(content))
    for piece in delta.get("tool_calls") or []:
        if isinstance(piece, dict):
            _first_token(reply)
            _join_call(reply.calls, piece)
    if choice.get("finish_reason"):
        reply.finish_reason = str(choice["finish_reason"])


def _join_call(calls: dict[int, dict[str, Any]], piece: dict[str, Any]) -> None:
    """A streamed call comes in pieces that share an `index`: the id and name, then the arguments."""
    index = int(piece.get("index", len(calls)))
    call = calls.setdefault(index, {"id": "", "type": "function", "function": {"name": "", "arguments": ""}})
    if piece.get("id"):
        call["id"] = str(piece["id"])
    function = piece.get("function") or {}
    if function.get("name"):
        call["function"]["name"] += str(function["name"])
    if function.get("arguments"):
        call["function"]["arguments"] += str(function["arguments"])
    if not call["id"]:
        call["id"] = f"call_{index}"


def _first_token(reply: _Reply) -> None:
    if reply.ttft is None:
        reply.ttft = time.monotonic() - reply.started


@contextmanager
def _closed_on_cancel(response: httpx.Response, cancel: threading.Event) -> Iterator[None]:
    """While the body is read, a set `cancel` shuts the connection down at once: the reader, blocked
    waiting for the next token (or a long prompt), wakes with an error, and the server sees the client
    go and frees the sequence. Shutting the socket down is what wakes a blocked read; closing it does not."""
    done = threading.Event()

    def watch() -> None:
        while not done.is_set():
            if cancel.wait(_CANCEL_POLL_S):
                if not done.is_set():
                    _shut_down(response)
                return

    watcher = threading.Thread(target=watch, name="chat-cancel", daemon=True)
    watcher.start()
    try:
        yield
    finally:
        done.set()
        watcher.join()


def _shut_down(response: httpx.Response) -> None:
    stream = response.extensions.get("network_stream")
    sock = stream.get_extra_info("socket") if stream is not None else None
    if isinstance(sock, socket.socket):
        with suppress(OSError):  # already closed
            sock.shutdown(socket.SHUT_RDWR)
    else:  # a transport without a socket (tests' mock transports): closing is all there is
        response.close()


def _error_message(response: httpx.Response) -> str:
    try:
        body = response.json()
    except ValueError:
        return response.text[:300] or response.reason_phrase
    if isinstance(body, dict) and "error" in body:
        return _message_of(body["error"])
    return response.text[:300]


def _message_of(error: Any) -> str:
    if isinstance(error, dict):
        return str(error.get("message") or error)
    return str(error)


def to_openai_messages(system_prompt: str, messages: list[Message], *, accepts_images: bool) -> list[dict[str, Any]]:
    """The stored conversation as the request's `messages`: the system prompt first, text files inlined
    as fenced blocks under their names, images as data URLs only for a model that takes them (the page
    tells the user when they are left out), tool calls and their results as they were."""
    out: list[dict[str, Any]] = []
    if system_prompt.strip():
        out.append({"role": "system", "content": system_prompt})
    for message in messages:
        if message.role == "user":
            out.append({"role": "user", "content": _user_content(message, accepts_images)})
        elif message.role == "assistant":
            if not message.content and not message.tool_calls:
                continue  # a reply that failed before its first token: nothing for the model to read
            item: dict[str, Any] = {"role": "assistant", "content": message.content}
            if message.tool_calls:
                item["tool_calls"] = [dict(call) for call in message.tool_calls]
            out.append(item)
        elif message.role == "tool":
            out.append({"role": "tool", "tool_call_id": message.tool_call_id, "content": message.content})
        else:
            out.append({"role": message.role, "content": message.content})
    return out


def _user_content(message: Message, accepts_images: bool) -> str | list[dict[str, Any]]:
    text = message.content
    for attachment in message.attachments:
        if attachment.kind == "text" and attachment.text is not None:
            text += ("\n\n" if text else "") + _fenced(attachment.name, attachment.text)
    images = [a for a in message.attachments if a.kind == "image" and a.data_base64 is not None and accepts_images]
    if not images:
        return text
    parts: list[dict[str, Any]] = [{"type": "text", "text": text}] if text else []
    for image in images:
        url = f"data:{image.mime};base64,{image.data_base64}"
        parts.append({"type": "image_url", "image_url": {"url": url}})
    return parts


def _fenced(name: str, text: str) -> str:
    """A file as a fenced block under its name.

    Unlike the export's fence (store._fence), the body keeps its trailing blank lines: the model reads
    the file exactly as it is."""
    fence = code_fence(text)
    body = text if text.endswith("\n") else text + "\n"
    return f"{name}:\n{fence}\n{body}{fence}"


def accepts_images(model_entry: dict[str, Any]) -> bool:
    """Whether a /v1/models entry says the model takes images.

    The launcher's server says nothing of the kind: it serves text-only models and refuses an image in
    the newest message. Other servers' entries say it in one of these ways: `vision: true`, a
    `capabilities` list with "vision" (Ollama), or `input_modalities`/`modalities` holding "image"
    (at the top or under `architecture`, as OpenRouter lists them)."""
    if model_entry.get("vision") is True:
        return True
    capabilities = model_entry.get("capabilities")
    if isinstance(capabilities, list) and "vision" in capabilities:
        return True
    if isinstance(capabilities, dict) and capabilities.get("vision") is True:
        return True
    for holder in (model_entry, model_entry.get("architecture")):
        if not isinstance(holder, dict):
            continue
        for key in ("input_modalities", "modalities"):
            modalities = holder.get(key)
            if isinstance(modalities, list) and "image" in modalities:
                return True
    return False
