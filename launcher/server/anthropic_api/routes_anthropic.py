"""Anthropic Messages routes (Claude Code, the anthropic SDK): /v1/messages and /v1/messages/count_tokens."""

from __future__ import annotations

import json
import logging
from collections.abc import AsyncIterator
from typing import Any

from starlette.requests import Request
from starlette.responses import JSONResponse
from starlette.routing import Route

from launcher.engines.base import Constraint
from launcher.server.anthropic_api.schemas_anthropic import (
    AnthropicUsage,
    ContentBlock,
    ContentBlockDeltaEvent,
    ContentBlockStartEvent,
    ContentBlockStopEvent,
    CountTokensRequest,
    ErrorEvent,
    InputJsonBlockDelta,
    MessageDeltaEvent,
    MessageReply,
    MessagesRequest,
    MessageStartEvent,
    MessageStopEvent,
    PingEvent,
    ReplyBlock,
    StopInfo,
    StreamEvent,
    TextBlock,
    TextBlockDelta,
    TextBlockParam,
    ThinkingBlock,
    ThinkingBlockDelta,
    TokenCount,
    Tool,
    ToolChoice,
    ToolUseBlock,
)
from launcher.server.core.chat import (
    ChatOptions,
    ChatStream,
    ReasoningDelta,
    TextDelta,
    ToolCallDelta,
    media_omitted,
    normalize_history,
    prepare_prompt,
)
from launcher.server.core.generation import Finish, GenerationSettings, cut_short
from launcher.server.core.messages import ChatMessage
from launcher.server.core.result import chat_result, starts_block
from launcher.server.core.toolcalls import ParsedToolCall
from launcher.server.errors import bad_request
from launcher.server.routes_common import parse_body, start_chat_request, state_of, stops_from
from launcher.server.sse import EventStream, KeepAlive, named_event, with_keepalives

log = logging.getLogger(__name__)

_STOP_REASONS = {"stop": "end_turn", "length": "max_tokens", "tool_calls": "tool_use"}


def _event(event: StreamEvent) -> bytes:
    return named_event(event.type, event)


PING = _event(PingEvent())  # Anthropic's own keep-alive event


_BILLING_HEADER = "x-anthropic-billing-header:"
_MEDIA_BLOCKS = ("image", "document")


def _block_text(content: str | list[dict[str, Any]] | None) -> str:
    """A tool result's content as text; images and documents in it become a note (the agent
    read a picture, say), so one of them does not break every later request of the session."""
    if content is None or isinstance(content, str):
        return content or ""
    parts = []
    for part in content:
        kind = part.get("type")
        if kind == "text":
            parts.append(str(part.get("text", "")))
        elif kind in _MEDIA_BLOCKS:
            parts.append(media_omitted(str(kind)))
    return "".join(parts)


def _convert_message(role: str, content: str | list[ContentBlock], index: int, *, last: bool) -> list[dict[str, Any]]:
    if isinstance(content, str):
        return [{"role": role, "content": content}]
    out: list[dict[str, Any]] = []
    texts: list[str] = []
    calls: list[dict[str, Any]] = []
    for j, block in enumerate(content):
        where = f"messages.{index}.content.{j}"
        if block.type == "text":
            texts.append(block.text or "")
        elif block.type == "tool_use":
            if role != "assistant" or not block.name or not block.id:
                raise bad_request("tool_use blocks belong to assistant turns and need id and name.", param=where)
            calls.append(
                {"id": block.id, "type": "function", "function": {"name": block.name, "arguments": block.input or {}}}
            )
        elif block.type == "tool_result":
            if role != "user" or not block.tool_use_id:
                raise bad_request("tool_result blocks belong to user turns and need tool_use_id.", param=where)
            result = _block_text(block.content)
            if block.is_error:
                result = f"Error: {result}"
            out.append({"role": "tool", "tool_call_id": block.tool_use_id, "content": result})
        elif block.type in _MEDIA_BLOCKS:
            if last and role == "user":  # the user is asking about it now: say plainly that it cannot be read
                raise bad_request(f"This model reads text only; {block.type} blocks are not supported.", param=where)
            texts.append(media_omitted(block.type))
        else:
            # thinking (not replayed to the model), server tool blocks, and block types newer than
            # this server: nothing the model can read.
            log.debug("skipping a %s block in messages.%d", block.type, index)
    if texts or calls:
        message: dict[str, Any] = {"role": role, "content": "".join(texts)}
        if calls:
            message["tool_calls"] = calls
        out.append(message)
    return out


def _tools(tools: list[Tool] | None) -> list[dict[str, Any]]:
    out = []
    for tool in tools or []:
        if tool.input_schema is None or tool.defer_loading:
            # Server tools (web_search, code_execution...) run at Anthropic, and deferred tools are
            # loaded only through tool search; neither is a tool this model can call now.
            log.debug("skipping tool %r (type %s, deferred %s)", tool.name, tool.type, tool.defer_loading)
            continue
        out.append(
            {
                "type": "function",
                "function": {"name": tool.name, "description": tool.description or "", "parameters": tool.input_schema},
            }
        )
    return out


def _tool_choice(choice: ToolChoice | None, tools: list[dict[str, Any]]) -> str:
    if choice is None or not tools:
        return "auto" if tools else "none"
    if choice.type == "tool":
        if not choice.name:
            raise bad_request("tool_choice type 'tool' needs a name.", param="tool_choice")
        if not any(t["function"]["name"] == choice.name for t in tools):
            raise bad_request(f"tool_choice names {choice.name!r}, which is not in tools.", param="tool_choice")
        return choice.name
    return {"any": "required", "none": "none"}.get(choice.type, "auto")


def _system_text(system: str | list[TextBlockParam] | None) -> str:
    """The system prompt, without Claude Code's billing header line: it is addressed to Anthropic's
    billing, not to the model, and it differs from session to session, which, first in the prompt,
    would keep a new session from reusing the cached system prompt."""
    if system is None or isinstance(system, str):
        return system or ""
    texts = [b.text for b in system if b.type == "text" and not b.text.startswith(_BILLING_HEADER)]
    return "\n\n".join(texts)


def _messages(body: CountTokensRequest) -> list[ChatMessage]:
    """The request's history, typed; the system prompt first (Anthropic sends it apart from the messages)."""
    messages: list[dict[str, Any]] = []
    system = _system_text(body.system)
    if system:
        messages.append({"role": "system", "content": system})
    for i, message in enumerate(body.messages):
        content = message.content
        if message.role == "system":  # a mid-conversation system message: its text blocks only
            if not isinstance(content, str):
                content = "".join(b.text or "" for b in content if b.type == "text")
            messages.append({"role": "system", "content": content})
            continue
        messages.extend(_convert_message(message.role, content, i, last=i == len(body.messages) - 1))
    return normalize_history(messages)


def _output_constraint(body: MessagesRequest) -> Constraint | None:
    output_format = body.output_config.format if body.output_config else None
    if output_format is None or output_format.type != "json_schema":
        return None
    if output_format.schema_ is None:
        raise bad_request("output_config.format json_schema needs schema.", param="output_config.format.schema")
    return Constraint(kind="json_schema", schema=output_format.schema_)


def _options(body: CountTokensRequest) -> ChatOptions:
    tools = _tools(body.tools)
    options = ChatOptions(messages=_messages(body), tools=tools, tool_choice=_tool_choice(body.tool_choice, tools))
    if isinstance(body, MessagesRequest):
        options.settings = GenerationSettings(
            max_tokens=body.max_tokens,
            sampling=body.sampling(),
            constraint=_output_constraint(body),
            stops=stops_from(body.stop_sequences, param="stop_sequences"),
            speculative=body.speculative,
        )
    return options


def _stop_reason(finish: Finish) -> str:
    return "stop_sequence" if finish.stop_sequence else _STOP_REASONS.get(finish.reason, "end_turn")


def _tool_use(call: ParsedToolCall, *, with_input: bool) -> ToolUseBlock:
    """The call as a tool_use block (a stream sends the input in a delta after it)."""
    call_input = _input_object(call.arguments) if with_input else {}
    return ToolUseBlock(id="toolu_" + call.id.removeprefix("call_"), name=call.name, input=call_input)


def _input_object(arguments: str) -> dict[str, Any]:
    try:
        value = json.loads(arguments)
    except (json.JSONDecodeError, RecursionError):  # the model's own output: a bad call is an empty input
        return {}
    return value if isinstance(value, dict) else {}


async def count_tokens(request: Request) -> JSONResponse:
    """POST /v1/messages/count_tokens."""
    state = state_of(request)
    body = await parse_body(request, CountTokensRequest)
    async with state.using(body.model) as slot:
        _, tokens = await prepare_prompt(slot, _options(body))
    return JSONResponse(TokenCount(input_tokens=len(tokens)).wire())


async def messages(request: Request) -> Any:
    """POST /v1/messages (streaming and not)."""
    started = await start_chat_request(request, MessagesRequest, _options, "msg_")
    body, message_id, run = started.body, started.reply_id, started.run
    model_id = body.model or started.served_model  # Anthropic's API names the model that was asked for
    if body.stream:
        return EventStream(_stream(run, message_id, model_id, state_of(request).keepalive_s), run.aclose)
    result = await chat_result(request, run)
    content: list[ReplyBlock] = []
    for part in result.parts:
        if isinstance(part, TextDelta):
            content.append(TextBlock(text=part.text))
        elif isinstance(part, ReasoningDelta):
            content.append(ThinkingBlock(thinking=part.text))
        else:
            content.append(_tool_use(part.call, with_input=True))
    reply = MessageReply(
        id=message_id,
        model=model_id,
        content=content,
        stop_reason=_stop_reason(result.finish),
        stop_sequence=result.finish.stop_sequence,
        usage=AnthropicUsage.of(result.finish.usage),
    )
    return JSONResponse(reply.wire())


async def _stream(run: ChatStream, message_id: str, model_id: str, keepalive_s: float) -> AsyncIterator[bytes]:
    start = MessageReply(
        id=message_id,
        model=model_id,
        content=[],
        stop_reason=None,
        stop_sequence=None,
        usage=AnthropicUsage(input_tokens=run.prompt_tokens, output_tokens=0),
    )
    yield _event(MessageStartEvent(message=start))
    yield PING
    index = -1
    open_kind: str | None = None  # "text" or "thinking" while such a block is open

    def stop_block() -> list[bytes]:
        nonlocal open_kind
        if open_kind is None:
            return []
        open_kind = None
        return [_event(ContentBlockStopEvent(index=index))]

    def start_block(block: ReplyBlock) -> list[bytes]:
        nonlocal index, open_kind
        events = stop_block()
        index += 1
        open_kind = None if isinstance(block, ToolUseBlock) else block.type
        events.append(_event(ContentBlockStartEvent(index=index, content_block=block)))
        return events

    async for event in with_keepalives(run.events(), keepalive_s):
        if isinstance(event, KeepAlive):
            yield PING
        elif isinstance(event, TextDelta | ReasoningDelta):
            kind = "text" if isinstance(event, TextDelta) else "thinking"
            if not event.text or (open_kind != kind and not starts_block(event.text)):
                continue
            if open_kind != kind:
                for chunk in start_block(TextBlock(text="") if kind == "text" else ThinkingBlock(thinking="")):
                    yield chunk
            delta = TextBlockDelta(text=event.text) if kind == "text" else ThinkingBlockDelta(thinking=event.text)
            yield _event(ContentBlockDeltaEvent(index=index, delta=delta))
        elif isinstance(event, ToolCallDelta):
            for chunk in start_block(_tool_use(event.call, with_input=False)):
                yield chunk
            arguments = json.dumps(_input_object(event.call.arguments), ensure_ascii=False)
            yield _event(ContentBlockDeltaEvent(index=index, delta=InputJsonBlockDelta(partial_json=arguments)))
            yield _event(ContentBlockStopEvent(index=index))
        else:
            cut = cut_short(event)
            if cut is not None:
                # The error event ends the stream, as Anthropic's own do: no content_block_stop (the
                # block is not whole), no message_delta with a stop_reason (none is true), no
                # message_stop. The SDK raises it; Claude Code retries an overloaded_error (a
                # stopping server, a 503) and reports an api_error (a failed engine).
                yield _event(ErrorEvent.of(cut))
                return
            for chunk in stop_block():
                yield chunk
            stop = StopInfo(stop_reason=_stop_reason(event), stop_sequence=event.stop_sequence)
            # cumulative: now that the prompt has been read, how much of it came from the cache
            yield _event(MessageDeltaEvent(delta=stop, usage=AnthropicUsage.of(event.usage)))
            yield _event(MessageStopEvent())


ROUTES = [
    Route("/v1/messages", messages, methods=["POST"]),
    Route("/v1/messages/count_tokens", count_tokens, methods=["POST"]),
]
