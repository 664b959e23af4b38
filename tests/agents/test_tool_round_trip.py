"""A tool round trip through the real server: the model calls the agent's shell tool in its family's
own format, the agent runs it (the file appears), sends the result, and prints the final answer.

The model is scripted at the engine seam (tests/agents/scripted.py); everything above it, from the
HTTP server to the chat template and the tool-call parser, is the real one. Aider has no tools: it
edits through text, so its round trip is a whole-file edit it applies.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest

from launcher.core.paths import resources_dir
from tests.agents.capture import RequestCapture
from tests.agents.clis import AgentCli
from tests.agents.conftest import AGENT_IDS, RoundTrip, drive, fresh_workspace
from tests.agents.scripted import AIDER_TEXT, BROKEN_CALL_REQUEST, BROKEN_CALL_TAIL, FINAL_TEXT, PROOF_FILE, PROOF_TEXT


@pytest.mark.parametrize("agent_id", AGENT_IDS)
def test_a_tool_round_trip(agent_id: str, round_trip: Callable[[str], RoundTrip]) -> None:
    result = round_trip(agent_id)
    assert result.run.returncode == 0, result.run.output
    proof = result.workspace.workdir / PROOF_FILE
    assert proof.is_file(), result.run.output
    assert proof.read_text().strip() == PROOF_TEXT
    assert [(r.method, r.path, r.status) for r in result.requests if r.status >= 400] == []
    if agent_id == "aider":
        assert AIDER_TEXT in result.run.stdout, result.run.output
        return
    assert len(result.turns()) >= 2, "the tool result never came back"
    assert FINAL_TEXT in result.run.stdout, result.run.output


@pytest.mark.parametrize("agent_id", AGENT_IDS)
def test_a_call_that_does_not_parse_reaches_the_agent_as_text(
    agent_id: str,
    agent_clis: dict[str, AgentCli],
    scripted_server: tuple[str, RequestCapture],
    tmp_path: Path,
) -> None:
    url, _ = scripted_server
    workspace = fresh_workspace(tmp_path, agent_id, url)
    run = drive(agent_clis[agent_id], workspace, BROKEN_CALL_REQUEST, tools=True, test="broken call as text")
    assert run.returncode == 0, run.output
    assert BROKEN_CALL_TAIL in run.stdout, run.output
    assert not (workspace.workdir / PROOF_FILE).exists()


def test_codex_still_sends_the_prompt_launch_gives_it_in_its_model_catalog(
    round_trip: Callable[[str], RoundTrip],
) -> None:
    # Configured by `connect --write`, Codex has no catalog entry for our model and sends the prompt it
    # gives every unknown model. Launch's run-only catalog must carry that same prompt: when a Codex
    # release changes it, this fails (and `scripts/test-agents --latest` says so before users notice).
    first = round_trip("codex").turns()[0]
    shipped = (resources_dir() / "agents" / "codex_prompt.md").read_text(encoding="utf-8")
    # Codex 0.171 sends it as the first developer message (not as `instructions`).
    texts = [
        part["text"] for item in first.body["input"] if item.get("role") == "developer" for part in item["content"]
    ]
    assert texts[0] == shipped
