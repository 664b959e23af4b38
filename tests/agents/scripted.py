"""The scripted engine of the tool round trip: a call to the agent's shell tool, then a final answer.

It stands in for the model at the engine seam only (tests/server/fake_model.py): the real
server renders the agent's request with a Hermes/Qwen-style chat template that supports tools
(the tiny GGUF's template) and parses what this engine writes as that family's tool call.

- A request whose prompt offers one of the known shell tools is answered with a call to it,
  in the family's own `<tool_call>{...}</tool_call>` form, writing PROOF_FILE.
- Once the prompt holds a tool result (`<tool_response>`), the answer is FINAL_TEXT.
- Aider offers no tools; it edits files through text, so it gets a whole-file edit.
- A prompt asking for BROKEN_CALL_REQUEST gets a call that does not parse, followed by prose,
  the reply that once held a stream silent until the end: it must reach the agent as text.
"""

from __future__ import annotations

import json
import re

from launcher.engines.base import ModelInfo
from tests.fixtures.models import TINY_CHAT_TEMPLATE
from tests.server.fake_model import FakeModel, fake_info

PROOF_FILE = "proof.txt"
PROOF_TEXT = "round-trip-ok"
FINAL_TEXT = "Done: proof.txt now holds the proof."
AIDER_TEXT = "I will write the proof file."
COMMAND = f"echo {PROOF_TEXT} > {PROOF_FILE}"
BROKEN_CALL_REQUEST = "Show me how a tool call looks."
BROKEN_CALL_TAIL = "and that is not JSON, so it is just text"
BROKEN_CALL_TEXT = f'Like this:\n<tool_call>\n{{"name": "Bash", "arguments": {{"command": ls}}}} {BROKEN_CALL_TAIL}.'


def shell_arguments(tool: str, command: str) -> dict[str, object]:
    """The arguments each agent's shell tool takes."""
    if tool == "exec_command":  # Codex (unified exec)
        return {"cmd": command}
    if tool == "shell":  # Codex (older shell tool)
        return {"command": ["bash", "-lc", command]}
    if tool == "run_commands":  # Cline
        return {"commands": [command]}
    # Claude Code's Bash, OpenCode's bash, Continue's Bash, Qwen Code's run_shell_command
    return {"command": command, "description": "Run the requested command"}


SHELL_TOOLS = ("Bash", "exec_command", "shell", "bash", "run_commands", "run_shell_command")


def _offered_tool(prompt: str) -> str | None:
    for name in SHELL_TOOLS:
        if re.search(rf'"name": "{re.escape(name)}"', prompt):
            return name
    return None


def scripted_reply(prompt: str, command: str = COMMAND) -> str:
    """What the scripted model writes for a rendered prompt (`command` is what its shell call runs)."""
    if BROKEN_CALL_REQUEST in prompt:
        return BROKEN_CALL_TEXT
    if "<tool_response>" in prompt:
        return FINAL_TEXT
    tool = _offered_tool(prompt)
    if tool is not None:
        call = {"name": tool, "arguments": shell_arguments(tool, command)}
        return "<tool_call>\n" + json.dumps(call) + "\n</tool_call>"
    return f"{AIDER_TEXT}\n\n{PROOF_FILE}\n```\n{PROOF_TEXT}\n```\n"


def scripted_info() -> ModelInfo:
    """A tools-capable ChatML model with room for an agent's whole prompt (one token per character)."""
    return fake_info(id="scripted-model", chat_template=TINY_CHAT_TEMPLATE, context_length=1_000_000)


def scripted_model(command: str = COMMAND) -> FakeModel:
    """The scripted engine; its shell call runs `command`."""
    return FakeModel(reply=lambda prompt: scripted_reply(prompt, command), info=scripted_info())
