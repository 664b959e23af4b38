"""The published MCP server the chat tests run: `@modelcontextprotocol/server-filesystem` from npm.

It installs the way the agent CLIs do (tests/agents/clis.py): with the system's npm into its own
folder of the agent cache (`~/.cache/launcher/test-agents/mcp-filesystem-<version>`), reused while
its finished marker is there. The version is pinned here rather than in tests/agents/pins.toml,
which lists the coding agents only (the agent tier runs every entry there as an agent); with
`LAUNCHER_AGENT_VERSIONS=latest` the newest published version is used instead, as for the agents.
"""

from __future__ import annotations

import os
from pathlib import Path

from tests.agents.clis import AgentCli, install, latest_version, missing_tools

PACKAGE = "@modelcontextprotocol/server-filesystem"
VERSION = "2026.8.31"
BINARY = "mcp-server-filesystem"


def filesystem_server() -> AgentCli:
    """The pinned (or, with LAUNCHER_AGENT_VERSIONS=latest, the newest) filesystem server."""
    latest = os.environ.get("LAUNCHER_AGENT_VERSIONS") == "latest"
    version = latest_version(PACKAGE, "npm") if latest else VERSION
    return AgentCli("mcp-filesystem", PACKAGE, "npm", version, BINARY)


def install_filesystem_server() -> Path:
    """Its executable, installed on first use; a RuntimeError saying why when npm cannot."""
    why = missing_tools()
    if why is not None:
        raise RuntimeError(why)
    return install(filesystem_server())
