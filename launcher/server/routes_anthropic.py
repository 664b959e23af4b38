"""Anthropic Messages routes (Claude Code, the anthropic SDK): /v1/messages and /v1/messages/count_tokens."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from typing import Any

from starlette.requests import Request
from starlette.responses import JSONResponse
from starlette.routing import Route

from launcher.server.chat import (
    ChatDone,
    ChatOptions,
    ChatRun,
    ReasoningDelta,
    TextDelta,
    ToolCallDelta,
    normalize_history,
    render_prompt,
    start_chat,
)
from launcher.server.errors import ApiError, bad_request
from launcher.server.routes_common import (
    collect_until_disconnect,
    new_id,
    parse_body,
    sampling_from,
    state_of,
    stops_from,
)
from launcher.server.schemas_anthropic import (
    ContentBlock,
    CountTokensRequest,
    MessagesRequest,
    Tool,
    ToolChoice,
)
from launcher.server.sse import EventStream, KeepAlive, named_event, with_keepalives

_STOP_REASONS = {"stop": "end_turn", "length": "max_tokens", "tool_calls": "tool_use"}
PING = named_event("ping", {"type": "ping"})  # Anthropic's own keep-alive event


def _block_text(content: str | list[dict[str, Any]] | None) -> str:
    if content is None or isinstance(content, str):
        return content or ""
    parts = []
    for part in content:
        if part.get("type") == "text":
            parts.append(str(part.get("text", "")))
        elif part.get("type") in ("image", "document"):
            raise bad_request(f"This model reads text only; {part.get('type')} blocks are not supported.")
    return "".join(parts)


def _convert_message(role: str, content: str | list[ContentBlock], index: int) -> list[dict[str, Any]]:
    if isinstance(content, str):
        return [{"role": role, "content": content}]
    out: list[dict[str, Any]] = []
    texts: list[str] = []
    calls: list[dict[str, Any]] = []
    for j, block in enumerate(content):
        where = f"messages.{index}.content.{j}"
        if block.type == "text":
            texts.append(block.text or "")
        elif block.type in ("thinking", "redacted_thinking"):
            continue  # earlier reasoning is not replayed to the model
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
        elif block.type in ("image", "document"):
            raise bad_request(f"This model reads text only; {block.type} blocks are not supported.", param=where)
        else:
            raise bad_request(f"Unsupported content block type {block.type!r}.", param=where)
    if texts or calls:
        message: dict[str, Any] = {"role": role, "content": "".join(texts)}
        if calls:
            message["tool_calls"] = calls
        out.append(message)
    return out


def _tools(tools: list[Tool] | None) -> list[dict[str, Any]]:
    out = []
    for tool in tools or []:
        if tool.type not in (None, "custom") or tool.input_schema is None:
            raise bad_request(
                f"Tool {tool.name!r} is a server tool ({tool.type}); only client tools with "
                "input_schema are supported.",
                param="tools",
            )
        out.append(
            {
                "type": "function",
                "function": {"name": tool.name, "description": tool.description or "", "parameters": tool.input_schema},
            }
        )
    return out


def _tool_choice(choice: ToolChoice | None, has_tools: bool) -> str:
    if choice is None:
        return "auto" if has_tools else "none"
    if choice.type == "tool":
        if not choice.name:
            raise bad_request("tool_choice type 'tool' needs a name.", param="tool_choice")
        return choice.name
    return {"auto": "auto", "any": "required", "none": "none"}[choice.type]


def _messages(body: MessagesRequest | CountTokensRequest) -> list[dict[str, Any]]:
    messages: list[dict[str, Any]] = []
    if body.system:
        system = body.system if isinstance(body.system, str) else "\n\n".join(b.text for b in body.system)
        messages.append({"role": "system", "content": system})
    for i, message in enumerate(body.messages):
        messages.extend(_convert_message(message.role, message.content, i))
    return normalize_history(messages)


def _options(body: MessagesRequest | CountTokensRequest) -> ChatOptions:
    tools = _tools(body.tools)
    options = ChatOptions(
        messages=_messages(body), tools=tools, tool_choice=_tool_choice(body.tool_choice, bool(tools))
    )
    if isinstance(body, MessagesRequest):
        options.max_tokens = body.max_tokens
        options.sampling = sampling_from(temperature=body.temperature, top_p=body.top_p, top_k=body.top_k)
        options.stops = stops_from(body.stop_sequences, param="stop_sequences")
    return options


def _input_object(arguments: str) -> dict[str, Any]:
    try:
        value = json.loads(arguments)
    except json.JSONDecodeError:
        return {}
    return value if isinstance(value, dict) else {}


async def count_tokens(request: Request) -> JSONResponse:
    """POST /v1/messages/count_tokens."""
    state = state_of(request)
    body = await parse_body(request, CountTokensRequest)
    return JSONResponse({"input_tokens": len(render_prompt(state, _options(body)))})


async def messages(request: Request) -> Any:
    """POST /v1/messages (streaming and not)."""
    state = state_of(request)
    body = await parse_body(request, MessagesRequest)
    options = _options(body)
    message_id = new_id("msg_")
    options.request_id = message_id
    run = await start_chat(state, options)
    model_id = body.model or state.model_id
    if body.stream:
        return EventStream(_stream(run, message_id, model_id, state.keepalive_s), run.aclose)
    content: list[dict[str, Any]] = []
    done: ChatDone | None = None
    try:
        for event in await collect_until_disconnect(request, run.events()):
            if isinstance(event, TextDelta):
                if content and content[-1]["type"] == "text":
                    content[-1]["text"] += event.text
                elif event.text.strip():
                    content.append({"type": "text", "text": event.text})
            elif isinstance(event, ReasoningDelta):
                if content and content[-1]["type"] == "thinking":
                    content[-1]["thinking"] += event.text
                else:
                    content.append({"type": "thinking", "thinking": event.text, "signature": ""})
            elif isinstance(event, ToolCallDelta):
                content.append(
                    {
                        "type": "tool_use",
                        "id": "toolu_" + event.call.id.removeprefix("call_"),
                        "name": event.call.name,
                        "input": _input_object(event.call.arguments),
                    }
                )
            else:
                done = event
    finally:
        await run.aclose()
    assert done is not None
    if done.finish_reason == "error":
        raise ApiError(500, f"Generation failed: {done.error or 'engine error'}")
    return JSONResponse(
        {
            "id": message_id,
            "type": "message",
            "role": "assistant",
            "model": model_id,
            "content": content,
            "stop_reason": "stop_sequence" if done.stop_sequence else _STOP_REASONS.get(done.finish_reason, "end_turn"),
            "stop_sequence": done.stop_sequence,
            "usage": {
                "input_tokens": done.usage.prompt_tokens,
                "output_tokens": done.usage.completion_tokens,
                "cache_read_input_tokens": done.usage.cached_tokens,
                "cache_creation_input_tokens": 0,
            },
        }
    )


async def _stream(run: ChatRun, message_id: str, model_id: str, keepalive_s: float) -> AsyncIterator[bytes]:
    yield named_event(
        "message_start",
        {
            "type": "message_start",
            "message": {
                "id": message_id,
                "type": "message",
                "role": "assistant",
                "model": model_id,
                "content": [],
                "stop_reason": None,
                "stop_sequence": None,
                "usage": {"input_tokens": run.prompt_tokens, "output_tokens": 0},
            },
        },
    )
    yield PING
    index = -1
    open_kind: str | None = None  # "text" or "thinking" while such a block is open

    def stop_block() -> list[bytes]:
        nonlocal open_kind
        if open_kind is None:
            return []
        open_kind = None
        return [named_event("content_block_stop", {"type": "content_block_stop", "index": index})]

    def start_block(kind: str) -> list[bytes]:
        nonlocal index, open_kind
        events = stop_block()
        index += 1
        open_kind = kind
        block = (
            {"type": "text", "text": ""} if kind == "text" else {"type": "thinking", "thinking": "", "signature": ""}
        )
        events.append(
            named_event("content_block_start", {"type": "content_block_start", "index": index, "content_block": block})
        )
        return events

    async for event in with_keepalives(run.events(), keepalive_s):
        if isinstance(event, KeepAlive):
            yield PING
        elif isinstance(event, TextDelta | ReasoningDelta):
            kind = "text" if isinstance(event, TextDelta) else "thinking"
            if not event.text or (open_kind != kind and not event.text.strip()):
                continue  # no block for whitespace between blocks
            if open_kind != kind:
                for chunk in start_block(kind):
                    yield chunk
            delta = (
                {"type": "text_delta", "text": event.text}
                if kind == "text"
                else {"type": "thinking_delta", "thinking": event.text}
            )
            yield named_event("content_block_delta", {"type": "content_block_delta", "index": index, "delta": delta})
        elif isinstance(event, ToolCallDelta):
            for chunk in stop_block():
                yield chunk
            index += 1
            block = {
                "type": "tool_use",
                "id": "toolu_" + event.call.id.removeprefix("call_"),
                "name": event.call.name,
                "input": {},
            }
            yield named_event(
                "content_block_start", {"type": "content_block_start", "index": index, "content_block": block}
            )
            arguments = json.dumps(_input_object(event.call.arguments), ensure_ascii=False)
            yield named_event(
                "content_block_delta",
                {
                    "type": "content_block_delta",
                    "index": index,
                    "delta": {"type": "input_json_delta", "partial_json": arguments},
                },
            )
            yield named_event("content_block_stop", {"type": "content_block_stop", "index": index})
        else:
            for chunk in stop_block():
                yield chunk
            if event.finish_reason == "error":
                yield named_event(
                    "error",
                    {"type": "error", "error": {"type": "api_error", "message": f"Generation failed: {event.error}"}},
                )
                return
            stop_reason = "stop_sequence" if event.stop_sequence else _STOP_REASONS.get(event.finish_reason, "end_turn")
            yield named_event(
                "message_delta",
                {
                    "type": "message_delta",
                    "delta": {"stop_reason": stop_reason, "stop_sequence": event.stop_sequence},
                    "usage": {"output_tokens": event.usage.completion_tokens},
                },
            )
            yield named_event("message_stop", {"type": "message_stop"})


ROUTES = [
    Route("/v1/messages", messages, methods=["POST"]),
    Route("/v1/messages/count_tokens", count_tokens, methods=["POST"]),
]
