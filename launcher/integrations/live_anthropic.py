"""Live checks through the official `anthropic` SDK, the way Claude Code calls a server:
streamed Messages with usage in `message_start` / `message_delta`, a forced `tool_use`
(tool_choice "any"), then a `tool_result` sent back in the history.
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
    LiveTestReport,
    describe_error,
)

TOOL_MAX_TOKENS = 256


def check_messages(endpoint: Endpoint, report: LiveTestReport, *, timeout: float, max_tokens: int) -> None:
    """Streaming text + usage, then a tool_use round, over /v1/messages."""
    import anthropic

    # auth_token is what ANTHROPIC_AUTH_TOKEN sets in Claude Code: `Authorization: Bearer`.
    with anthropic.Anthropic(
        base_url=endpoint.root_url, auth_token=endpoint.key_or_placeholder, timeout=timeout, max_retries=0
    ) as client:  # closing it releases the sockets of every request
        _stream_round(client, endpoint, report, max_tokens=max_tokens)
        _tool_round(client, endpoint, report)


def _stream_round(client: Any, endpoint: Endpoint, report: LiveTestReport, *, max_tokens: int) -> None:
    try:
        pieces: list[str] = []
        events = 0
        output_tokens = None
        input_tokens = None
        with client.messages.stream(
            model=endpoint.model_id,
            max_tokens=max_tokens,
            messages=[{"role": "user", "content": TEXT_PROMPT}],
        ) as stream:
            for event in stream:
                events += 1
                if event.type == "message_start":
                    input_tokens = event.message.usage.input_tokens
                elif event.type == "message_delta":
                    output_tokens = event.usage.output_tokens
                elif event.type == "content_block_delta" and event.delta.type == "text_delta":
                    pieces.append(event.delta.text)
    except Exception as err:  # never raise from a live test: the failure is the finding
        report.add("stream", "fail", f"streaming Messages request failed: {describe_error(err)}")
        report.add("usage", "skip", "no stream to read usage from")
    else:
        if pieces:
            report.add("stream", "pass", f"{len(pieces)} text deltas in {events} events: {''.join(pieces)[:60]!r}")
        else:
            report.add("stream", "warn", f"the stream arrived ({events} events) but held no text")
        if output_tokens is not None:
            report.add("usage", "pass", f"{input_tokens} input + {output_tokens} output tokens reported")
        else:
            report.add("usage", "fail", "no usage in message_delta; Claude Code cannot track its context")


def _tool_round(client: Any, endpoint: Endpoint, report: LiveTestReport) -> None:
    tools = [{"name": TOOL_NAME, "description": TOOL_DESCRIPTION, "input_schema": TOOL_PARAMETERS}]
    messages: list[dict[str, Any]] = [{"role": "user", "content": TOOL_PROMPT}]
    try:
        with client.messages.stream(
            model=endpoint.model_id,
            max_tokens=TOOL_MAX_TOKENS,
            messages=messages,
            tools=tools,
            tool_choice={"type": "any"},
        ) as stream:
            final = stream.get_final_message()
    except Exception as err:
        report.add("tool_call", "fail", f"the tool_use request failed: {describe_error(err)}")
        report.add("tool_history", "skip", "no tool_use to answer")
        return
    tool_use = next((block for block in final.content if block.type == "tool_use"), None)
    if tool_use is None:
        text = "".join(block.text for block in final.content if block.type == "text")
        detail = f"the model answered in plain text instead: {text[:80]!r}" if text.strip() else "no tool_use block"
        report.add("tool_call", "fail", f"{detail} (tool_choice required a tool)")
        report.add("tool_history", "skip", "no tool_use to answer")
        return
    if tool_use.name != TOOL_NAME or not isinstance(tool_use.input, dict):
        report.add("tool_call", "fail", f"unexpected tool_use {tool_use.name!r} with input {tool_use.input!r}")
        report.add("tool_history", "skip", "no usable tool_use to answer")
        return
    report.add("tool_call", "pass", f"{TOOL_NAME}({json.dumps(tool_use.input)})")
    messages += [
        {"role": "assistant", "content": [block.model_dump(exclude_none=True) for block in final.content]},
        {
            "role": "user",
            "content": [{"type": "tool_result", "tool_use_id": tool_use.id, "content": TOOL_RESULT}],
        },
    ]
    try:
        client.messages.create(model=endpoint.model_id, max_tokens=32, messages=messages, tools=tools)
    except Exception as err:
        report.add(
            "tool_history",
            "fail",
            f"the server rejected a tool_use and its tool_result: {describe_error(err)}",
        )
        return
    report.add("tool_history", "pass", "the server accepted the tool_result and answered")
