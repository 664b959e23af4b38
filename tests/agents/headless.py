"""How each agent runs without a terminal: one prompt in, the answer on stdout, then exit.

These are the agents' own headless modes (`claude -p`, `codex exec`, `opencode run`,
`aider --message`). The flags beyond the prompt only allow what the tool round trip needs
(running a shell command, writing in the work folder) and keep the run from asking anything.
Everything about the server comes from `launcher connect AGENT --write`.
"""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass(frozen=True)
class Headless:
    """The argv of a plain turn and of a turn that may run a tool."""

    plain: tuple[str, ...]
    tools: tuple[str, ...]
    env: dict[str, str] = field(default_factory=dict)  # added to the agent's clean environment

    def argv(self, prompt: str, *, tools: bool) -> list[str]:
        """The command-line arguments with `prompt` in place of {prompt}."""
        return [prompt if part == "{prompt}" else part for part in (self.tools if tools else self.plain)]


_AIDER = ("--message", "{prompt}", "--yes-always", "--no-git", "--no-check-update", "--no-show-release-notes")

HEADLESS: dict[str, Headless] = {
    # -p prints the final answer; as root, --dangerously-skip-permissions is refused, so allow the one tool.
    "claude-code": Headless(("-p", "{prompt}"), ("-p", "{prompt}", "--allowedTools", "Bash")),
    # exec is read-only by default; the round trip writes a file in its work folder.
    "codex": Headless(
        ("exec", "--skip-git-repo-check", "{prompt}"),
        ("exec", "--skip-git-repo-check", "--sandbox", "workspace-write", "{prompt}"),
    ),
    "opencode": Headless(("run", "{prompt}"), ("run", "{prompt}")),
    "aider": Headless((*_AIDER, "--no-analytics"), (*_AIDER, "--no-analytics")),
    # -p runs headless; its Bash tool is allowed there by default (Write and Edit would need --allow Write).
    "continue": Headless(("-p", "{prompt}"), ("-p", "{prompt}")),
    # Plain text on stdout when stdout is not a terminal. Act mode auto-approves by default; --auto-approve
    # true says so whatever the user's settings hold (not -y: that runs until the model calls
    # submit_and_exit). After `connect --write` a run would otherwise start Cline's hub daemon, which
    # outlives it, and may start a detached `npm update -g cline` on exit (launch's run config avoids both).
    # A positional prompt is its one-shot mode (-p is deprecated). Headless "auto" approval hides the shell
    # tool and refuses its `>` as an edit: auto-edit approves edits, --allowed-tools the shell. The prompt goes
    # first because --allowed-tools takes every word after it.
    "qwen-code": Headless(
        ("{prompt}",),
        ("{prompt}", "--approval-mode", "auto-edit", "--allowed-tools", "run_shell_command"),
    ),
    "cline": Headless(
        ("{prompt}",),
        ("--auto-approve", "true", "{prompt}"),
        env={"CLINE_SESSION_BACKEND_MODE": "local", "CLINE_NO_AUTO_UPDATE": "1"},
    ),
}
