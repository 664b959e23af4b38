"""The live test against a real `launcher serve` on the tiny model, with each agent's own SDK path,
and against a server that is down or refuses the key."""

from __future__ import annotations

import pytest

from launcher.core.net import free_port
from launcher.integrations import AGENTS, CHECK_NAMES, Endpoint, get_agent, run_live_test
from tests.integrations.conftest import SERVER_CONTEXT, LiveServer


@pytest.mark.parametrize("agent_id", list(AGENTS))
def test_each_agents_sdk_path_works_against_the_real_server(live_server: LiveServer, agent_id: str) -> None:
    agent = get_agent(agent_id)
    endpoint = Endpoint(live_server.base_url, live_server.api_key, live_server.model)
    report = run_live_test(endpoint, agent, timeout=300)  # generous: CI machines are shared

    assert [check.name for check in report.checks] == list(CHECK_NAMES)
    # Streaming, usage, a forced tool call and the tool result round-trip all work for real.
    for name in ("connect", "auth", "model", "usage", "tool_call", "tool_history"):
        assert report.get(name).status == "pass", str(report)
    # The tiny random model may stream no visible text: that is a warning, never a failure.
    assert report.get("stream").status in ("pass", "warn"), str(report)
    assert report.get("tool_call").message.startswith("get_weather({")

    context = report.get("context")
    assert f"{SERVER_CONTEXT:,} tokens" in context.message  # read from the server's /v1/models
    if agent.min_context <= SERVER_CONTEXT:
        assert context.status == "pass" and report.ok
    else:  # Claude Code, Codex, Cline: the report says how to fix it
        assert context.status == "fail" and f"--context {agent.min_context}" in context.message
        assert not report.ok and "Context length failed" in report.summary


def test_unknown_model_is_reported_with_what_is_served(live_server: LiveServer) -> None:
    endpoint = Endpoint(live_server.base_url, live_server.api_key, "no-such-model")
    report = run_live_test(endpoint, get_agent("opencode"))
    assert report.get("model").status == "fail"
    assert live_server.model in report.get("model").message  # tells the user what IS served
    assert {report.get(name).status for name in ("context", "stream", "tool_call")} == {"skip"}


def test_wrong_key_reports_auth_failure(live_server: LiveServer) -> None:
    endpoint = Endpoint(live_server.base_url, "sk-wrong", live_server.model)
    report = run_live_test(endpoint, get_agent("claude-code"))
    assert report.get("connect").status == "pass"
    assert report.get("auth").status == "fail"
    assert "HTTP 401" in report.get("auth").message
    assert not report.ok
    assert report.get("stream").status == "skip"


def test_missing_key_says_the_server_wants_one(live_server: LiveServer) -> None:
    report = run_live_test(Endpoint(live_server.base_url, None, live_server.model), get_agent("codex"))
    assert report.get("auth").status == "fail"
    assert "wants an API key" in report.get("auth").message


def test_server_down_reports_cannot_connect_cleanly() -> None:
    endpoint = Endpoint(f"http://127.0.0.1:{free_port()}/v1", None, "any-model", 65536)
    report = run_live_test(endpoint, get_agent("claude-code"), timeout=5)
    connect = report.get("connect")
    assert connect.status == "fail"
    assert "cannot connect" in connect.message and "launcher serve" in connect.message
    assert [check.status for check in report.checks[1:]] == ["skip"] * (len(CHECK_NAMES) - 1)
    assert not report.ok
    assert "Server reachable failed" in report.summary
    assert report.as_dict()["checks"][0]["status"] == "fail"
