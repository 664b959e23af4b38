"""POST /v1/responses: the OpenAI Responses API (Codex CLI), text and function tools."""

from __future__ import annotations

import json
import logging
import time
from collections.abc import AsyncIterator
from typing import Any

from starlette.requests import Request
from starlette.responses import JSONResponse
from starlette.routing import Route

from launcher.engines.base import Constraint
from launcher.server.chat import (
    ChatDone,
    ChatOptions,
    ChatRun,
    ReasoningDelta,
    TextDelta,
    ToolCallDelta,
    normalize_history,
    start_chat,
    text_of,
)
from launcher.server.errors import bad_request
from launcher.server.generation import Usage, failure
from launcher.server.routes_common import collect_until_disconnect, new_id, parse_body, sampling_from, state_of
from launcher.server.schemas_responses import ResponsesRequest
from launcher.server.sse import EventStream, KeepAlive, named_event, with_keepalives

log = logging.getLogger(__name__)


def _assistant_call(messages: list[dict[str, Any]], call: dict[str, Any]) -> None:
    """Add a call to the assistant turn it belongs to (consecutive call items are one turn)."""
    last = messages[-1] if messages else None
    if last is not None and last["role"] == "assistant" and "tool_calls" in last:
        last["tool_calls"].append(call)
    else:
        messages.append({"role": "assistant", "content": "", "tool_calls": [call]})


def _call(call_id: str, name: str, arguments: str) -> dict[str, Any]:
    return {"id": call_id, "type": "function", "function": {"name": name, "arguments": arguments}}


def _input_messages(body: ResponsesRequest) -> list[dict[str, Any]]:
    messages: list[dict[str, Any]] = []
    if body.instructions:
        messages.append({"role": "system", "content": body.instructions})
    if isinstance(body.input, str):
        messages.append({"role": "user", "content": body.input})
        return messages
    for i, item in enumerate(body.input):
        if not isinstance(item, dict):
            raise bad_request("Each input item must be an object.", param=f"input.{i}")
        kind = item.get("type", "message")
        if kind == "message" or (kind is None and "role" in item):
            role = item.get("role")
            if role not in ("user", "assistant", "system", "developer"):
                raise bad_request(f"Unsupported message role {role!r}.", param=f"input.{i}.role")
            messages.append({"role": role, "content": item.get("content")})
        elif kind in ("function_call", "custom_tool_call"):
            if not item.get("name") or not item.get("call_id"):
                raise bad_request(f"{kind} items need name and call_id.", param=f"input.{i}")
            arguments = item.get("arguments") or "{}"
            if kind == "custom_tool_call":  # a freeform tool (Codex's apply_patch): its text input
                arguments = json.dumps({"input": item.get("input", "")}, ensure_ascii=False)
            _assistant_call(messages, _call(item["call_id"], item["name"], arguments))
        elif kind == "local_shell_call":
            action = item.get("action")
            command = action.get("command", []) if isinstance(action, dict) else []
            arguments = json.dumps({"command": command}, ensure_ascii=False)
            _assistant_call(messages, _call(str(item.get("call_id") or item.get("id")), "local_shell", arguments))
        elif kind in ("function_call_output", "custom_tool_call_output", "local_shell_call_output"):
            output = item.get("output")
            text = output if isinstance(output, str) else text_of(output, param=f"input.{i}.output", media="note")
            call_id = item.get("call_id") or item.get("id")
            messages.append({"role": "tool", "tool_call_id": call_id, "content": text})
        else:
            # reasoning (not replayed to the model), web search calls, compaction markers and item
            # types newer than this server: nothing the model can read.
            log.debug("skipping a %r input item (input.%d)", kind, i)
    return messages


def _options(body: ResponsesRequest) -> ChatOptions:
    if body.previous_response_id:
        raise bad_request(
            "previous_response_id is not supported (responses are not stored); send the full input.",
            param="previous_response_id",
        )
    tools: list[dict[str, Any]] = []
    for tool in body.tools or []:
        if tool.type != "function" or not tool.name:
            # Hosted tools (web_search, file_search...), namespaces of tools the agent's
            # sub-systems offer, freeform `custom` tools: nothing this model is taught to call.
            log.debug("skipping a %r tool in a Responses request", tool.type)
            continue
        tools.append(
            {
                "type": "function",
                "function": {
                    "name": tool.name,
                    "description": tool.description or "",
                    "parameters": tool.parameters or {"type": "object"},
                },
            }
        )
    choice: str = "auto" if tools else "none"
    if isinstance(body.tool_choice, str):
        choice = body.tool_choice
    elif isinstance(body.tool_choice, dict) and body.tool_choice.get("type") == "function":
        if not body.tool_choice.get("name"):
            raise bad_request("tool_choice {type: function} needs a name.", param="tool_choice")
        choice = body.tool_choice["name"]
    # Other tool_choice objects name hosted or allowed-tool sets: "auto" over the function tools.
    if choice not in ("auto", "none", "required") and not any(t["function"]["name"] == choice for t in tools):
        raise bad_request(f"tool_choice {choice!r} is not one of the function tools.", param="tool_choice")
    constraint = None
    fmt = body.text.format if body.text else None
    if fmt is not None and fmt.type == "json_object":
        constraint = Constraint(kind="json_object")
    elif fmt is not None and fmt.type == "json_schema":
        if fmt.schema_ is None:
            raise bad_request("text.format json_schema needs schema.", param="text.format.schema")
        constraint = Constraint(kind="json_schema", schema=fmt.schema_)
    return ChatOptions(
        messages=normalize_history(_input_messages(body)),
        tools=tools,
        tool_choice=choice,
        response_format=constraint,
        max_tokens=body.max_output_tokens,
        sampling=sampling_from(temperature=body.temperature, top_p=body.top_p),
    )


def _usage(usage: Usage) -> dict[str, Any]:
    return {
        "input_tokens": usage.prompt_tokens,
        "input_tokens_details": {"cached_tokens": usage.cached_tokens},
        "output_tokens": usage.completion_tokens,
        "output_tokens_details": {"reasoning_tokens": 0},
        "total_tokens": usage.total_tokens,
    }


class _ResponseBuilder:
    """Keeps the response object and its output items as events arrive."""

    def __init__(self, body: ResponsesRequest, response_id: str, model_id: str) -> None:
        self.response: dict[str, Any] = {
            "id": response_id,
            "object": "response",
            "created_at": int(time.time()),
            "status": "in_progress",
            "model": model_id,
            "output": [],
            "error": None,
            "incomplete_details": None,
            "instructions": body.instructions,
            "metadata": body.metadata or {},
            "parallel_tool_calls": False,
            "temperature": body.temperature,
            "top_p": body.top_p,
            "tool_choice": body.tool_choice or "auto",
            "tools": [t.model_dump(exclude_none=True) for t in body.tools or []],
            "max_output_tokens": body.max_output_tokens,
            "text": {"format": {"type": "text"}},
            "truncation": "disabled",
            "usage": None,
        }
        self.sequence = 0

    def event(self, event_type: str, **fields: Any) -> bytes:
        payload = {"type": event_type, "sequence_number": self.sequence, **fields}
        self.sequence += 1
        return named_event(event_type, payload)

    def finish(self, done: ChatDone) -> None:
        if done.finish_reason == "length":
            self.response["status"] = "incomplete"
            self.response["incomplete_details"] = {"reason": "max_output_tokens"}
        else:
            self.response["status"] = "completed"
        self.response["usage"] = _usage(done.usage)


def _message_item(item_id: str, text: str, status: str) -> dict[str, Any]:
    content = (
        [{"type": "output_text", "text": text, "annotations": [], "logprobs": []}] if status == "completed" else []
    )
    return {"id": item_id, "type": "message", "status": status, "role": "assistant", "content": content}


def _call_item(event: ToolCallDelta, arguments: str, status: str) -> dict[str, Any]:
    return {
        "id": "fc_" + event.call.id.removeprefix("call_"),
        "type": "function_call",
        "status": status,
        "call_id": event.call.id,
        "name": event.call.name,
        "arguments": arguments,
    }


async def responses(request: Request) -> Any:
    """POST /v1/responses (streaming and not)."""
    state = state_of(request)
    body = await parse_body(request, ResponsesRequest)
    served = state.resolve_model(body.model)
    options = _options(body)
    response_id = new_id("resp_")
    options.request_id = response_id
    run = await start_chat(state, options)
    builder = _ResponseBuilder(body, response_id, body.model or served)
    if body.stream:
        return EventStream(_stream(run, builder, state.keepalive_s), run.aclose)
    text = ""
    done: ChatDone | None = None
    output: list[dict[str, Any]] = []
    try:
        for event in await collect_until_disconnect(request, run.events()):
            if isinstance(event, ReasoningDelta):
                continue  # reasoning is not replayed to Responses clients
            if isinstance(event, TextDelta):
                text += event.text
            elif isinstance(event, ToolCallDelta):
                output.append(_call_item(event, event.call.arguments, "completed"))
            else:
                done = event
    finally:
        await run.aclose()
    assert done is not None
    if done.finish_reason == "error":
        raise failure(done.error, request_error=done.request_error)
    if text.strip() or not output:
        output.insert(0, _message_item(new_id("msg_"), text, "completed"))
    builder.response["output"] = output
    builder.finish(done)
    return JSONResponse(builder.response)


async def _stream(run: ChatRun, builder: _ResponseBuilder, keepalive_s: float) -> AsyncIterator[bytes]:
    response = builder.response
    yield builder.event("response.created", response=dict(response))
    yield builder.event("response.in_progress", response=dict(response))
    output: list[dict[str, Any]] = response["output"]
    text_item: dict[str, Any] | None = None
    text = ""

    def close_text() -> list[bytes]:
        nonlocal text_item
        if text_item is None:
            return []
        index = output.index(text_item)
        part = {"type": "output_text", "text": text, "annotations": [], "logprobs": []}
        done_item = _message_item(text_item["id"], text, "completed")
        output[index] = done_item
        events = [
            builder.event(
                "response.output_text.done",
                item_id=text_item["id"],
                output_index=index,
                content_index=0,
                text=text,
                logprobs=[],
            ),
            builder.event(
                "response.content_part.done", item_id=text_item["id"], output_index=index, content_index=0, part=part
            ),
            builder.event("response.output_item.done", output_index=index, item=done_item),
        ]
        text_item = None
        return events

    async for event in with_keepalives(run.events(), keepalive_s):
        if isinstance(event, KeepAlive):
            yield builder.event("keepalive")  # OpenAI's own; Codex resets its idle timer on any event
            continue
        if isinstance(event, ReasoningDelta):
            continue
        if isinstance(event, TextDelta):
            if not event.text or (text_item is None and not event.text.strip()):
                continue
            if text_item is None:
                text_item = _message_item(new_id("msg_"), "", "in_progress")
                text = ""
                output.append(text_item)
                yield builder.event("response.output_item.added", output_index=len(output) - 1, item=text_item)
                yield builder.event(
                    "response.content_part.added",
                    item_id=text_item["id"],
                    output_index=len(output) - 1,
                    content_index=0,
                    part={"type": "output_text", "text": "", "annotations": [], "logprobs": []},
                )
            text += event.text
            yield builder.event(
                "response.output_text.delta",
                item_id=text_item["id"],
                output_index=len(output) - 1,
                content_index=0,
                delta=event.text,
                logprobs=[],
            )
        elif isinstance(event, ToolCallDelta):
            for chunk in close_text():
                yield chunk
            item = _call_item(event, "", "in_progress")
            output.append(item)
            index = len(output) - 1
            yield builder.event("response.output_item.added", output_index=index, item=item)
            yield builder.event(
                "response.function_call_arguments.delta",
                item_id=item["id"],
                output_index=index,
                delta=event.call.arguments,
            )
            yield builder.event(
                "response.function_call_arguments.done",
                item_id=item["id"],
                output_index=index,
                arguments=event.call.arguments,
                name=event.call.name,
            )
            output[index] = _call_item(event, event.call.arguments, "completed")
            yield builder.event("response.output_item.done", output_index=index, item=output[index])
        else:
            for chunk in close_text():
                yield chunk
            if event.finish_reason == "error":
                response["status"] = "failed"
                response["error"] = {"code": "server_error", "message": f"Generation failed: {event.error}"}
                yield builder.event("response.failed", response=response)
                return
            builder.finish(event)
            name = "response.completed" if response["status"] == "completed" else "response.incomplete"
            yield builder.event(name, response=response)


ROUTES = [Route("/v1/responses", responses, methods=["POST"])]
