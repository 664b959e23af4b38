"""A plain turn on the real starter model, the way a new user starts an agent: `launcher launch AGENT`.

In a fresh HOME with no server running, `launcher launch AGENT STARTER -- <the agent's headless
flags>` starts the server, runs one turn and exits 0; the agent prints what the model wrote; the
server logged no client or server error; afterwards no process of that HOME is left and the
agent's config files (what `launcher connect --write` would write) are as they were: absent.
The launcher's own settings file caps the starter's replies (the base model rambles), as a user
would set `[serve]` defaults.
"""

from __future__ import annotations

import re
import time
from pathlib import Path

import psutil
import pytest
import tomli_w

from launcher.integrations.agents import get_agent
from launcher.integrations.endpoint import Endpoint
from tests.agents.clis import AgentCli, AgentRun, launch
from tests.agents.conftest import AGENT_IDS, AGENT_TIMEOUT_S, GENERATION_PATHS, STARTER_SETTINGS, logged_requests, note
from tests.agents.headless import HEADLESS

PROMPT = "Reply with the single word: hello"


def _words(text: str) -> list[str]:
    return re.findall(r"[A-Za-z0-9]{2,}", text)


def _config_files(agent_id: str, home: Path) -> dict[Path, bytes | None]:
    """The files `launcher connect AGENT --write` writes, with their content (None: absent)."""
    setup = get_agent(agent_id).setup_for(Endpoint("http://127.0.0.1:1/v1", None, "model", 32_768))
    paths = [edit.path(home) for edit in setup.config_edits]
    return {path: path.read_bytes() if path.is_file() else None for path in paths}


def _processes_of(home: Path) -> list[str]:
    """Processes still running with HOME=`home` (the server, the agent, anything they started)."""
    left = []
    for process in psutil.process_iter(["pid", "name", "status"]):
        try:
            if process.info["status"] != psutil.STATUS_ZOMBIE and process.environ().get("HOME") == str(home):
                left.append(f"{process.info['pid']} {process.info['name']}")
        except (psutil.NoSuchProcess, psutil.AccessDenied):
            continue
    return left


def _no_processes_of(home: Path, timeout: float = 30.0) -> list[str]:
    deadline = time.monotonic() + timeout
    while (left := _processes_of(home)) and time.monotonic() < deadline:
        time.sleep(0.5)
    return left


@pytest.mark.parametrize("agent_id", AGENT_IDS)
def test_launch_runs_a_plain_turn_on_the_starter_model(
    agent_id: str, agent_clis: dict[str, AgentCli], starter_gguf: Path, tmp_path: Path
) -> None:
    plain_turn_through_launch(agent_clis[agent_id], starter_gguf, tmp_path)


def test_launch_without_a_model_or_a_server_serves_the_default(agent_clis: dict[str, AgentCli], tmp_path: Path) -> None:
    # Exactly what a new user types: `launcher launch AGENT -- ...`. The server's default is the starter,
    # assembled from its package into this HOME's data folder. Continue's cn: the quickest turn of the seven.
    run = plain_turn_through_launch(agent_clis["continue"], None, tmp_path)
    assert "No model named and no server running" in run.stderr


def plain_turn_through_launch(cli: AgentCli, model: Path | None, tmp_path: Path) -> AgentRun:
    """One `launcher launch` plain turn in a fresh HOME, checked; returns the run."""
    agent_id = cli.id
    home, workdir = tmp_path / "home", tmp_path / "work"
    workdir.mkdir(parents=True)
    settings = home / ".config" / "launcher" / "settings.toml"
    settings.parent.mkdir(parents=True)
    settings.write_text(tomli_w.dumps({"serve": STARTER_SETTINGS}))
    before = _config_files(agent_id, home)
    run = launch(
        cli,
        model,
        HEADLESS[agent_id].argv(PROMPT, tools=False),
        home=home,
        workdir=workdir,
        timeout=AGENT_TIMEOUT_S,
    )
    note(f"{cli.id} {cli.version}: launch + plain turn {run.seconds:.1f} s (exit {run.returncode})")
    assert run.returncode == 0, run.output
    # Codex warns on every run for a model missing from its catalog; launch's run-only catalog lists ours.
    assert "Model metadata for" not in run.output
    assert _no_processes_of(home) == []
    assert _config_files(agent_id, home) == before
    (log,) = (home / ".local" / "state" / "launcher" / "logs").glob("launch-server-*.log")
    logged = logged_requests(log.read_text(errors="replace"))
    statuses = [entry for entry in logged if entry.status is not None]
    assert any(entry.path.endswith(GENERATION_PATHS) for entry in statuses), log.read_text()[-3000:]
    assert [entry.line for entry in statuses if (entry.status or 0) >= 400] == []
    # The agent shows the answer of one of its generation requests: others are titles, summaries, or (Qwen
    # Code) a memory extraction in the background, which may end after the answer.
    replies = [entry.reply for entry in logged if entry.reply is not None]
    answers = [words[:8] for words in map(_words, replies) if words]  # a reply without words shows nothing
    shown = set(_words(run.stdout))
    assert not answers or any(sum(w in shown for w in answer) >= min(3, len(answer)) for answer in answers), (
        replies,
        run.output,
    )
    return run
