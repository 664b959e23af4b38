"""What an agent needs for one endpoint: `AgentSetup`, `ConfigEdit` and the shell snippets.

Everything here is plain data so the desktop app can show it (copy buttons) and the CLI can
print it; nothing here writes files (see `writer.py`) or talks to a server (`live_test.py`).
"""

from __future__ import annotations

import json
import shlex
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

from launcher.integrations.documents import ConfigFormat, render_document

Shell = Literal["bash", "fish", "powershell"]
SHELLS: tuple[Shell, ...] = ("bash", "fish", "powershell")
WireApi = Literal["anthropic", "openai-chat", "openai-responses"]


@dataclass(frozen=True)
class ConfigEdit:
    """A change to one of the agent's config files, merged into whatever the user already has.

    `fragment` is deep-merged over the existing document (our keys win, the user's other keys
    stay); `defaults` are set only where the file has no value yet (e.g. Continue's required
    top-level `name`); `keyed_lists` maps a list-valued key to the item field that identifies an
    entry, so our entry replaces the one with the same id instead of being appended twice.
    """

    relative_path: str
    format: ConfigFormat
    fragment: dict[str, Any]
    defaults: dict[str, Any] = field(default_factory=dict)
    keyed_lists: dict[str, str] = field(default_factory=dict)
    description: str = ""
    # Files (relative to home) the agent stops reading once this one exists: creating ours next to
    # one of them would silently drop the user's settings, so the writer refuses instead.
    shadows: tuple[str, ...] = ()
    migration_hint: str = ""

    def path(self, home: Path) -> Path:
        """The file's location under `home` (the user's home directory in real use)."""
        return home / self.relative_path

    def fragment_text(self) -> str:
        """The fragment rendered in the file's own format, for a copy button."""
        return render_document({**self.defaults, **self.fragment}, self.format)


@dataclass(frozen=True)
class Field:
    """One value to enter by hand in an agent's settings UI (label as the agent shows it)."""

    label: str
    value: str
    secret: bool = False


@dataclass(frozen=True)
class AgentSetup:
    """Everything to connect one agent to one endpoint."""

    agent_id: str
    agent_name: str
    docs_url: str
    wire_api: WireApi
    env: dict[str, str]
    command: str | None
    config_edits: tuple[ConfigEdit, ...]
    fields: tuple[Field, ...]
    min_context: int
    context_length: int | None
    warnings: tuple[str, ...]
    notes: tuple[str, ...] = ()

    @property
    def has_writer(self) -> bool:
        """True when `launcher connect --write` can write the agent's config for the user."""
        return bool(self.config_edits)

    def shell_snippet(self, shell: Shell = "bash") -> str:
        """Environment exports (and the command to start the agent) for bash/zsh, fish or PowerShell."""
        lines = [export_line(name, value, shell) for name, value in self.env.items()]
        if self.command:
            lines.append(self.command)
        return "\n".join(lines)

    def as_dict(self) -> dict[str, Any]:
        """A JSON-friendly view (for `launcher connect --json` and the app)."""
        return {
            "agent": self.agent_id,
            "name": self.agent_name,
            "docs": self.docs_url,
            "wire_api": self.wire_api,
            "env": dict(self.env),
            "command": self.command,
            "config_files": [
                {"path": edit.relative_path, "format": edit.format, "content": edit.fragment_text()}
                for edit in self.config_edits
            ],
            "fields": [{"label": f.label, "value": f.value, "secret": f.secret} for f in self.fields],
            "min_context": self.min_context,
            "context_length": self.context_length,
            "warnings": list(self.warnings),
            "notes": list(self.notes),
            "shell": {shell: self.shell_snippet(shell) for shell in SHELLS},
        }

    def to_json(self) -> str:
        """`as_dict` as indented JSON."""
        return json.dumps(self.as_dict(), indent=2)


def export_line(name: str, value: str, shell: Shell) -> str:
    """One `export`-style line, with the value quoted for that shell."""
    if shell == "bash":  # also zsh and other POSIX shells
        return f"export {name}={shlex.quote(value)}"
    if shell == "fish":
        # fish single quotes: only backslash and single quote need escaping.
        escaped = value.replace("\\", "\\\\").replace("'", "\\'")
        return f"set -gx {name} '{escaped}'"
    if shell == "powershell":
        # PowerShell single-quoted strings: a quote is written twice, nothing else is special.
        escaped = value.replace("'", "''")
        return f"$env:{name} = '{escaped}'"
    raise ValueError(f"unknown shell {shell!r}; choose one of {', '.join(SHELLS)}")


def context_warnings(agent_name: str, min_context: int, context_length: int | None) -> list[str]:
    """The warning about the server's context length versus what the agent needs, if any."""
    if context_length is None:
        return [
            f"The server's context length is unknown; {agent_name} needs at least {min_context:,} tokens "
            f"(start the server with --context {min_context} or more)."
        ]
    if context_length < min_context:
        return [
            f"The server's context is {context_length:,} tokens but {agent_name} needs at least "
            f"{min_context:,}: restart the server with --context {min_context} (or more) or its requests "
            "will be cut off or fail."
        ]
    return []


def output_tokens_for(context_length: int | None) -> int:
    """A sensible output budget to declare for a model: a quarter of the context, at most 8k."""
    if not context_length:
        return 4096
    return max(512, min(8192, context_length // 4))
