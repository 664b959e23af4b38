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
from launcher.server.core.chat import (
    ChatOptions,
    ChatStream,
    ReasoningDelta,
    TextDelta,
    ToolCallDelta,
    normalize_history,
    text_of,
)
from launcher.server.core.generation import Finish, GenerationSettings, cut_short
from launcher.server.core.result import chat_result, starts_block
from launcher.server.core.toolcalls import ParsedToolCall
from launcher.server.errors import ApiError, bad_request
from launcher.server.responses_api.schemas_responses import (
    ArgumentsDeltaEvent,
    ArgumentsDoneEvent,
    ContentPartEvent,
    FunctionCallItem,
    IncompleteDetails,
    ItemStatus,
    LifecycleEvent,
    MessageItem,
    OutputItem,
    OutputItemEvent,
    OutputText,
    OutputTextDeltaEvent,
    OutputTextDoneEvent,
    ResponseError,
    ResponseEvent,
    ResponseObject,
    ResponsesRequest,
    ResponseUsage,
)
from launcher.server.routes_common import new_id, start_chat_request, state_of
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


def _text_field(item: dict[str, Any], key: str) -> str:
    """`item[key]` when it is a string, else "" (an id or a name that is a list or a number is no id)."""
    value = item.get(key)
    return value if isinstance(value, str) else ""


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
            if not _text_field(item, "name") or not _text_field(item, "call_id"):
                raise bad_request(f"{kind} items need name and call_id (strings).", param=f"input.{i}")
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
            if call_id is not None and not isinstance(call_id, str):
                raise bad_request(f"{kind} items' call_id must be a string.", param=f"input.{i}.call_id")
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
    settings = GenerationSettings(
        max_tokens=body.max_output_tokens,
        sampling=body.sampling(),
        constraint=constraint,
        speculative=body.speculative,
    )
    return ChatOptions(
        messages=normalize_history(_input_messages(body)),
        tools=tools,
        tool_choice=choice,
        settings=settings,
        parallel_tool_calls=body.parallel_tool_calls is not False,
    )


class _ResponseBuilder:
    """Keeps the response object as events arrive, and numbers the stream's events."""

    def __init__(self, body: ResponsesRequest, response_id: str, model_id: str) -> None:
        self.response = ResponseObject(
            id=response_id,
            created_at=int(time.time()),
            model=model_id,
            instructions=body.instructions,
            metadata=body.metadata or {},
            temperature=body.temperature,
            top_p=body.top_p,
            tool_choice=body.tool_choice or "auto",
            tools=[t.model_dump(exclude_none=True) for t in body.tools or []],
            max_output_tokens=body.max_output_tokens,
        )
        self.sequence = 0

    def event(self, event: ResponseEvent) -> bytes:
        event.sequence_number = self.sequence
        self.sequence += 1
        return named_event(event.type, event)

    def lifecycle(self, event_type: str) -> bytes:
        return self.event(LifecycleEvent(type=event_type, response=self.response))

    def fail(self, done: Finish, err: ApiError) -> None:
        self.response.status = "failed"
        self.response.error = ResponseError.of(err)
        self.response.usage = ResponseUsage.of(done.usage)

    def finish(self, done: Finish) -> None:
        if done.reason == "length":
            self.response.status = "incomplete"
            self.response.incomplete_details = IncompleteDetails()
        else:
            self.response.status = "completed"
        self.response.usage = ResponseUsage.of(done.usage)


def _call_item(call: ParsedToolCall, arguments: str, status: ItemStatus) -> FunctionCallItem:
    return FunctionCallItem(
        id="fc_" + call.id.removeprefix("call_"), status=status, call_id=call.id, name=call.name, arguments=arguments
    )


async def responses(request: Request) -> Any:
    """POST /v1/responses (streaming and not)."""
    started = await start_chat_request(request, ResponsesRequest, _options, "resp_")
    body, run = started.body, started.run
    builder = _ResponseBuilder(body, started.reply_id, body.model or started.served_model)
    if body.stream:
        return EventStream(_stream(run, builder, state_of(request).keepalive_s), run.aclose)
    result = await chat_result(request, run)  # reasoning is not replayed to Responses clients
    output: list[OutputItem] = [_call_item(call, call.arguments, "completed") for call in result.tool_calls]
    if starts_block(result.text) or not output:
        output.insert(0, MessageItem.of(new_id("msg_"), result.text, "completed"))
    builder.response.output = output
    builder.finish(result.finish)
    return JSONResponse(builder.response.wire())


async def _stream(run: ChatStream, builder: _ResponseBuilder, keepalive_s: float) -> AsyncIterator[bytes]:
    response = builder.response
    yield builder.lifecycle("response.created")
    yield builder.lifecycle("response.in_progress")
    output = response.output
    text_item: MessageItem | None = None
    text = ""

    def close_text() -> list[bytes]:
        nonlocal text_item
        if text_item is None:
            return []
        index = output.index(text_item)
        done_item = MessageItem.of(text_item.id, text, "completed")
        output[index] = done_item
        events = [
            builder.event(OutputTextDoneEvent(item_id=text_item.id, output_index=index, text=text)),
            builder.event(
                ContentPartEvent(
                    type="response.content_part.done",
                    item_id=text_item.id,
                    output_index=index,
                    part=OutputText(text=text),
                )
            ),
            builder.event(OutputItemEvent(type="response.output_item.done", output_index=index, item=done_item)),
        ]
        text_item = None
        return events

    async for event in with_keepalives(run.events(), keepalive_s):
        if isinstance(event, KeepAlive):
            # OpenAI's own; Codex resets its idle timer on any event
            yield builder.event(ResponseEvent(type="keepalive"))
            continue
        if isinstance(event, ReasoningDelta):
            continue
        if isinstance(event, TextDelta):
            if not event.text or (text_item is None and not starts_block(event.text)):
                continue
            if text_item is None:
                text_item = MessageItem.of(new_id("msg_"), "", "in_progress")
                text = ""
                output.append(text_item)
                yield builder.event(
                    OutputItemEvent(type="response.output_item.added", output_index=len(output) - 1, item=text_item)
                )
                yield builder.event(
                    ContentPartEvent(
                        type="response.content_part.added",
                        item_id=text_item.id,
                        output_index=len(output) - 1,
                        part=OutputText(text=""),
                    )
                )
            text += event.text
            yield builder.event(
                OutputTextDeltaEvent(item_id=text_item.id, output_index=len(output) - 1, delta=event.text)
            )
        elif isinstance(event, ToolCallDelta):
            for chunk in close_text():
                yield chunk
            item = _call_item(event.call, "", "in_progress")
            output.append(item)
            index = len(output) - 1
            yield builder.event(OutputItemEvent(type="response.output_item.added", output_index=index, item=item))
            arguments = event.call.arguments
            yield builder.event(ArgumentsDeltaEvent(item_id=item.id, output_index=index, delta=arguments))
            yield builder.event(
                ArgumentsDoneEvent(item_id=item.id, output_index=index, arguments=arguments, name=event.call.name)
            )
            output[index] = _call_item(event.call, arguments, "completed")
            yield builder.event(
                OutputItemEvent(type="response.output_item.done", output_index=index, item=output[index])
            )
        else:
            cut = cut_short(event)
            if cut is not None:
                # response.failed, never response.completed; response.incomplete would name a cause
                # (max_output_tokens, content_filter) that is not the one. The text so far stays an
                # item marked incomplete, without the done events that would make it a whole message.
                if text_item is not None:
                    output[output.index(text_item)] = MessageItem.of(text_item.id, text, "incomplete")
                builder.fail(event, cut)
                yield builder.lifecycle("response.failed")
                return
            for chunk in close_text():
                yield chunk
            builder.finish(event)
            yield builder.lifecycle("response.completed" if response.status == "completed" else "response.incomplete")


ROUTES = [Route("/v1/responses", responses, methods=["POST"])]
