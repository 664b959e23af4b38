"""Codex CLI: a custom provider in ~/.codex/config.toml ($CODEX_HOME/config.toml).

Docs: https://github.com/openai/codex/blob/main/docs/config.md (model, model_provider,
model_context_window, [model_providers.<id>] name/base_url/env_key/wire_api) and
https://developers.openai.com/codex/config-advanced. Reusing a built-in provider key such as
"openai" does not override it, so we register our own key. The "chat" wire API was deprecated
in 2026 and then removed: "responses" is the only value current Codex accepts.
"""

from __future__ import annotations

from typing import Any

from launcher.integrations.agents.base import Agent
from launcher.integrations.endpoint import Endpoint
from launcher.integrations.setup import AgentSetup, ConfigEdit, Field, context_warnings

MIN_CONTEXT = 32_768  # Codex's own guidance for local models: at least 32k
PROVIDER_ID = "launcher"
KEY_ENV = "LAUNCHER_API_KEY"


def build(endpoint: Endpoint) -> AgentSetup:
    """Codex CLI's settings for `endpoint`."""
    provider: dict[str, Any] = {
        "name": "Launcher (local)",
        "base_url": endpoint.base_url,
        "wire_api": "responses",
    }
    env: dict[str, str] = {}
    if endpoint.api_key:
        # env_key names a variable that must be set and non-empty whenever Codex runs.
        provider["env_key"] = KEY_ENV
        env[KEY_ENV] = endpoint.api_key
    fragment: dict[str, Any] = {
        "model": endpoint.model_id,
        "model_provider": PROVIDER_ID,
        "model_providers": {PROVIDER_ID: provider},
    }
    if endpoint.context_length:
        fragment["model_context_window"] = endpoint.context_length
    warnings = context_warnings("Codex", MIN_CONTEXT, endpoint.context_length)
    warnings.append(
        "Codex speaks only the OpenAI Responses API (/v1/responses) and works through tool calls "
        "(shell, apply_patch): run the Test to check both."
    )
    return AgentSetup(
        agent_id="codex",
        agent_name="Codex CLI",
        docs_url=AGENT.docs_url,
        wire_api="openai-responses",
        env=env,
        command="codex",
        config_edits=(
            ConfigEdit(
                relative_path=".codex/config.toml",
                format="toml",
                fragment=fragment,
                description="Codex config: a `launcher` provider and the default model",
            ),
        ),
        fields=(
            Field("base_url", endpoint.base_url),
            Field("model", endpoint.model_id),
            *((Field(KEY_ENV, endpoint.api_key, secret=True),) if endpoint.api_key else ()),
        ),
        min_context=MIN_CONTEXT,
        context_length=endpoint.context_length,
        warnings=tuple(warnings),
        notes=(
            "If CODEX_HOME is set, the file is $CODEX_HOME/config.toml instead of ~/.codex/config.toml.",
            f"With the provider written, switch per run: codex -c model_provider={PROVIDER_ID} -m {endpoint.model_id}",
        ),
    )


AGENT = Agent(
    id="codex",
    name="Codex CLI",
    docs_url="https://github.com/openai/codex/blob/main/docs/config.md",
    wire_api="openai-responses",
    min_context=MIN_CONTEXT,
    needs_tools=True,
    summary="OpenAI's terminal agent; speaks the Responses API",
    config_file=".codex/config.toml",
    build=build,
)
