"""Claude Code: environment variables (or the `env` block of ~/.claude/settings.json).

Docs: https://code.claude.com/docs/en/env-vars and https://code.claude.com/docs/en/settings
(ANTHROPIC_BASE_URL is the server root: the client appends /v1/messages; ANTHROPIC_AUTH_TOKEN is
sent as `Authorization: Bearer`; ANTHROPIC_DEFAULT_{OPUS,SONNET,HAIKU}_MODEL map the aliases
Claude Code picks for background and sub-agent work; ANTHROPIC_SMALL_FAST_MODEL is the older
name of the Haiku slot, still read by 1.x; settings.json's "env" object applies the same
variables to every session).

Checked against Claude Code 2.1.332: CLAUDE_CODE_MAX_CONTEXT_TOKENS gives a model it does not know
its real window (without it, it assumes 1M tokens and says so on every run) and
CLAUDE_CODE_AUTO_COMPACT_WINDOW makes it compact before the server's context overflows;
CLAUDE_CODE_ATTRIBUTION_HEADER=0 drops the `x-anthropic-billing-header` system line, which
differs from session to session and, first in the prompt, would defeat prefix caching across
sessions (the server also leaves that line out of the prompt, for setups made by hand).
"""

from __future__ import annotations

import json
from pathlib import Path

from launcher.integrations.agents.base import Agent, Install, RunConfig
from launcher.integrations.endpoint import Endpoint
from launcher.integrations.setup import AgentSetup, ConfigEdit, Field, context_warnings

MIN_CONTEXT = 32_768  # its system prompt + tool schemas alone take ~20-25k tokens


def build(endpoint: Endpoint) -> AgentSetup:
    """Claude Code's settings for `endpoint`."""
    model = endpoint.model_id
    small = endpoint.small_model_id or model  # the server's claude-haiku-* model, when it has one
    env = {
        "ANTHROPIC_BASE_URL": endpoint.root_url,
        "ANTHROPIC_AUTH_TOKEN": endpoint.key_or_placeholder,
        "ANTHROPIC_MODEL": model,
        "ANTHROPIC_DEFAULT_OPUS_MODEL": model,
        "ANTHROPIC_DEFAULT_SONNET_MODEL": model,
        "ANTHROPIC_DEFAULT_HAIKU_MODEL": small,
        "ANTHROPIC_SMALL_FAST_MODEL": small,
        # Local servers have no telemetry/update endpoints; this stops Claude Code calling home for them.
        "CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC": "1",
        # A local model can take minutes to prefill a 30k-token prompt; the default is 10 minutes.
        "API_TIMEOUT_MS": "1800000",
        "CLAUDE_CODE_ATTRIBUTION_HEADER": "0",
    }
    if endpoint.context_length:
        env["CLAUDE_CODE_MAX_CONTEXT_TOKENS"] = str(endpoint.context_length)
        env["CLAUDE_CODE_AUTO_COMPACT_WINDOW"] = str(endpoint.context_length)
    warnings = context_warnings("Claude Code", MIN_CONTEXT, endpoint.context_length)
    warnings.append(
        "Claude Code drives everything through tool calls: a model without reliable tool calling "
        "will answer in plain text and stall. Run the Test to check."
    )
    if endpoint.api_key is None:
        warnings.append(
            "The server needs no key, so ANTHROPIC_AUTH_TOKEN is a placeholder; don't also set "
            "ANTHROPIC_API_KEY, or Claude Code asks whether to use it instead of your subscription."
        )
    return AgentSetup(
        agent_id="claude-code",
        agent_name="Claude Code",
        docs_url=AGENT.docs_url,
        wire_api="anthropic",
        env=env,
        command="claude",
        config_edits=(
            ConfigEdit(
                relative_path=".claude/settings.json",
                format="json",
                fragment={"env": env},
                description="user settings: the same variables for every Claude Code session",
            ),
        ),
        fields=(
            Field("ANTHROPIC_BASE_URL", env["ANTHROPIC_BASE_URL"]),
            Field("ANTHROPIC_AUTH_TOKEN", env["ANTHROPIC_AUTH_TOKEN"], secret=endpoint.api_key is not None),
            Field("ANTHROPIC_MODEL", model),
        ),
        min_context=MIN_CONTEXT,
        context_length=endpoint.context_length,
        warnings=tuple(warnings),
        notes=("Check with /status inside Claude Code: it shows the base URL and model in use.",),
    )


def run_config(endpoint: Endpoint, run_dir: Path) -> RunConfig:
    """The same variables as `build`, for this run only: ~/.claude/settings.json is not touched.

    The environment alone is not enough: the `env` block of the user's settings.json is applied
    over the process environment, so an older block (another port, another model) would win.
    Settings given with `--settings` outrank the user's file, so the variables go there as well.
    """
    env = dict(build(endpoint).env)
    settings = run_dir / "claude-settings.json"
    return RunConfig(
        env=env,
        args=("--settings", str(settings)),
        files={settings: json.dumps({"env": env}, indent=2) + "\n"},
        # A key for Anthropic's API in the user's shell would make Claude Code ask which to use, or send
        # it to this server: the run uses the server's token only.
        unset=("ANTHROPIC_API_KEY",),
    )


AGENT = Agent(
    id="claude-code",
    name="Claude Code",
    docs_url="https://code.claude.com/docs/en/env-vars",
    wire_api="anthropic",
    min_context=MIN_CONTEXT,
    needs_tools=True,
    summary="Anthropic's terminal agent; speaks the Anthropic Messages API",
    config_file=".claude/settings.json",
    build=build,
    binary="claude",
    install=Install("npm", "@anthropic-ai/claude-code"),
    run_config=run_config,
)
