"""Cline: fields for the VS Code extension's panel, and the `cline` CLI's provider settings file.

Docs: https://docs.cline.bot/provider-config/openai-compatible (API Provider "OpenAI Compatible",
Base URL, API Key, Model ID, and the Model Configuration section: context window size, max output
tokens, supports images), https://docs.cline.bot/cline-cli/cli-reference (`cline auth`, the
configuration directory) and https://docs.cline.bot/cline-cli/three-core-flows (headless runs).
The extension keeps its settings in VS Code's extension state and secret storage, not in a file
meant to be edited, so the launcher gives the exact values to paste.

The CLI (npm `cline`) keeps them in ~/.cline/data/settings/providers.json, the file that
`cline auth openai-compatible -k KEY -m MODEL -b URL` writes: one entry per provider
(`settings`: provider, apiKey, model, baseUrl, contextWindow, maxTokens; `updatedAt`;
`tokenSource`) and `lastUsedProvider`, the one a run uses when no --provider is given. `--write`
writes the same entry, plus the context window that `cline auth` cannot set.

Checked against cline 3.0.65:
- Tools are native tool calls; the shell tool is `run_commands` with `{"commands": [...]}`.
- `contextWindow` is what Cline sizes a request by (max_tokens is the smaller of 32,000 and the
  room left in the window); `maxTokens` is part of the settings schema but the CLI does not cap
  its requests with it.
- Unless a run uses a local backend, the CLI starts a "hub" daemon that outlives it, and on exit
  it may start a detached `npm update -g cline` when a newer version is out.
- Sandbox mode (`CLINE_SANDBOX=1`, the environment form of `--data-dir`) keeps all of Cline's
  state (providers.json, sessions, logs, databases) in one folder and always uses the local
  backend, in the TUI as well as headless.
"""

from __future__ import annotations

import json
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from launcher.integrations.agents.base import Agent, Install, RunConfig
from launcher.integrations.endpoint import Endpoint
from launcher.integrations.setup import AgentSetup, ConfigEdit, Field, context_warnings, output_tokens_for

MIN_CONTEXT = 32_768  # the extension's system prompt (tools described inline) is ~12-15k tokens by itself
PROVIDER_ID = "openai-compatible"  # Cline's built-in provider for any OpenAI-compatible server
SETTINGS_FILE = ".cline/data/settings/providers.json"
RUN_DATA_DIR = "cline-data"  # in launch's run folder: all of one run's Cline state


def provider_settings(endpoint: Endpoint) -> dict[str, Any]:
    """The `settings` of Cline's openai-compatible provider entry for `endpoint`."""
    settings: dict[str, Any] = {
        "provider": PROVIDER_ID,
        # Cline runs without a key, but a placeholder keeps it working if a version starts to insist.
        "apiKey": endpoint.key_or_placeholder,
        "model": endpoint.model_id,
        "baseUrl": endpoint.base_url,
    }
    if endpoint.context_length:
        settings["contextWindow"] = endpoint.context_length
        settings["maxTokens"] = output_tokens_for(endpoint.context_length)
    return settings


def providers_document(endpoint: Endpoint) -> dict[str, Any]:
    """providers.json with our entry as the one Cline uses.

    Cline's schema requires `updatedAt` (an ISO time in UTC with a `Z`) on every entry and drops
    an entry without it, so the entry carries the time it was written.
    """
    updated_at = datetime.now(UTC).isoformat(timespec="milliseconds").replace("+00:00", "Z")
    return {
        "version": 1,
        "lastUsedProvider": PROVIDER_ID,
        "providers": {
            PROVIDER_ID: {"settings": provider_settings(endpoint), "updatedAt": updated_at, "tokenSource": "manual"}
        },
    }


def build(endpoint: Endpoint) -> AgentSetup:
    """Cline's settings for `endpoint`: the CLI's file, and the same values as panel fields."""
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
        command="cline",
        config_edits=(
            ConfigEdit(
                relative_path=SETTINGS_FILE,
                format="json",
                fragment=providers_document(endpoint),
                description="Cline CLI's providers: an openai-compatible entry, used when no --provider is given",
            ),
        ),
        fields=tuple(fields),
        min_context=MIN_CONTEXT,
        context_length=endpoint.context_length,
        warnings=tuple(warnings),
        notes=(
            "The file is the Cline CLI's (`cline`); the VS Code extension does not read it.",
            "In VS Code, open Cline, click the gear icon, and enter these values under API Configuration.",
        ),
    )


def run_config(endpoint: Endpoint, run_dir: Path) -> RunConfig:
    """One `cline` run against `endpoint`, with all of Cline's state in `run_dir`: nothing in HOME.

    Sandbox mode reads providers.json from its data folder and keeps sessions, logs and databases
    there too, so the user's ~/.cline is neither read nor written (its MCP servers and sessions
    are not part of the run). It also keeps the run on Cline's local backend: otherwise Cline
    starts its hub daemon, which stays running after the run. With auto-update off, no detached
    `npm update -g cline` starts when the run exits either.
    """
    data_dir = run_dir / RUN_DATA_DIR
    settings = data_dir / "settings" / "providers.json"
    return RunConfig(
        env={
            "CLINE_SANDBOX": "1",
            "CLINE_SANDBOX_DATA_DIR": str(data_dir),
            "CLINE_NO_AUTO_UPDATE": "1",
        },
        files={settings: json.dumps(providers_document(endpoint), indent=2) + "\n"},
    )


AGENT = Agent(
    id="cline",
    name="Cline",
    docs_url="https://docs.cline.bot/provider-config/openai-compatible",
    wire_api="openai-chat",
    min_context=MIN_CONTEXT,
    needs_tools=True,
    summary="VS Code extension and the `cline` CLI; OpenAI-compatible chat completions",
    config_file=SETTINGS_FILE,
    build=build,
    binary="cline",
    install=Install("npm", "cline"),
    run_config=run_config,
)
