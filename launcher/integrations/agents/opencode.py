"""OpenCode: a custom provider in ~/.config/opencode/opencode.json.

Docs: https://opencode.ai/docs/providers/#custom-provider and https://opencode.ai/docs/config/
(provider.<id>.npm "@ai-sdk/openai-compatible", options.baseURL / options.apiKey,
models.<id>.name and limit.context / limit.output, top-level "model": "<provider>/<model>").
OpenCode reads a project's opencode.json too; we write the global one. For one run,
OPENCODE_CONFIG_CONTENT carries the same fragment (https://opencode.ai/docs/config/#inline).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from launcher.integrations.agents.base import Agent, Install, RunConfig
from launcher.integrations.endpoint import Endpoint
from launcher.integrations.setup import AgentSetup, ConfigEdit, Field, context_warnings, output_tokens_for

MIN_CONTEXT = 16_384  # system prompt + tool schemas are ~10k tokens before any file is read
PROVIDER_ID = "launcher"


def build(endpoint: Endpoint) -> AgentSetup:
    """OpenCode's settings for `endpoint`."""
    fragment = config_fragment(endpoint, endpoint.api_key)
    warnings = context_warnings("OpenCode", MIN_CONTEXT, endpoint.context_length)
    warnings.append("OpenCode's build agent works through tool calls: run the Test to check them.")
    return AgentSetup(
        agent_id="opencode",
        agent_name="OpenCode",
        docs_url=AGENT.docs_url,
        wire_api="openai-chat",
        env={},
        command=f"opencode --model {PROVIDER_ID}/{endpoint.model_id}",
        config_edits=(
            ConfigEdit(
                relative_path=".config/opencode/opencode.json",
                format="json",
                fragment=fragment,
                defaults={"$schema": "https://opencode.ai/config.json"},
                description="global OpenCode config: a `launcher` provider and the default model",
            ),
        ),
        fields=(
            Field("baseURL", endpoint.base_url),
            Field("model", f"{PROVIDER_ID}/{endpoint.model_id}"),
            *((Field("apiKey", endpoint.api_key, secret=True),) if endpoint.api_key else ()),
        ),
        min_context=MIN_CONTEXT,
        context_length=endpoint.context_length,
        warnings=tuple(warnings),
        notes=("Pick the model inside OpenCode with /models if you keep another default.",),
    )


def run_config(endpoint: Endpoint, run_dir: Path) -> RunConfig:
    """The same provider and model in OPENCODE_CONFIG_CONTENT, for this run only.

    OpenCode 1.18.33 merges that variable over every config file it reads (global, project,
    .opencode folders), so the user's other settings stay and ours win; with it set, OpenCode
    also skips creating an empty ~/.config/opencode/opencode.json on first start. The key is
    always given (a placeholder when the server needs none), so a stale key that an earlier
    --write left in the user's file is never sent instead.
    """
    fragment = config_fragment(endpoint, endpoint.key_or_placeholder)
    return RunConfig(env={"OPENCODE_CONFIG_CONTENT": json.dumps(fragment)})


def config_fragment(endpoint: Endpoint, api_key: str | None) -> dict[str, Any]:
    """The `launcher` provider with the served model(s), and the default model(s)."""
    model: dict[str, Any] = {"name": f"{endpoint.model_id} (launcher)", "tool_call": True}
    if endpoint.context_length:
        # Without a limit OpenCode cannot compact in time and overflows the server's context.
        model["limit"] = {
            "context": endpoint.context_length,
            "output": output_tokens_for(endpoint.context_length),
        }
    options: dict[str, Any] = {"baseURL": endpoint.base_url}
    if api_key:
        options["apiKey"] = api_key
    fragment: dict[str, Any] = {
        "provider": {
            PROVIDER_ID: {
                "npm": "@ai-sdk/openai-compatible",
                "name": "Launcher (local)",
                "options": options,
                "models": {endpoint.model_id: model},
            }
        },
        "model": f"{PROVIDER_ID}/{endpoint.model_id}",
    }
    if endpoint.small_model_id:  # titles and summaries go to the server's small model
        small = {"name": f"{endpoint.small_model_id} (launcher)", "tool_call": True}
        fragment["provider"][PROVIDER_ID]["models"][endpoint.small_model_id] = small
        fragment["small_model"] = f"{PROVIDER_ID}/{endpoint.small_model_id}"
    return fragment


AGENT = Agent(
    id="opencode",
    name="OpenCode",
    docs_url="https://opencode.ai/docs/providers/#custom-provider",
    wire_api="openai-chat",
    min_context=MIN_CONTEXT,
    needs_tools=True,
    summary="open-source terminal agent; OpenAI-compatible chat completions",
    config_file=".config/opencode/opencode.json",
    build=build,
    binary="opencode",
    install=Install("npm", "opencode-ai"),
    run_config=run_config,
)
