"""`run_live_test(endpoint, agent)`: a real call, with the SDK the agent uses, checking what it needs.

Checks, in order (see live_report.CHECK_NAMES): the server answers (connect), accepts the key
(auth), lists the model, has enough context for the agent, streams text, reports usage in the
stream, returns a parsable tool call when one is required, and accepts that call's result in
the history. Server-side failures never raise: they become failed checks with a plain message,
and checks that cannot run after a failure are marked skipped. Blocking; the app runs it in a
worker thread.
"""

from __future__ import annotations

from typing import Any

from launcher.core.model_cards import context_length_of_card
from launcher.integrations.agents.base import Agent
from launcher.integrations.endpoint import Endpoint
from launcher.integrations.live_report import Check, LiveTestReport, describe_error

__all__ = ["Check", "LiveTestReport", "run_live_test"]


def run_live_test(endpoint: Endpoint, agent: Agent, *, timeout: float = 60.0, max_tokens: int = 24) -> LiveTestReport:
    """Run every check against `endpoint` the way `agent` would call it; never raises for server failures."""
    report = LiveTestReport(agent.id, agent.name, endpoint.base_url, endpoint.model_id)
    entry = _check_connection(endpoint, report, timeout=min(timeout, 10.0))
    if entry is None:
        return report
    _check_context(endpoint, agent, entry, report)
    if agent.wire_api == "anthropic":
        from launcher.integrations.live_anthropic import check_messages

        check_messages(endpoint, report, timeout=timeout, max_tokens=max_tokens)
    elif agent.wire_api == "openai-responses":
        from launcher.integrations.live_openai import check_responses

        check_responses(endpoint, report, timeout=timeout, max_tokens=max_tokens, needs_tools=agent.needs_tools)
    else:
        from launcher.integrations.live_openai import check_chat

        check_chat(endpoint, report, timeout=timeout, max_tokens=max_tokens, needs_tools=agent.needs_tools)
    return report


def _check_connection(endpoint: Endpoint, report: LiveTestReport, *, timeout: float) -> dict[str, Any] | None:
    """connect, auth and model checks via GET /v1/models; the model's entry, or None to stop."""
    import httpx

    headers = {"Authorization": f"Bearer {endpoint.key_or_placeholder}"}
    url = f"{endpoint.base_url}/models"
    try:
        response = httpx.get(url, headers=headers, timeout=timeout)
    except httpx.HTTPError as err:
        reason = "the server did not answer in time" if isinstance(err, httpx.TimeoutException) else "cannot connect"
        report.add(
            "connect",
            "fail",
            f"{reason} to {endpoint.base_url}: is the server running? Start it with `launcher serve` or from the app.",
        )
        report.skip_rest("the server is not reachable")
        return None
    report.add("connect", "pass", f"{endpoint.root_url} answered")
    if response.status_code in (401, 403):
        hint = "set the server's key" if endpoint.api_key is None else "the key does not match the server's"
        report.add("auth", "fail", f"HTTP {response.status_code}: the server wants an API key ({hint})")
        report.skip_rest("the server refused the key")
        return None
    if response.status_code != 200:
        report.add("auth", "pass", "no authentication error")
        report.add("model", "fail", f"GET /v1/models returned HTTP {response.status_code}: {response.text[:120]}")
        report.skip_rest("the server does not list models")
        return None
    report.add("auth", "pass", "key accepted" if endpoint.api_key else "the server needs no key")
    try:
        entries = [e for e in response.json().get("data", []) if isinstance(e, dict)]
    except (ValueError, AttributeError) as err:
        report.add("model", "fail", f"GET /v1/models did not return a model list ({describe_error(err)})")
        report.skip_rest("the server does not list models")
        return None
    ids = [str(e.get("id")) for e in entries]
    entry = next((e for e in entries if e.get("id") == endpoint.model_id), None)
    if entry is None:
        report.add("model", "fail", f"{endpoint.model_id!r} is not served here; the server lists {ids or 'nothing'}")
        report.skip_rest("the model is not served")
        return None
    report.add("model", "pass", f"{endpoint.model_id!r} is served")
    return entry


def _check_context(endpoint: Endpoint, agent: Agent, entry: dict[str, Any], report: LiveTestReport) -> Check:
    served = context_length_of_card(entry) or endpoint.context_length
    if served is None:
        return report.add(
            "context",
            "warn",
            f"the server does not report its context; {agent.name} needs {agent.min_context:,} tokens",
        )
    if served < agent.min_context:
        return report.add(
            "context",
            "fail",
            f"{served:,} tokens, but {agent.name} needs at least {agent.min_context:,}: "
            f"restart the server with --context {agent.min_context}",
        )
    return report.add("context", "pass", f"{served:,} tokens (needs {agent.min_context:,})")
