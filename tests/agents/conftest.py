"""The real-agent tier: fixtures for the agent CLIs, the servers they talk to, and one run of each.

`./scripts/test` runs this tier (and sets LAUNCHER_AGENT_TESTS=required, so a machine without
Node.js fails loudly instead of skipping); `scripts/test-agents [--latest]` runs it alone.
"""

from __future__ import annotations

import json
import os
import re
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from launcher.core.config import ServeConfig
from launcher.server.app import create_app
from tests.agents.capture import CapturedRequest, RequestCapture
from tests.agents.clis import AgentCli, AgentRun, connect, install, missing_tools, run_agent, wanted
from tests.agents.headless import HEADLESS
from tests.agents.scripted import scripted_model
from tests.conformance.servers import RunningServer, ServerSpec, start_server
from tests.server.harness import running_app

AGENT_IDS = ("claude-code", "codex", "opencode", "aider", "continue", "cline", "qwen-code")
AGENT_TIMEOUT_S = 600  # a cold 12k-token prompt on a 2-core CPU takes about a minute
GENERATION_PATHS = ("/messages", "/responses", "/chat/completions")
ROUND_TRIP_PROMPT = "Create the file proof.txt containing the text round-trip-ok, then say you are done."

_SUMMARY: list[str] = []  # what the terminal summary prints: versions, run times, replay figures


def note(line: str) -> None:
    """Add a line to the tier's summary at the end of the pytest run."""
    _SUMMARY.append(line)


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Every test here drives real CLIs: mark them so `-m "not agents"` can leave them out."""
    for item in items:
        if "tests/agents/" in str(item.fspath):
            item.add_marker(pytest.mark.agents)
            item.add_marker(pytest.mark.slow)


@pytest.fixture(scope="session")
def agent_clis() -> dict[str, AgentCli]:
    """The agent CLIs, installed (or found installed) in the agent cache."""
    problem = missing_tools()
    if problem is not None:
        if os.environ.get("LAUNCHER_AGENT_TESTS") == "required":
            pytest.fail(problem)
        pytest.skip(problem)
    clis = {cli.id: cli for cli in wanted()}
    for cli in clis.values():
        install(cli)
    return clis


@dataclass
class Workspace:
    """A user's fresh HOME and project folder, configured by `launcher connect AGENT --write`."""

    home: Path
    workdir: Path


def fresh_workspace(root: Path, agent_id: str, base_url: str) -> Workspace:
    """Fresh dirs, then the agent configured the way a user does it."""
    home, workdir = root / "home", root / "work"
    home.mkdir(parents=True)
    workdir.mkdir(parents=True)
    connect(agent_id, base_url, home)
    return Workspace(home, workdir)


def drive(cli: AgentCli, workspace: Workspace, prompt: str, *, tools: bool, test: str) -> AgentRun:
    """Run the agent headless once and note how long it took."""
    headless = HEADLESS[cli.id]
    argv = headless.argv(prompt, tools=tools)
    run = run_agent(
        cli.executable,
        argv,
        home=workspace.home,
        workdir=workspace.workdir,
        timeout=AGENT_TIMEOUT_S,
        env=dict(headless.env),
    )
    note(f"{cli.id} {cli.version}: {test} {run.seconds:.1f} s (exit {run.returncode})")
    return run


# ----- the starter model behind the real `launcher serve` ----------------------------------------

STARTER = ServerSpec("llamacpp", "starter_gguf")
_LOG_LINE = re.compile(r"launcher\.requests: (?P<method>[A-Z]+) (?P<path>\S+) (?P<rest>.*)$")


@dataclass
class LoggedRequest:
    """One request as the server's request log tells it."""

    method: str
    path: str
    status: int | None  # None on a reply line
    line: str
    reply: str | None = None


def logged_requests(log: str) -> list[LoggedRequest]:
    """The requests (and reply previews) a server's request log tells of."""
    logged: list[LoggedRequest] = []
    for line in log.splitlines():
        match = _LOG_LINE.search(line)
        if match is None:
            continue
        rest = match["rest"]
        if rest.startswith("reply="):
            logged.append(LoggedRequest(match["method"], match["path"], None, line, json.loads(rest[6:])))
        else:
            logged.append(LoggedRequest(match["method"], match["path"], int(rest.split()[0]), line))
    return logged


STARTER_SETTINGS = {"max_output_tokens": 24, "log_requests": "replies", "parallel": 2}
"""How the starter serves agents here: capped replies (the base model rambles), reply previews logged."""


def start_starter(starter_gguf: Path, home: Path, *extra: str) -> RunningServer:
    """The real server on the starter model, with STARTER_SETTINGS as flags."""
    flags = [part for name, value in STARTER_SETTINGS.items() for part in (f"--{name.replace('_', '-')}", str(value))]
    return start_server(STARTER, starter_gguf, home, *flags, *extra)


# ----- the scripted engine behind the real server, for the tool round trip -------------------------


@dataclass
class RoundTrip:
    """One agent's tool round trip: its run, its work folder, and every request it sent."""

    run: AgentRun
    workspace: Workspace
    requests: list[CapturedRequest] = field(default_factory=list)

    def turns(self) -> list[CapturedRequest]:
        """The generation requests, in order."""
        return [r for r in self.requests if r.method == "POST" and r.path.endswith(GENERATION_PATHS)]


@pytest.fixture(scope="session")
def scripted_server() -> Iterator[tuple[str, RequestCapture]]:
    """The real app around the scripted engine, every request captured."""
    capture = RequestCapture(create_app(scripted_model(), ServeConfig(port=0)))
    with running_app(capture) as url:
        yield url, capture


@pytest.fixture(scope="session")
def round_trip(
    agent_clis: dict[str, AgentCli],
    scripted_server: tuple[str, RequestCapture],
    tmp_path_factory: pytest.TempPathFactory,
) -> Callable[[str], RoundTrip]:
    """`round_trip(agent)` runs that agent's tool round trip once per session (later calls reuse it)."""
    url, capture = scripted_server
    done: dict[str, RoundTrip] = {}

    def run(agent_id: str) -> RoundTrip:
        if agent_id not in done:
            workspace = fresh_workspace(tmp_path_factory.mktemp(f"round-trip-{agent_id}"), agent_id, url)
            first = len(capture.requests)
            agent_run = drive(agent_clis[agent_id], workspace, ROUND_TRIP_PROMPT, tools=True, test="tool round trip")
            time.sleep(0.2)  # the last response's bookkeeping
            done[agent_id] = RoundTrip(agent_run, workspace, capture.requests[first:])
        return done[agent_id]

    return run


def pytest_terminal_summary(terminalreporter: Any) -> None:
    """The agent versions and how long each run took (the tier's cost, for the notes)."""
    if not _SUMMARY:
        return
    terminalreporter.section("real agents")
    for line in _SUMMARY:
        terminalreporter.write_line(line)
