"""The agents' own tools get a call grammar on llama.cpp: the captured requests' tool schemas compile
(tests/data/agent_requests). Claude Code's used not to: its Workflow tool allows a 524,288-character
script (more than a grammar spells out) and takes an argument described but not typed, so every call
of a Claude Code session went unconstrained."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from launcher.engines.base import Constraint
from launcher.engines.llamacpp._sampling import check_grammar, compile_constraint
from launcher.server.core.toolcalls import lazy_tool_constraint
from tests.engines.llamacpp.support import GrammarProbe

CAPTURES = Path(__file__).parents[2] / "data" / "agent_requests"


def _function_tools(body: dict[str, Any]) -> list[dict[str, Any]]:
    """The request's function tools in Chat Completions' shape, whichever API the agent spoke."""
    tools = []
    for tool in body.get("tools") or []:
        if "input_schema" in tool:  # Anthropic Messages
            function = {"name": tool["name"], "parameters": tool["input_schema"]}
        elif isinstance(tool.get("function"), dict):  # Chat Completions
            function = tool["function"]
        elif tool.get("type") == "function":  # Responses
            function = {"name": tool["name"], "parameters": tool.get("parameters")}
        else:
            continue
        tools.append({"type": "function", "function": function})
    return tools


@pytest.mark.parametrize("capture", ["claude-code-first", "codex-first", "opencode-first"])
def test_the_agent_s_tools_compile_into_a_call_grammar(probe: GrammarProbe, capture: str) -> None:
    body = json.loads((CAPTURES / f"{capture}.json").read_text(encoding="utf-8"))["body"]
    tools = _function_tools(body)
    assert len(tools) >= 5
    constraint = lazy_tool_constraint("hermes", tools, parallel=True, thinking="no")
    grammar = compile_constraint(constraint)
    check_grammar(probe._ll, probe._vocab, grammar)


def test_a_property_described_but_not_typed_takes_any_value(probe: GrammarProbe) -> None:
    schema = {"type": "object", "properties": {"args": {"description": "passed to the script as is"}}}
    grammar = compile_constraint(Constraint(kind="json_schema", schema=schema))
    for value in ('"text"', "[1, 2]", '{"a": null}', "true"):
        assert probe.accepts(grammar, '{"args": ' + value + "}"), value
