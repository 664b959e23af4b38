"""Continue (VS Code / JetBrains): a model entry in ~/.continue/config.yaml.

Docs: https://docs.continue.dev/reference (top-level name/version/schema are required; models[]
with name, provider, model, apiBase, apiKey, roles, capabilities [tool_use] and
defaultCompletionOptions.contextLength / maxTokens) and
https://docs.continue.dev/customize/model-providers/top-level/openai (provider `openai` with
apiBase for OpenAI-compatible servers). Agent mode needs `tool_use`; without the capability
Continue only offers Chat for an unknown model.
"""

from __future__ import annotations

from typing import Any

from launcher.integrations.agents.base import Agent
from launcher.integrations.endpoint import Endpoint
from launcher.integrations.setup import AgentSetup, ConfigEdit, Field, context_warnings, output_tokens_for

MIN_CONTEXT = 16_384  # agent mode's system prompt and tool list, plus the open files


def model_entry_name(endpoint: Endpoint) -> str:
    """The `name` of our models[] entry (the key a rewrite replaces)."""
    return f"Launcher: {endpoint.model_id}"


def build(endpoint: Endpoint) -> AgentSetup:
    """Continue's settings for `endpoint`."""
    entry: dict[str, Any] = {
        "name": model_entry_name(endpoint),
        "provider": "openai",
        "model": endpoint.model_id,
        "apiBase": endpoint.base_url,
        "apiKey": endpoint.key_or_placeholder,
        "roles": ["chat", "edit", "apply"],
        "capabilities": ["tool_use"],
    }
    if endpoint.context_length:
        entry["defaultCompletionOptions"] = {
            "contextLength": endpoint.context_length,
            "maxTokens": output_tokens_for(endpoint.context_length),
        }
    warnings = context_warnings("Continue", MIN_CONTEXT, endpoint.context_length)
    warnings.append("Continue's Agent mode needs tool calls (capability tool_use); Chat and Edit do not.")
    return AgentSetup(
        agent_id="continue",
        agent_name="Continue",
        docs_url=AGENT.docs_url,
        wire_api="openai-chat",
        env={},
        command=None,
        config_edits=(
            ConfigEdit(
                relative_path=".continue/config.yaml",
                format="yaml",
                fragment={"models": [entry]},
                defaults={"name": "Local config", "version": "1.0.0", "schema": "v1"},
                keyed_lists={"models": "name"},
                description="Continue's local config: one model entry (others are kept)",
                # https://docs.continue.dev/yaml-migration: config.yaml, when present, replaces config.json.
                shadows=(".continue/config.json",),
                migration_hint=(
                    "Migrate it to config.yaml (https://docs.continue.dev/yaml-migration), "
                    "or add the model shown above to config.json by hand."
                ),
            ),
        ),
        fields=(
            Field("provider", "openai"),
            Field("apiBase", endpoint.base_url),
            Field("model", endpoint.model_id),
            Field("apiKey", entry["apiKey"], secret=endpoint.api_key is not None),
        ),
        min_context=MIN_CONTEXT,
        context_length=endpoint.context_length,
        warnings=tuple(warnings),
        notes=(
            "Continue reloads config.yaml on save; pick the model in the chat panel's model menu.",
            "If you use a Hub config instead of the local one, add the same entry there.",
        ),
    )


AGENT = Agent(
    id="continue",
    name="Continue",
    docs_url="https://docs.continue.dev/reference",
    wire_api="openai-chat",
    min_context=MIN_CONTEXT,
    needs_tools=True,
    summary="VS Code / JetBrains extension; OpenAI-compatible chat completions",
    config_file=".continue/config.yaml",
    build=build,
)
