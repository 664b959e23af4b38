"""Coding-agent connections: settings per agent, a config writer, and a live test call.

Qt-free; the app's "Connect an agent" panel and `launcher connect` both use this API:

    endpoint = Endpoint(base_url, api_key, model_id, context_length)  # or discover_endpoint()
    setup = get_agent("claude-code").setup_for(endpoint)  # AgentSetup: env, files, fields, warnings
    setup.shell_snippet("fish")  # copy-button text
    plan_edit(setup.config_edits[0], home=Path.home()).diff  # what a write would change
    apply_edit(setup.config_edits[0], home=Path.home())  # backup + atomic replace
    run_live_test(endpoint, get_agent("claude-code"))  # LiveTestReport (blocking; never raises)

The SDK-backed live test imports openai/anthropic lazily, so importing this package stays cheap.
"""

from __future__ import annotations

from launcher.integrations.agents import AGENTS, Agent, get_agent
from launcher.integrations.endpoint import DEFAULT_BASE_URL, Endpoint, discover_endpoint
from launcher.integrations.live_report import CHECK_NAMES, CHECK_TITLES, Check, LiveTestReport
from launcher.integrations.live_test import run_live_test
from launcher.integrations.setup import SHELLS, AgentSetup, ConfigEdit, Field, Shell
from launcher.integrations.writer import EditPlan, EditResult, apply_edit, plan_edit

__all__ = [
    "AGENTS",
    "CHECK_NAMES",
    "CHECK_TITLES",
    "DEFAULT_BASE_URL",
    "SHELLS",
    "Agent",
    "AgentSetup",
    "Check",
    "ConfigEdit",
    "EditPlan",
    "EditResult",
    "Endpoint",
    "Field",
    "LiveTestReport",
    "Shell",
    "apply_edit",
    "discover_endpoint",
    "get_agent",
    "plan_edit",
    "run_live_test",
]
