"""Continue: a model entry in ~/.continue/config.yaml, read by the IDE extensions and by its CLI `cn`.

Docs: https://docs.continue.dev/reference (top-level name/version/schema are required; models[]
with name, provider, model, apiBase, apiKey, roles, capabilities [tool_use] and
defaultCompletionOptions.contextLength / maxTokens) and
https://docs.continue.dev/customize/model-providers/top-level/openai (provider `openai` with
apiBase for OpenAI-compatible servers). Agent mode needs `tool_use`; without the capability
Continue only offers Chat for an unknown model.

The CLI (`@continuedev/cli`, command `cn`; https://docs.continue.dev/cli/configuration) reads
the same ~/.continue/config.yaml unless `--config FILE` names another, needs no Continue login
for a local config, resolves `${{ secrets.NAME }}` from its environment first, and uses the
model last picked with /model, else the first models[] entry with the chat role. `cn -p PROMPT`
is its headless mode (https://docs.continue.dev/cli/quickstart). It sends its tools as native
OpenAI tool calls whatever `capabilities` says, compacts a session by contextLength before it
overflows, and sends maxTokens as each request's max_tokens.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from launcher.integrations.agents.base import Agent, Install, RunConfig
from launcher.integrations.documents import render_document
from launcher.integrations.endpoint import RUN_KEY_ENV, Endpoint
from launcher.integrations.setup import AgentSetup, ConfigEdit, Field, context_warnings, output_tokens_for

MIN_CONTEXT = 16_384  # agent mode's system prompt and tool list, plus the open files

TOP_LEVEL = {"name": "Local config", "version": "1.0.0", "schema": "v1"}

RUN_CONFIG_FILE = "continue-config.yaml"
# The run-only config names the key as a secret, and `cn` finds secrets in its environment first,
# so the key never lands in a file. A name of our own: LAUNCHER_API_KEY is what `launcher serve` reads.
RUN_KEY_VARIABLE = RUN_KEY_ENV
RUN_KEY_SECRET = "${{ secrets." + RUN_KEY_VARIABLE + " }}"  # Continue's template syntax


def model_entry_name(endpoint: Endpoint) -> str:
    """The `name` of our models[] entry (the key a rewrite replaces)."""
    return f"Launcher: {endpoint.model_id}"


def model_entry(endpoint: Endpoint, api_key: str) -> dict[str, Any]:
    """Our models[] entry: the server's model, its window and output budget, `api_key` as given."""
    entry: dict[str, Any] = {
        "name": model_entry_name(endpoint),
        "provider": "openai",
        "model": endpoint.model_id,
        "apiBase": endpoint.base_url,
        "apiKey": api_key,
        "roles": ["chat", "edit", "apply"],
        "capabilities": ["tool_use"],
    }
    if endpoint.context_length:
        entry["defaultCompletionOptions"] = {
            "contextLength": endpoint.context_length,
            "maxTokens": output_tokens_for(endpoint.context_length),
        }
    return entry


def build(endpoint: Endpoint) -> AgentSetup:
    """Continue's settings for `endpoint`."""
    entry = model_entry(endpoint, endpoint.key_or_placeholder)
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
                defaults=dict(TOP_LEVEL),
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
            "The CLI `cn` starts with the model last picked with /model, else the first one in config.yaml.",
            "If you use a Hub config instead of the local one, add the same entry there.",
        ),
    )


def run_config(endpoint: Endpoint, run_dir: Path) -> RunConfig:
    """One `cn` run against `endpoint`: a config file of its own in `run_dir`, given with --config.

    With --config, `cn` reads neither ~/.continue/config.yaml nor the Hub, so the run sees only
    our model whatever the user's own config holds.
    """
    path = run_dir / RUN_CONFIG_FILE
    document = {**TOP_LEVEL, "name": "Launcher", "models": [model_entry(endpoint, RUN_KEY_SECRET)]}
    return RunConfig(
        env={RUN_KEY_VARIABLE: endpoint.key_or_placeholder},
        args=("--config", str(path)),
        files={path: render_document(document, "yaml")},
    )


AGENT = Agent(
    id="continue",
    name="Continue",
    docs_url="https://docs.continue.dev/reference",
    wire_api="openai-chat",
    min_context=MIN_CONTEXT,
    needs_tools=True,
    summary="VS Code / JetBrains extension and the `cn` CLI; OpenAI-compatible chat completions",
    config_file=".continue/config.yaml",
    build=build,
    binary="cn",
    install=Install("npm", "@continuedev/cli"),
    run_config=run_config,
)
