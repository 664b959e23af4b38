"""Qwen Code: a `launcher` model provider in ~/.qwen/settings.json.

Docs: https://qwenlm.github.io/qwen-code-docs/en/users/configuration/model-providers/
(`modelProviders.<provider id>` is a list of models, each with id, name, baseUrl, envKey: the
variable that holds the key, and generationConfig: contextWindowSize, timeout,
streamIdleTimeoutMs, samplingParams; a provider id other than a built-in one is mapped to its
protocol by `providerProtocol`; `security.auth.selectedType` and `model.name` / `model.baseUrl`
pick the model; the settings file's `env` object fills variables the shell does not set) and
https://qwenlm.github.io/qwen-code-docs/en/users/configuration/settings/ (user, workspace and
system settings; system settings override the other two).

Checked against Qwen Code 0.24.4:
- Without `security.auth.selectedType` a headless run stops with "No auth type is selected".
- `contextWindowSize` is what it budgets and compacts against; without it a model it does not
  know is assumed to hold 200k tokens. `samplingParams.max_tokens` replaces its default request
  of 32,000 output tokens, which overflows a small context on its own.
- Its stream guard drops a response that sends no chunk for 4 minutes (a local model prefilling
  a 14k-token prompt on a few CPU cores took longer, and the retry started again) and any stream
  older than 15 minutes; the second has no setting, only QWEN_STREAM_MAX_LIFETIME_MS.
- It reports usage statistics to Alibaba's servers whatever the model provider is, unless
  QWEN_USAGE_STATISTICS_ENABLED is 0.
- QWEN_CODE_SYSTEM_SETTINGS_PATH names the system settings file, so one run can get its own
  settings without touching ~/.qwen. It stamps `$version` into a settings file that lacks one.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from launcher.integrations.agents.base import Agent, Install, RunConfig
from launcher.integrations.endpoint import RUN_KEY_ENV, Endpoint
from launcher.integrations.setup import AgentSetup, ConfigEdit, Field, context_warnings, output_tokens_for

MIN_CONTEXT = 32_768  # a headless turn's system prompt + tool schemas alone are ~14-19k tokens
PROVIDER_ID = "launcher"
KEY_ENV = RUN_KEY_ENV  # set by the settings file's own env block (or launch), not by the user's shell
# A local model can take many minutes to prefill a long prompt or to write a long answer.
REQUEST_TIMEOUT_MS = 1_800_000
SETTINGS_VERSION = 4  # the settings format of Qwen Code 0.24; a file without `$version` is migrated and rewritten
RUN_SETTINGS_FILE = "qwen-settings.json"


def env_for(endpoint: Endpoint) -> dict[str, str]:
    """The variables every Qwen Code run against `endpoint` needs (and the settings file's `env` repeats)."""
    return {
        KEY_ENV: endpoint.key_or_placeholder,  # Qwen Code refuses a provider whose envKey is unset
        "QWEN_STREAM_MAX_LIFETIME_MS": str(REQUEST_TIMEOUT_MS),
        "QWEN_USAGE_STATISTICS_ENABLED": "0",
    }


def model_entry(model_id: str, endpoint: Endpoint, context_length: int | None) -> dict[str, Any]:
    """One model of the `launcher` provider, with the server's limits when they are known."""
    generation: dict[str, Any] = {"timeout": REQUEST_TIMEOUT_MS, "streamIdleTimeoutMs": REQUEST_TIMEOUT_MS}
    if context_length:
        generation["contextWindowSize"] = context_length
    # samplingParams replaces all of Qwen Code's sampling defaults, so it holds the output limit only.
    generation["samplingParams"] = {"max_tokens": output_tokens_for(endpoint.context_length)}
    return {
        "id": model_id,
        "name": f"{model_id} (launcher)",
        "baseUrl": endpoint.base_url,
        "envKey": KEY_ENV,
        "generationConfig": generation,
    }


def settings_for(endpoint: Endpoint) -> dict[str, Any]:
    """The settings that point Qwen Code at `endpoint`: the provider, its protocol, and the chosen model."""
    models = [model_entry(endpoint.model_id, endpoint, endpoint.context_length)]
    settings: dict[str, Any] = {
        "modelProviders": {PROVIDER_ID: models},
        "providerProtocol": {PROVIDER_ID: "openai"},
        "security": {"auth": {"selectedType": "openai"}},
        # baseUrl tells our entry apart from another provider's model with the same id.
        "model": {"name": endpoint.model_id, "baseUrl": endpoint.base_url},
    }
    if endpoint.small_model_id:
        # Its window is unknown here; the entry exists so the fast-model slot resolves to this server.
        models.append(model_entry(endpoint.small_model_id, endpoint, None))
        settings["fastModel"] = endpoint.small_model_id  # prompt suggestions and speculative execution
    return settings


def build(endpoint: Endpoint) -> AgentSetup:
    """Qwen Code's settings for `endpoint`."""
    env = env_for(endpoint)
    warnings = context_warnings("Qwen Code", MIN_CONTEXT, endpoint.context_length)
    warnings.append(
        "Qwen Code works through tool calls (run_shell_command, write_file, edit): run the Test to check them."
    )
    return AgentSetup(
        agent_id="qwen-code",
        agent_name="Qwen Code",
        docs_url=AGENT.docs_url,
        wire_api="openai-chat",
        env=env,
        command="qwen",
        config_edits=(
            ConfigEdit(
                relative_path=".qwen/settings.json",
                format="json",
                # The `env` object lets a plain `qwen` run without exporting anything.
                fragment={**settings_for(endpoint), "env": env},
                description="user settings: a `launcher` model provider, selected for every session",
            ),
        ),
        fields=(
            Field("baseUrl", endpoint.base_url),
            Field("model", endpoint.model_id),
            Field(KEY_ENV, env[KEY_ENV], secret=endpoint.api_key is not None),
        ),
        min_context=MIN_CONTEXT,
        context_length=endpoint.context_length,
        warnings=tuple(warnings),
        notes=(
            "Check with /model inside Qwen Code: the launcher's model is listed under its own provider.",
            "A project's .qwen/settings.json replaces the whole modelProviders list of the user settings.",
        ),
    )


def run_config(endpoint: Endpoint, run_dir: Path) -> RunConfig:
    """The same settings as a run-only system settings file, which outranks ~/.qwen and the project's.

    Qwen Code reads that file in place of the machine's own system settings for this run, and its
    modelProviders replaces theirs (Qwen Code replaces that setting whole), so the run sees only
    this server's models.
    """
    path = run_dir / RUN_SETTINGS_FILE
    settings = {"$version": SETTINGS_VERSION, **settings_for(endpoint)}
    env = {**env_for(endpoint), "QWEN_CODE_SYSTEM_SETTINGS_PATH": str(path)}
    return RunConfig(env=env, files={path: json.dumps(settings, indent=2) + "\n"})


AGENT = Agent(
    id="qwen-code",
    name="Qwen Code",
    docs_url="https://qwenlm.github.io/qwen-code-docs/en/users/configuration/model-providers/",
    wire_api="openai-chat",
    min_context=MIN_CONTEXT,
    needs_tools=True,
    summary="the Qwen team's terminal agent; OpenAI-compatible chat completions",
    config_file=".qwen/settings.json",
    build=build,
    binary="qwen",
    install=Install("npm", "@qwen-code/qwen-code"),
    run_config=run_config,
)
