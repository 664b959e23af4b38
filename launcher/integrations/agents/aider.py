"""Aider: ~/.aider.conf.yml (or OPENAI_API_BASE / OPENAI_API_KEY and `--model openai/<id>`), and
~/.aider.model.metadata.json.

Docs: https://aider.chat/docs/llms/openai-compat.html (env vars, the `openai/` prefix),
https://aider.chat/docs/config/aider_conf.html (~/.aider.conf.yml: `model`, `openai-api-base`,
`openai-api-key`; a repository's own file takes precedence) and
https://aider.chat/docs/config/adv-model-settings.html (.aider.model.metadata.json in the home
directory, keyed by the litellm model name, with max_input_tokens / max_output_tokens; without it
Aider warns about an unknown model and assumes a context size).
Aider edits through text (diff/whole edit formats), not tool calls.
"""

from __future__ import annotations

import json
import shlex
from pathlib import Path
from typing import Any

from launcher.integrations.agents.base import Agent, Install, RunConfig
from launcher.integrations.endpoint import Endpoint
from launcher.integrations.setup import AgentSetup, ConfigEdit, Field, context_warnings, output_tokens_for

MIN_CONTEXT = 8_192  # repo map (~1k) + a few files + edit instructions


def build(endpoint: Endpoint) -> AgentSetup:
    """Aider's settings for `endpoint`."""
    litellm_name = f"openai/{endpoint.model_id}"
    env = {"OPENAI_API_BASE": endpoint.base_url, "OPENAI_API_KEY": endpoint.key_or_placeholder}
    edits: tuple[ConfigEdit, ...] = (
        ConfigEdit(
            relative_path=".aider.conf.yml",
            format="yaml",
            fragment={
                "model": litellm_name,
                "openai-api-base": endpoint.base_url,
                "openai-api-key": endpoint.key_or_placeholder,
                # commit messages and chat summaries: the server's small model, when it has one
                **({"weak-model": f"openai/{endpoint.small_model_id}"} if endpoint.small_model_id else {}),
            },
            description="Aider's settings: this server and model for every run (no environment needed)",
        ),
    )
    metadata = model_metadata(endpoint)
    if metadata:
        edits += (
            ConfigEdit(
                relative_path=".aider.model.metadata.json",
                format="json",
                fragment=metadata,
                description="model metadata: the context window Aider should budget for",
            ),
        )
    warnings = context_warnings("Aider", MIN_CONTEXT, endpoint.context_length)
    warnings.append(
        "Aider doesn't know this model, so it uses the plain 'whole' edit format; small models may "
        "still garble edits. Try --edit-format diff for stronger models."
    )
    return AgentSetup(
        agent_id="aider",
        agent_name="Aider",
        docs_url=AGENT.docs_url,
        wire_api="openai-chat",
        env=env,
        command=f"aider --model {shlex.quote(litellm_name)}",
        config_edits=edits,
        fields=(
            Field("OPENAI_API_BASE", endpoint.base_url),
            Field("OPENAI_API_KEY", env["OPENAI_API_KEY"], secret=endpoint.api_key is not None),
            Field("--model", litellm_name),
        ),
        min_context=MIN_CONTEXT,
        context_length=endpoint.context_length,
        warnings=tuple(warnings),
        notes=(
            "With --write, ~/.aider.conf.yml holds the server and model: a plain `aider` uses them.",
            "Setting OPENAI_API_BASE instead also redirects other OpenAI tools started from that shell.",
        ),
    )


def run_config(endpoint: Endpoint, run_dir: Path) -> RunConfig:
    """The server in the environment, the model on the command line, its metadata in a run-only file.

    Aider copies its own `openai-api-base` / `openai-api-key` options over OPENAI_API_BASE and
    OPENAI_API_KEY, so a ~/.aider.conf.yml written earlier (another port, another key) would win
    over those two alone; the same options as AIDER_* variables outrank the file. Both are set:
    litellm reads the OPENAI_* pair.
    """
    litellm_name = f"openai/{endpoint.model_id}"
    env = {
        "OPENAI_API_BASE": endpoint.base_url,
        "OPENAI_API_KEY": endpoint.key_or_placeholder,
        "AIDER_OPENAI_API_BASE": endpoint.base_url,
        "AIDER_OPENAI_API_KEY": endpoint.key_or_placeholder,
    }
    args = ["--model", litellm_name]
    if endpoint.small_model_id:
        args += ["--weak-model", f"openai/{endpoint.small_model_id}"]
    files: dict[Path, str] = {}
    metadata = model_metadata(endpoint)
    if metadata:
        # Read after ~/.aider.model.metadata.json, so this run's window wins over an older one there.
        path = run_dir / "aider-model-metadata.json"
        files[path] = json.dumps(metadata, indent=2) + "\n"
        args += ["--model-metadata-file", str(path)]
    return RunConfig(env=env, args=tuple(args), files=files)


def model_metadata(endpoint: Endpoint) -> dict[str, Any]:
    """litellm metadata for the model (context window, output limit), or {} when the window is unknown."""
    if not endpoint.context_length:
        return {}
    output = output_tokens_for(endpoint.context_length)
    return {
        f"openai/{endpoint.model_id}": {
            "max_tokens": output,
            "max_input_tokens": endpoint.context_length,
            "max_output_tokens": output,
            "input_cost_per_token": 0.0,
            "output_cost_per_token": 0.0,
            "litellm_provider": "openai",
            "mode": "chat",
        }
    }


AGENT = Agent(
    id="aider",
    name="Aider",
    docs_url="https://aider.chat/docs/llms/openai-compat.html",
    wire_api="openai-chat",
    min_context=MIN_CONTEXT,
    needs_tools=False,
    summary="pair programming in the terminal; edits through text, not tool calls",
    config_file=".aider.conf.yml",
    build=build,
    binary="aider",
    install=Install("pypi", "aider-chat"),
    run_config=run_config,
)
