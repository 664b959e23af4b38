"""A plain turn on the real starter model: the agent, configured by `launcher connect --write`, exits 0
and prints what the model wrote, and the server logged no client or server error."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from tests.agents.clis import AgentCli
from tests.agents.conftest import AGENT_IDS, GENERATION_PATHS, StarterServer, drive, fresh_workspace

PROMPT = "Reply with the single word: hello"


def _words(text: str) -> list[str]:
    return re.findall(r"[A-Za-z0-9]{2,}", text)


@pytest.mark.parametrize("agent_id", AGENT_IDS)
def test_a_plain_turn_on_the_starter_model(
    agent_id: str, agent_clis: dict[str, AgentCli], starter_server: StarterServer, tmp_path: Path
) -> None:
    workspace = fresh_workspace(tmp_path, agent_id, starter_server.url)
    starter_server.mark()
    run = drive(agent_clis[agent_id], workspace, PROMPT, tools=False, test="plain turn")
    logged = starter_server.requests_since_mark()
    assert run.returncode == 0, run.output
    statuses = [entry for entry in logged if entry.status is not None]
    assert any(entry.path.endswith(GENERATION_PATHS) for entry in statuses), logged
    assert [entry.line for entry in statuses if entry.status >= 400] == []
    # The agent shows the answer of its last generation request (earlier ones: titles and the like).
    replies = [entry.reply for entry in logged if entry.reply is not None]
    answer = _words(replies[-1])[:8]
    shown = set(_words(run.stdout))
    assert not answer or sum(word in shown for word in answer) >= min(3, len(answer)), (replies[-1], run.output)
