"""`scripts/capture-agent-requests`: the agents' real generation requests, kept as JSON fixtures.

    scripts/capture-agent-requests [--agents claude-code,codex] [--out tests/data/agent_requests]

Each agent CLI (pinned, from the agent cache) runs its tool round trip against the real server around
the scripted engine (`replay_turns.capture_turns`). Two of its generation requests are kept:

- `<agent>-first.json`: the first one that offers tools (Aider offers none: its first one);
- `<agent>-after-tool.json`: the first one that carries a tool result (none for Aider).

A fixture holds the API path, the headers a replay sends (user agent, Anthropic version and beta
flags; no key), the body as the agent sent it, and the agent's version. The temporary HOME and work
folder of the capture are written as /home/user and /home/user/project (also in Claude Code's
project slug), so regenerating the fixtures on another machine changes only what the agent itself
changes: its prompt's date, and the random device, session and turn ids it sends.
`tests/agents/bench_tool_calls.py` replays them.
"""

from __future__ import annotations

import argparse
import json
import re
import tempfile
from pathlib import Path
from typing import Any

from tests.agents.capture import CapturedRequest
from tests.agents.clis import wanted
from tests.agents.conftest import AGENT_IDS
from tests.agents.replay_turns import capture_turns
from tests.agents.scripted import COMMAND

FIXTURES = Path(__file__).resolve().parents[1] / "data" / "agent_requests"
PLACEHOLDER_HOME = "/home/user"
PLACEHOLDER_WORK = "/home/user/project"
# What tells the server which agent and API version it talks to; not the key, session ids or hosts.
KEPT_HEADERS = ("user-agent", "anthropic-version", "anthropic-beta", "content-type")


def offers_tools(body: Any) -> bool:
    """True when the request offers the model tools (any of the three APIs)."""
    return isinstance(body, dict) and bool(body.get("tools"))


def carries_tool_result(body: Any) -> bool:
    """True when the conversation holds a tool's result: an Anthropic `tool_result` block, a Responses
    `function_call_output` (or custom tool output) item, or a Chat Completions `tool` message."""
    if not isinstance(body, dict):
        return False
    for item in [*(body.get("messages") or []), *(body.get("input") or [])]:
        if not isinstance(item, dict):
            continue
        if item.get("role") == "tool" or str(item.get("type", "")).endswith("_call_output"):
            return True
        content = item.get("content")
        if isinstance(content, list) and any(
            isinstance(block, dict) and block.get("type") == "tool_result" for block in content
        ):
            return True
    return False


def chosen(turns: list[CapturedRequest]) -> dict[str, CapturedRequest]:
    """The fixtures' turns: "first" (with tools when any request has them) and "after-tool"."""
    picked: dict[str, CapturedRequest] = {}
    with_tools = [turn for turn in turns if offers_tools(turn.body)]
    first = next(iter(with_tools or turns), None)
    if first is not None:
        picked["first"] = first
    after = next((turn for turn in with_tools if carries_tool_result(turn.body)), None)
    if after is not None:
        picked["after-tool"] = after
    return picked


def _slug(path: str) -> str:
    return re.sub(r"[^A-Za-z0-9]", "-", path)  # how Claude Code names a project's folder of memories


def _placeheld(text: str, root: Path) -> str:
    work, home = str(root / "work"), str(root / "home")
    text = text.replace(work, PLACEHOLDER_WORK).replace(home, PLACEHOLDER_HOME)
    return text.replace(_slug(work), _slug(PLACEHOLDER_WORK))


def fixture_record(agent_id: str, version: str, turn: CapturedRequest, root: Path) -> dict[str, Any]:
    """What one fixture file holds (the capture's temporary folders replaced by placeholders)."""
    headers = {name: value for name, value in turn.headers.items() if name.lower() in KEPT_HEADERS}
    record = {"agent": agent_id, "version": version, "path": turn.path, "headers": headers, "body": turn.body}
    return json.loads(_placeheld(json.dumps(record), root))


def load_fixture(path: Path) -> tuple[dict[str, Any], CapturedRequest]:
    """A fixture file: its record, and the request as `replay` takes it."""
    record = json.loads(path.read_text(encoding="utf-8"))
    return record, CapturedRequest("POST", record["path"], record["headers"], record["body"])


def capture_agent(agent_id: str, out: Path) -> list[Path]:
    """Run one agent's round trip and write its fixtures; the files written."""
    version = next(cli.version for cli in wanted() if cli.id == agent_id)
    written = []
    with tempfile.TemporaryDirectory() as scratch:
        root = Path(scratch) / "capture"
        turns = capture_turns(agent_id, COMMAND, root)
        for name, turn in chosen(turns).items():
            path = out / f"{agent_id}-{name}.json"
            record = fixture_record(agent_id, version, turn, root)
            path.write_text(json.dumps(record, indent=1, ensure_ascii=False) + "\n", encoding="utf-8")
            written.append(path)
    print(f"{agent_id} {version}: {len(turns)} generation request(s); kept {', '.join(p.name for p in written)}")
    return written


def main() -> int:
    """Capture every agent asked for."""
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--agents", default=",".join(AGENT_IDS), help="comma-separated agent ids")
    parser.add_argument("--out", type=Path, default=FIXTURES, help="folder of the fixtures")
    args = parser.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    for agent_id in args.agents.split(","):
        capture_agent(agent_id.strip(), args.out)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
