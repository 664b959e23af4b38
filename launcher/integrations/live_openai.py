"""Live checks through the official `openai` SDK: chat completions (OpenCode, Aider, Continue,
Cline) and the Responses API (Codex). Each records stream, usage, tool_call and tool_history.

Every request is the shape the agents send: streamed, with `stream_options.include_usage` for
chat, `tool_choice="required"` for the tool call (so a server that returns a tool call as plain
text is caught), then the tool's result sent back in the history.
"""

from __future__ import annotations

import json
from typing import Any

from launcher.integrations.endpoint import Endpoint
from launcher.integrations.live_report import (
    TEXT_PROMPT,
    TOOL_DESCRIPTION,
    TOOL_NAME,
    TOOL_PARAMETERS,
    TOOL_PROMPT,
    TOOL_RESULT,
    CheckStatus,
    LiveTestReport,
    describe_error,
)

TOOL_MAX_TOKENS = 256


def _client(endpoint: Endpoint, timeout: float) -> Any:
    import openai

    # max_retries=0: a failure must show up in the report, not be hidden behind retries.
    return openai.OpenAI(
        base_url=endpoint.base_url, api_key=endpoint.key_or_placeholder, timeout=timeout, max_retries=0
    )


def _tool_failure(needs_tools: bool) -> CheckStatus:
    return "fail" if needs_tools else "warn"


def check_chat(
    endpoint: Endpoint, report: LiveTestReport, *, timeout: float, max_tokens: int, needs_tools: bool
) -> None:
    """Streaming text + usage, then a required tool call and its result, over /v1/chat/completions."""
    with _client(endpoint, timeout) as client:  # closing it releases the sockets of every request
        _chat_stream(client, endpoint, report, max_tokens=max_tokens)
        _chat_tool_round(client, endpoint, report, needs_tools=needs_tools)


def _chat_stream(client: Any, endpoint: Endpoint, report: LiveTestReport, *, max_tokens: int) -> None:
    try:
        pieces: list[str] = []
        chunks = 0
        usage = None
        finish = None
        stream = client.chat.completions.create(
            model=endpoint.model_id,
            messages=[{"role": "user", "content": TEXT_PROMPT}],
            stream=True,
            stream_options={"include_usage": True},
            max_tokens=max_tokens,
        )
        for chunk in stream:
            chunks += 1
            if chunk.usage is not None:
                usage = chunk.usage
            for choice in chunk.choices:
                if choice.delta.content:
                    pieces.append(choice.delta.content)
                finish = choice.finish_reason or finish
    except Exception as err:  # never raise from a live test: the failure is the finding
        report.add("stream", "fail", f"streaming chat request failed: {describe_error(err)}")
        report.add("usage", "skip", "no stream to read usage from")
    else:
        _record_stream(report, chunks, pieces, finish)
        if usage is not None and usage.completion_tokens is not None:
            report.add(
                "usage",
                "pass",
                f"{usage.prompt_tokens} prompt + {usage.completion_tokens} completion tokens reported",
            )
        else:
            report.add(
                "usage",
                "fail",
                "no usage chunk although stream_options.include_usage was set; agents show 0 tokens",
            )


def _record_stream(report: LiveTestReport, chunks: int, pieces: list[str], finish: str | None) -> None:
    text = "".join(pieces)
    if pieces:
        report.add("stream", "pass", f"{len(pieces)} text deltas in {chunks} chunks: {text[:60]!r}")
    elif chunks:
        report.add("stream", "warn", f"the stream arrived ({chunks} chunks) but held no text (finish: {finish})")
    else:
        report.add("stream", "fail", "the stream ended without a single chunk")


def _chat_tool_round(client: Any, endpoint: Endpoint, report: LiveTestReport, *, needs_tools: bool) -> None:
    bad = _tool_failure(needs_tools)
    tools = [
        {
            "type": "function",
            "function": {"name": TOOL_NAME, "description": TOOL_DESCRIPTION, "parameters": TOOL_PARAMETERS},
        }
    ]
    messages: list[dict[str, Any]] = [{"role": "user", "content": TOOL_PROMPT}]
    calls: dict[int, dict[str, str]] = {}
    content: list[str] = []
    try:
        stream = client.chat.completions.create(
            model=endpoint.model_id,
            messages=messages,
            tools=tools,
            tool_choice="required",
            stream=True,
            max_tokens=TOOL_MAX_TOKENS,
        )
        for chunk in stream:
            for choice in chunk.choices:
                if choice.delta.content:
                    content.append(choice.delta.content)
                for delta in choice.delta.tool_calls or []:
                    part = calls.setdefault(delta.index, {"id": "", "name": "", "arguments": ""})
                    part["id"] = delta.id or part["id"]
                    if delta.function is not None:
                        part["name"] += delta.function.name or ""
                        part["arguments"] += delta.function.arguments or ""
    except Exception as err:
        report.add("tool_call", bad, f"the tool-call request failed: {describe_error(err)}")
        report.add("tool_history", "skip", "no tool call to answer")
        return
    call: dict[str, str] | None = calls[min(calls)] if calls else None
    if not _record_tool_call(report, bad, call, "".join(content)):
        report.add("tool_history", "skip", "no tool call to answer")
        return
    assert call is not None
    messages += [
        {
            "role": "assistant",
            "content": None,
            "tool_calls": [
                {
                    "id": call["id"],
                    "type": "function",
                    "function": {"name": call["name"], "arguments": call["arguments"]},
                }
            ],
        },
        {"role": "tool", "tool_call_id": call["id"], "content": TOOL_RESULT},
    ]
    try:
        answer = client.chat.completions.create(model=endpoint.model_id, messages=messages, tools=tools, max_tokens=32)
        reply = answer.choices[0].message if answer.choices else None
    except Exception as err:
        report.add(
            "tool_history",
            bad,
            f"the server rejected a history with a tool call and its result: {describe_error(err)}",
        )
        return
    if reply is None:
        report.add("tool_history", bad, "the server answered the tool result with no choices")
    else:
        report.add("tool_history", "pass", "the server accepted the tool result and answered")


def _record_tool_call(report: LiveTestReport, bad: CheckStatus, call: dict[str, str] | None, text: str) -> bool:
    """Add the tool_call check; True when the call is usable for the history round."""
    if call is None:
        if text.strip():
            report.add(
                "tool_call",
                bad,
                f"the model answered in plain text instead of calling the tool: {text[:80]!r}",
            )
        else:
            report.add("tool_call", bad, "no tool call came back although tool_choice required one")
        return False
    if call["name"] != TOOL_NAME:
        report.add("tool_call", bad, f"the call named {call['name']!r}, not {TOOL_NAME!r}")
        return False
    try:
        arguments = json.loads(call["arguments"] or "{}")
    except ValueError:
        report.add("tool_call", bad, f"the arguments are not valid JSON: {call['arguments'][:80]!r}")
        return False
    if not isinstance(arguments, dict):
        report.add("tool_call", bad, f"the arguments are not a JSON object: {call['arguments'][:80]!r}")
        return False
    if not call["id"]:
        report.add("tool_call", bad, "the tool call has no id, so its result cannot be sent back")
        return False
    report.add("tool_call", "pass", f"{TOOL_NAME}({json.dumps(arguments)})")
    return True


def check_responses(
    endpoint: Endpoint, report: LiveTestReport, *, timeout: float, max_tokens: int, needs_tools: bool
) -> None:
    """Streaming text + usage, then a required function call and its output, over /v1/responses."""
    with _client(endpoint, timeout) as client:
        _responses_stream(client, endpoint, report, max_tokens=max_tokens)
        _responses_tool_round(client, endpoint, report, needs_tools=needs_tools)


def _responses_stream(client: Any, endpoint: Endpoint, report: LiveTestReport, *, max_tokens: int) -> None:
    try:
        pieces: list[str] = []
        events = 0
        usage = None
        status = None
        stream = client.responses.create(
            model=endpoint.model_id, input=TEXT_PROMPT, stream=True, max_output_tokens=max(16, max_tokens)
        )
        for event in stream:
            events += 1
            if event.type == "response.output_text.delta":
                pieces.append(event.delta)
            elif event.type in ("response.completed", "response.incomplete"):
                usage = event.response.usage
                status = event.response.status
    except Exception as err:
        report.add("stream", "fail", f"streaming Responses request failed: {describe_error(err)}")
        report.add("usage", "skip", "no stream to read usage from")
    else:
        _record_stream(report, events, pieces, status)
        if usage is not None:
            report.add("usage", "pass", f"{usage.input_tokens} input + {usage.output_tokens} output tokens reported")
        else:
            report.add("usage", "fail", "no response.completed event with usage; Codex cannot track its context")


def _responses_tool_round(client: Any, endpoint: Endpoint, report: LiveTestReport, *, needs_tools: bool) -> None:
    bad = _tool_failure(needs_tools)
    tools = [
        {
            "type": "function",
            "name": TOOL_NAME,
            "description": TOOL_DESCRIPTION,
            "parameters": TOOL_PARAMETERS,
            "strict": False,
        }
    ]
    call: dict[str, str] | None = None
    text: list[str] = []
    try:
        stream = client.responses.create(
            model=endpoint.model_id,
            input=TOOL_PROMPT,
            tools=tools,
            tool_choice="required",
            stream=True,
            max_output_tokens=TOOL_MAX_TOKENS,
        )
        for event in stream:
            if event.type == "response.output_text.delta":
                text.append(event.delta)
            elif event.type == "response.output_item.done" and event.item.type == "function_call" and call is None:
                item = event.item
                call = {"id": item.call_id, "name": item.name, "arguments": item.arguments}
    except Exception as err:
        report.add("tool_call", bad, f"the function-call request failed: {describe_error(err)}")
        report.add("tool_history", "skip", "no function call to answer")
        return
    if not _record_tool_call(report, bad, call, "".join(text)):
        report.add("tool_history", "skip", "no function call to answer")
        return
    assert call is not None
    history: list[dict[str, Any]] = [
        {"role": "user", "content": TOOL_PROMPT},
        {
            "type": "function_call",
            "call_id": call["id"],
            "name": call["name"],
            "arguments": call["arguments"],
        },
        {"type": "function_call_output", "call_id": call["id"], "output": TOOL_RESULT},
    ]
    try:
        client.responses.create(model=endpoint.model_id, input=history, tools=tools, max_output_tokens=32)
    except Exception as err:
        report.add("tool_history", bad, f"the server rejected a function call and its output: {describe_error(err)}")
        return
    report.add("tool_history", "pass", "the server accepted the function output and answered")
