"""The registry of coding agents the launcher can connect (one module per agent, each citing its docs)."""

from __future__ import annotations

from launcher.core.errors import ConfigError
from launcher.integrations.agents import aider, claude_code, cline, codex, continue_dev, opencode, qwen_code
from launcher.integrations.agents.base import Agent

AGENTS: dict[str, Agent] = {
    agent.id: agent
    for agent in (
        claude_code.AGENT,
        codex.AGENT,
        opencode.AGENT,
        aider.AGENT,
        continue_dev.AGENT,
        cline.AGENT,
        qwen_code.AGENT,
    )
}

# Names people type for the same agent.
_ALIASES = {
    "claude": "claude-code",
    "claudecode": "claude-code",
    "codex-cli": "codex",
    "continue-dev": "continue",
    "qwen": "qwen-code",
    "qwencode": "qwen-code",
    "cn": "continue",
}


def get_agent(name: str) -> Agent:
    """The agent called `name` (id or a common alias); ConfigError listing the known ones otherwise."""
    key = name.strip().lower().replace("_", "-").replace(" ", "-")
    key = _ALIASES.get(key, key)
    if key not in AGENTS:
        raise ConfigError(f"unknown agent {name!r}; known agents: {', '.join(AGENTS)}")
    return AGENTS[key]


__all__ = ["AGENTS", "Agent", "get_agent"]
