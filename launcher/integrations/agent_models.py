"""The model names coding agents ask for when nobody tells them another.

The launcher's own server answers any name, but vLLM answers only the names it serves
(`--served-model-name`), so `launcher handoff` adds these: an agent left on its defaults then
still reaches the deployment. The dated names are what the agents sent in the captures behind
tests/server/test_agent_requests.py (Claude Code 2.1, Codex CLI 0.17x); the short ones are the
aliases the same models go by in the agents' settings.
"""

from __future__ import annotations

AGENT_DEFAULT_MODELS: tuple[str, ...] = (
    "claude-sonnet-4-5",  # Claude Code's main model
    "claude-sonnet-4-5-20250929",
    "claude-haiku-4-5",  # Claude Code's background and sub-agent model
    "gpt-5-codex",  # Codex CLI
    "gpt-5.1-codex",
)
