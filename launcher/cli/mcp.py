"""`launcher mcp list [--tools] [--json]`: the MCP servers of the Chat page, and the tools they offer.

The servers are those of `mcp.json` in the data folder (Settings > MCP servers edits it; the format is
the `mcpServers` one Claude Desktop, Cursor and LM Studio share). Without `--tools` nothing is
started: the list says each server's transport and whether it is enabled. With `--tools` the
enabled ones are started as the app starts them (launcher/chat/mcp_host.py: only their own
environment, on a thread of their own) and asked for their tools, then stopped; a server that fails
to start is listed with its error and the last lines it wrote to stderr. Disabled servers never run.
"""

from __future__ import annotations

import argparse
import json
import sys
from typing import Any

START_TIMEOUT_S = 60.0
"""How long the enabled servers may take to start together (`npx` may fetch a package first)."""


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """Subcommands of `launcher mcp`."""
    sub = parser.add_subparsers(dest="action", metavar="ACTION", required=True)
    listing = sub.add_parser("list", help="the servers in mcp.json; --tools starts the enabled ones and lists tools")
    listing.add_argument("--tools", action="store_true", help="start the enabled servers and list their tools")
    listing.add_argument("--json", action="store_true", help="print JSON")


def run(args: argparse.Namespace) -> int:
    """List the servers, with their tools when asked."""
    from launcher.chat import mcp_config

    servers = mcp_config.load()
    rows: list[dict[str, Any]] = [
        {
            "name": name,
            "transport": server.transport,
            "enabled": server.enabled,
            "target": server.url or " ".join([server.command or "", *server.args]).strip(),
        }
        for name, server in servers.items()
    ]
    failed = False
    if args.tools and any(server.enabled for server in servers.values()):
        from launcher.chat.mcp_host import McpHost

        host = McpHost(servers)
        try:
            host.start()
            host.wait_ready(START_TIMEOUT_S)
            states = host.states()
        finally:
            host.close()
        for row in rows:
            state = states.get(row["name"])
            if state is None or not row["enabled"]:  # disabled: never started
                continue
            row["state"] = state.state
            row["tools"] = [{"name": tool.qualified, "description": tool.description} for tool in state.tools]
            if state.error:
                row["error"] = state.error
                row["stderr"] = state.stderr.splitlines()[-5:]
            failed = failed or state.state != "ready"
    if args.json:
        print(json.dumps({"file": str(mcp_config.mcp_file()), "servers": rows}, indent=2))
        return 1 if failed else 0
    print(f"{mcp_config.mcp_file()}: {len(rows)} server{'s' if len(rows) != 1 else ''}")
    for row in rows:
        status = row.get("state", "enabled" if row["enabled"] else "disabled")
        print(f"  {row['name']}  ({row['transport']}, {status})  {row['target']}")
        for tool in row.get("tools", []):
            summary = (tool["description"] or "").strip().splitlines()
            print(f"    {tool['name']}" + (f": {summary[0][:100]}" if summary else ""))
        if "error" in row:
            print(f"    error: {row['error']}", file=sys.stderr)
            for line in row["stderr"]:
                print(f"    | {line}", file=sys.stderr)
    return 1 if failed else 0
