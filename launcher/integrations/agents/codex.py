"""Codex CLI: a custom provider in ~/.codex/config.toml ($CODEX_HOME/config.toml), or `-c key=value`
overrides for one run.

Docs: https://github.com/openai/codex/blob/main/docs/config.md (model, model_provider,
model_context_window, model_catalog_json, [model_providers.<id>] name/base_url/env_key/wire_api;
`-c` takes a dotted key and a TOML value, placed before the subcommand) and
https://developers.openai.com/codex/config-advanced. Reusing a built-in provider key such as
"openai" does not override it, so we register our own key. The "chat" wire API was deprecated
in 2026 and then removed: "responses" is the only value current Codex accepts.

Checked against Codex 0.171.0: for a model missing from its catalog Codex prints, on every run,
"Model metadata for `<id>` not found. Defaulting to fallback metadata; this can degrade
performance and cause issues." and caps the context window at its fallback's 272,000 tokens
whatever model_context_window says. A catalog file (`model_catalog_json`, `{"models": [...]}`)
that lists the model silences it and carries the server's real window. Codex refuses a catalog
entry without instructions, so ours carries the prompt Codex sends unknown models
(resources/agents/codex_prompt.md, taken from Codex 0.171.0's own request; Apache-2.0, see
LICENSE-codex beside it): the model sees the same prompt as without the catalog.
A catalog replaces Codex's built-in list of models rather than adding to it, so only `launcher
launch` uses one (for its run); `--write` leaves Codex's list alone.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from launcher.core.paths import resources_dir
from launcher.integrations.agents.base import Agent, Install, RunConfig
from launcher.integrations.endpoint import RUN_KEY_ENV, Endpoint
from launcher.integrations.setup import AgentSetup, ConfigEdit, Field, context_warnings

MIN_CONTEXT = 32_768  # Codex's own guidance for local models: at least 32k
PROVIDER_ID = "launcher"
KEY_ENV = "LAUNCHER_API_KEY"
CATALOG_FILE = "launcher-models.json"  # in launch's run folder
# The prompt Codex sends a model it has no metadata for (a catalog entry must carry one).
PROMPT_FILE = resources_dir() / "agents" / "codex_prompt.md"


def build(endpoint: Endpoint) -> AgentSetup:
    """Codex CLI's settings for `endpoint`."""
    provider = provider_settings(endpoint)
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
            "Codex started this way warns that it has no metadata for the model (and caps its window at 272k): "
            "`launcher launch codex` gives each run a model catalog instead. A catalog written for good would "
            "replace Codex's own list of OpenAI models.",
            f"With the provider written, switch per run: codex -c model_provider={PROVIDER_ID} -m {endpoint.model_id}",
        ),
    )


def run_config(endpoint: Endpoint, run_dir: Path) -> RunConfig:
    """`-c` overrides (before the subcommand) and a run-only catalog: nothing in ~/.codex changes."""
    catalog_path = run_dir / CATALOG_FILE
    overrides: dict[str, str | int] = {
        "model": endpoint.model_id,
        "model_provider": PROVIDER_ID,
        "model_catalog_json": str(catalog_path),
        **{f"model_providers.{PROVIDER_ID}.{key}": value for key, value in provider_settings(endpoint).items()},
        # Always set: a provider of the same name in the user's config may name another variable.
        f"model_providers.{PROVIDER_ID}.env_key": RUN_KEY_ENV,
    }
    if endpoint.context_length:
        overrides["model_context_window"] = endpoint.context_length
    args: list[str] = []
    for key, value in overrides.items():
        args += ["-c", f"{key}={toml_value(value)}"]
    return RunConfig(
        env={RUN_KEY_ENV: endpoint.key_or_placeholder},
        args=tuple(args),
        files={catalog_path: json.dumps(model_catalog(endpoint), indent=2) + "\n"},
    )


def provider_settings(endpoint: Endpoint) -> dict[str, Any]:
    """The `[model_providers.launcher]` table, without the key."""
    return {"name": "Launcher (local)", "base_url": endpoint.base_url, "wire_api": "responses"}


def model_catalog(endpoint: Endpoint) -> dict[str, Any]:
    """A `model_catalog_json` document listing the served model.

    The values are those of Codex's fallback metadata for a model it does not know (so the
    model is driven exactly as before: the same prompt, shell tool, output truncation), plus
    what the server knows: the model's context window, which Codex otherwise caps at 272,000.
    """
    entry: dict[str, Any] = {
        "slug": endpoint.model_id,
        "display_name": endpoint.model_id,
        "description": "served by the launcher",
        "base_instructions": PROMPT_FILE.read_text(encoding="utf-8"),
        "supported_reasoning_levels": [],
        "shell_type": "default",
        "visibility": "list",
        "supported_in_api": True,
        "priority": 0,
        "support_verbosity": False,
        "truncation_policy": {"mode": "bytes", "limit": 10_000},
        "supports_parallel_tool_calls": False,
        "experimental_supported_tools": [],
    }
    if endpoint.context_length:
        entry["context_window"] = endpoint.context_length
        entry["max_context_window"] = endpoint.context_length
    return {"models": [entry]}


def toml_value(value: str | int | bool) -> str:
    """`value` as the TOML literal a `-c key=value` override needs.

    Codex parses the text after `=` as TOML and, when that fails, silently takes the raw text as
    a string: quoting every string keeps a value such as `true` or `1e3` a string. A JSON string
    literal is a valid TOML basic string as long as nothing is escaped as a UTF-16 surrogate
    pair, which TOML forbids (ensure_ascii=False leaves such characters as they are), or is the
    DEL control character, which JSON leaves raw and TOML refuses raw.
    """
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int):
        return str(value)
    return json.dumps(value, ensure_ascii=False).replace("\x7f", "\\u007f")


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
    binary="codex",
    install=Install("npm", "@openai/codex"),
    run_config=run_config,
)
