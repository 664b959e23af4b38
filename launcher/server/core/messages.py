"""One chat message, typed, whatever API it arrived on.

Each route's request becomes these (chat.normalize_history validates the history and builds them),
and they travel as they are through the chat machinery (control_text, checkpoint_hints). Plain
dicts are made at two places only: the template renderer (templates.ChatTemplate.render, the
shape Hugging Face templates read) and the remote request builder (upstreams.remote_request, the
Chat Completions wire shape).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class ToolCall:
    """An earlier tool call in the history: its arguments as an object (as templates read them)."""

    id: str
    name: str
    arguments: Mapping[str, Any]


@dataclass(frozen=True)
class ChatMessage:
    """A message of the history: `system`, `user`, `assistant` (with `tool_calls`) or `tool` (answering
    `tool_call_id`). Its content is text: media and content parts were turned into text when it was built.
    Fields the server does not use (an assistant's reasoning, a user's name) are not kept: nothing reads them.
    """

    role: str
    content: str
    tool_calls: tuple[ToolCall, ...] = ()
    tool_call_id: str | None = None  # a tool message's; None for an old-style `function` result
    name: str | None = None  # a tool message's function name, where the client sent one

    def as_dict(self) -> dict[str, Any]:
        """The message as templates and the Chat Completions API read it. A tool message always has
        `tool_call_id` (None for an old-style `function` result), as it always had."""
        item: dict[str, Any] = {"role": self.role, "content": self.content}
        if self.tool_calls:
            item["tool_calls"] = [
                {"id": call.id, "type": "function", "function": {"name": call.name, "arguments": dict(call.arguments)}}
                for call in self.tool_calls
            ]
        if self.role == "tool":
            item["tool_call_id"] = self.tool_call_id
            if self.name:
                item["name"] = self.name
        return item
