"""`launcher mcp list`: the servers of mcp.json, and with --tools what the enabled ones offer, from a real
stdio server the tests define with the SDK; a server that fails to start is named with its stderr, and a
disabled one is never run."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

DEMO = Path(__file__).parent / "mcp_servers" / "demo_server.py"


def _mcp(home: Path, *args: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "LAUNCHER_HOME": str(home)}
    return subprocess.run(
        [sys.executable, "-m", "launcher", "mcp", "list", *args],
        env=env, capture_output=True, text=True, timeout=120, check=False,
    )  # fmt: skip


def _config(home: Path, marker: Path) -> None:
    (home / "data").mkdir(parents=True)
    servers = {
        "demo": {"command": sys.executable, "args": [str(DEMO), "stdio"]},
        "broken": {"command": sys.executable, "args": [str(DEMO), "broken"]},
        # Disabled: were it started, it would create the marker file.
        "off": {"command": "/bin/sh", "args": ["-c", f"touch {marker}"], "disabled": True},
    }
    (home / "data" / "mcp.json").write_text(json.dumps({"mcpServers": servers}))


def test_the_list_starts_nothing_and_tools_come_from_the_enabled_servers(tmp_path: Path) -> None:
    marker = tmp_path / "off-ran"
    _config(tmp_path / "home", marker)

    plain = _mcp(tmp_path / "home")
    assert plain.returncode == 0, plain.stderr
    assert "demo  (stdio, enabled)" in plain.stdout and "off  (stdio, disabled)" in plain.stdout
    assert "demo__add" not in plain.stdout  # nothing was started

    listed = _mcp(tmp_path / "home", "--tools", "--json")
    rows = {row["name"]: row for row in json.loads(listed.stdout)["servers"]}
    assert listed.returncode == 1  # one server failed to start
    assert rows["demo"]["state"] == "ready"
    assert "demo__add" in [tool["name"] for tool in rows["demo"]["tools"]]
    assert rows["broken"]["state"] == "failed"
    assert any("DEMO_CONFIG is missing" in line for line in rows["broken"]["stderr"])
    assert "state" not in rows["off"] and not marker.exists()
