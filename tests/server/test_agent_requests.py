"""Requests shaped the way today's agents send them are served, never refused for what they add.

Shapes taken from Claude Code 2.1 and Codex CLI 0.17x captures: mid-conversation `system`
messages, a billing-header system block, `thinking`/`output_config`/`context_management`,
server and deferred tools, namespaces and hosted tools, reasoning items, freeform tool calls.
The scripted model shows what reached the engine (its tokens are characters).
"""

from __future__ import annotations

import json
from typing import Any

import httpx

from tests.fixtures.models import TINY_CHAT_TEMPLATE
from tests.server.conftest import ServeFn
from tests.server.fake_model import FakeModel, fake_info

BASH = {"name": "Bash", "description": "Run a command", "input_schema": {"type": "object", "properties": {}}}


def _claude_code_body(**extra: Any) -> dict[str, Any]:
    return {
        "model": "claude-sonnet-4-5-20250929",
        "max_tokens": 32000,
        "stream": False,
        "system": [
            {"type": "text", "text": "x-anthropic-billing-header: cc_version=2.1.332.b5f; cc_entrypoint=sdk-cli;"},
            {"type": "text", "text": "You are a Claude agent.", "cache_control": {"type": "ephemeral"}},
        ],
        "messages": [
            {"role": "user", "content": [{"type": "text", "text": "Reply with the single word: hello"}]},
            {"role": "system", "content": [{"type": "text", "text": "# Environment\ncwd: /work"}]},
        ],
        "tools": [
            BASH,
            {"name": "DeferredToolPlaceholder", "description": "x", "input_schema": {}, "defer_loading": True},
            {"type": "web_search_20250305", "name": "web_search", "max_uses": 3},
        ],
        "tool_choice": {"type": "auto", "disable_parallel_tool_use": False},
        "metadata": {"user_id": '{"device_id": "abc"}'},
        "thinking": {"type": "adaptive", "display": "omitted"},
        "context_management": {"edits": [{"type": "clear_thinking_20251015", "keep": "all"}]},
        "output_config": {"effort": "high"},
        **extra,
    }


def _prompt(model: FakeModel) -> str:
    return model.detokenize(model.requests[-1].prompt_tokens)


def test_a_claude_code_first_request_is_answered(serve: ServeFn) -> None:
    model = FakeModel(info=fake_info(chat_template=TINY_CHAT_TEMPLATE))
    with serve(model) as url:
        response = httpx.post(
            f"{url}/v1/messages?beta=true",
            json=_claude_code_body(),
            headers={"anthropic-beta": "claude-code-20250219,mid-conversation-tool-changes-2026-07-01"},
        )
    assert response.status_code == 200, response.text
    assert response.json()["content"][0]["text"] == "Hello from the fake model."
    prompt = _prompt(model)
    assert "billing-header" not in prompt
    assert prompt.startswith("<|im_start|>system\nYou are a Claude agent.")
    assert "Reply with the single word: hello\n\n<system>\n# Environment\ncwd: /work\n</system>" in prompt
    assert '"name": "Bash"' in prompt and "web_search" not in prompt and "DeferredToolPlaceholder" not in prompt


def test_blocks_and_tool_choices_newer_than_the_server_are_skipped(serve: ServeFn) -> None:
    model = FakeModel(info=fake_info(chat_template=TINY_CHAT_TEMPLATE))
    history = [
        {"role": "user", "content": "search the web"},
        {
            "role": "assistant",
            "content": [
                {"type": "thinking", "thinking": "hmm", "signature": "s"},
                {"type": "server_tool_use", "id": "srv_1", "name": "web_search", "input": {"query": "x"}},
                {"type": "web_search_tool_result", "tool_use_id": "srv_1", "content": []},
                {"type": "text", "text": "Found it."},
                {"type": "tool_use", "id": "toolu_1", "name": "Bash", "input": {"command": "ls"}},
            ],
        },
        {
            "role": "user",
            "content": [
                {
                    "type": "tool_result",
                    "tool_use_id": "toolu_1",
                    "content": [
                        {"type": "text", "text": "a.png"},
                        {"type": "image", "source": {"type": "base64", "media_type": "image/png", "data": "AA=="}},
                    ],
                },
                {"type": "a_block_from_next_year", "payload": 1},
            ],
        },
        {"role": "system", "content": [{"type": "tool_addition", "tool": {"type": "tool_reference", "name": "X"}}]},
    ]
    with serve(model) as url:
        response = httpx.post(
            f"{url}/v1/messages",
            json=_claude_code_body(messages=history, tool_choice={"type": "a_choice_from_next_year"}),
        )
    assert response.status_code == 200, response.text
    prompt = _prompt(model)
    assert "Found it." in prompt and '"command": "ls"' in prompt
    assert "a.png[image omitted: this model reads text only]" in prompt


def test_an_image_the_user_sends_now_is_a_clear_400(serve: ServeFn, fake_model: FakeModel) -> None:
    image = {"type": "image", "source": {"type": "base64", "media_type": "image/png", "data": "AA=="}}
    with serve(fake_model) as url:
        response = httpx.post(
            f"{url}/v1/messages", json=_claude_code_body(messages=[{"role": "user", "content": [image]}])
        )
    assert response.status_code == 400
    assert "reads text only" in response.json()["error"]["message"]
    assert fake_model.requests == []


def test_structured_output_config_constrains_the_reply(serve: ServeFn, fake_model: FakeModel) -> None:
    schema = {"type": "object", "properties": {"title": {"type": "string"}}, "required": ["title"]}
    fake_model.reply = lambda prompt: '{"title": "Fix the build"}'
    with serve(fake_model) as url:
        response = httpx.post(
            f"{url}/v1/messages",
            json=_claude_code_body(
                output_config={"effort": "low", "format": {"type": "json_schema", "schema": schema}}
            ),
        )
    assert response.status_code == 200, response.text
    constraint = fake_model.requests[-1].constraint
    assert constraint is not None and constraint.schema == schema


def _codex_body(**extra: Any) -> dict[str, Any]:
    return {
        "model": "gpt-5.1-codex",
        "stream": False,
        "store": False,
        "include": ["reasoning.encrypted_content"],
        "prompt_cache_key": "01a22ef9",
        "reasoning": {"summary": "auto"},
        "client_metadata": {"turn_id": "t1"},
        "parallel_tool_calls": True,
        "tool_choice": "auto",
        "tools": [
            {
                "type": "function",
                "name": "exec_command",
                "description": "Runs a command",
                "strict": False,
                "parameters": {"type": "object", "properties": {"cmd": {"type": "string"}}, "required": ["cmd"]},
            },
            {
                "type": "namespace",
                "name": "multi_agent_v1",
                "description": "sub-agents",
                "tools": [{"type": "function", "name": "spawn_agent", "parameters": {"type": "object"}}],
            },
            {"type": "web_search", "external_web_access": False},
            {
                "type": "custom",
                "name": "apply_patch",
                "format": {"type": "grammar", "syntax": "lark", "definition": ""},
            },
        ],
        "input": [
            {"type": "message", "role": "developer", "content": [{"type": "input_text", "text": "You are Codex."}]},
            {"type": "message", "role": "developer", "content": [{"type": "input_text", "text": "<skills/>"}]},
            {"type": "message", "role": "user", "content": [{"type": "input_text", "text": "<environment_context/>"}]},
            {"type": "message", "role": "user", "content": [{"type": "input_text", "text": "Patch it."}]},
            {"type": "reasoning", "id": "rs_1", "summary": [], "encrypted_content": "gAAA"},
            {"type": "custom_tool_call", "call_id": "call_1", "name": "apply_patch", "input": "*** Begin Patch"},
            {"type": "custom_tool_call_output", "call_id": "call_1", "output": "Done!"},
            {"type": "web_search_call", "id": "ws_1", "status": "completed", "action": {"type": "search"}},
            {"type": "an_item_from_next_year", "id": "x"},
        ],
        **extra,
    }


def test_a_codex_request_is_answered(serve: ServeFn) -> None:
    model = FakeModel(info=fake_info(chat_template=TINY_CHAT_TEMPLATE))
    with serve(model) as url:
        response = httpx.post(f"{url}/v1/responses", json=_codex_body())
    assert response.status_code == 200, response.text
    assert response.json()["output"][0]["content"][0]["text"] == "Hello from the fake model."
    prompt = _prompt(model)
    assert prompt.startswith("<|im_start|>system\nYou are Codex.\n\n<skills/>")
    assert '"name": "exec_command"' in prompt and "multi_agent_v1" not in prompt and "web_search" not in prompt
    assert '"input": "*** Begin Patch"' in prompt and "<tool_response>\nDone!\n</tool_response>" in prompt


def test_responses_content_that_is_not_text_or_parts_is_a_400(serve: ServeFn, fake_model: FakeModel) -> None:
    with serve(fake_model) as url:
        response = httpx.post(
            f"{url}/v1/responses", json={"model": "m", "input": [{"type": "message", "role": "user", "content": 5}]}
        )
    assert response.status_code == 400, response.text
    assert json.loads(response.text)["error"]["param"] == "messages.0"
