"""Cline (VS Code): fields to enter in its settings panel; no config file to write.

Docs: https://docs.cline.bot/provider-config/openai-compatible (API Provider "OpenAI Compatible",
Base URL, API Key, Model ID, and the Model Configuration section: context window size, max output
tokens, supports images). Cline keeps these in VS Code's extension global state and secret
storage, not in a file meant to be edited, so the launcher gives the exact values to paste.
"""

from __future__ import annotations

from launcher.integrations.agents.base import Agent
from launcher.integrations.endpoint import Endpoint
from launcher.integrations.setup import AgentSetup, Field, context_warnings, output_tokens_for

MIN_CONTEXT = 32_768  # Cline's system prompt (tools described inline) is ~12-15k tokens by itself


def build(endpoint: Endpoint) -> AgentSetup:
    """Cline's settings for `endpoint`."""
    fields = [
        Field("API Provider", "OpenAI Compatible"),
        Field("Base URL", endpoint.base_url),
        Field("API Key", endpoint.key_or_placeholder, secret=endpoint.api_key is not None),
        Field("Model ID", endpoint.model_id),
    ]
    if endpoint.context_length:
        fields += [
            Field("Context Window Size", str(endpoint.context_length)),
            Field("Max Output Tokens", str(output_tokens_for(endpoint.context_length))),
        ]
    fields.append(Field("Supports Images", "off"))
    warnings = context_warnings("Cline", MIN_CONTEXT, endpoint.context_length)
    warnings.append("Cline acts through tool calls on every step: run the Test to check them.")
    return AgentSetup(
        agent_id="cline",
        agent_name="Cline",
        docs_url=AGENT.docs_url,
        wire_api="openai-chat",
        env={},
        command=None,
        config_edits=(),
        fields=tuple(fields),
        min_context=MIN_CONTEXT,
        context_length=endpoint.context_length,
        warnings=tuple(warnings),
        notes=("Open Cline, click the gear icon, and enter these values under API Configuration.",),
    )


AGENT = Agent(
    id="cline",
    name="Cline",
    docs_url="https://docs.cline.bot/provider-config/openai-compatible",
    wire_api="openai-chat",
    min_context=MIN_CONTEXT,
    needs_tools=True,
    summary="VS Code agent; settings entered in its panel (no config file)",
    config_file=None,
    build=build,
)
