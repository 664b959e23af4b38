"""Where in a chat prompt a sliding-window model should save checkpoints: where the user's part begins.

A sliding-window model can reuse a cached prefix only up to a checkpoint (see the llama.cpp engine's
`_sliding_window`). The engine saves some at fixed distances before a prompt's end, which serves the
next turn of the same conversation. A new session of the same agent (after a restart, from the
prompt cache on disk) shares the system prompt, the tools and the context reminders, and parts where
the user's words begin: somewhere in the last user message, which is where the server can point.
Positions found here go to the engine as hints (`GenerationRequest.checkpoint_hints`); a wrong one
costs a checkpoint, never a wrong answer.

Measured with two Claude Code sessions in one folder on the starter model: the first prompt of the
second session (11,911 tokens) shares 9,695 with the first; the fixed positions restore 7,839
(66%), a checkpoint just before the user's line 9,693 (81%).
"""

from __future__ import annotations

from launcher.server.core.control_text import ControlText
from launcher.server.core.messages import ChatMessage

MIN_PROMPT_TOKENS = 1024
"""Shorter prompts are read again quickly: no hints."""
MAX_HINTS = 3
"""The engine keeps a few checkpoints per sequence; these are the last ones before the end."""
_SNIPPET_CHARS = 120  # how much of a message's text is searched for in the rendered prompt
_BOUNDARY_SLACK = 2  # tokens a hint stays before where its text starts


def checkpoint_hints(
    shield: ControlText,
    rendered: str,
    messages: list[ChatMessage],
    literals: list[str],
    tokens: list[int],
) -> tuple[int, ...]:
    """Token positions in `tokens` (the prompt `rendered` from the shielded `messages`) where the last user
    message and its last line begin, and where each message after it begins."""
    if len(tokens) < MIN_PROMPT_TOKENS:
        return ()
    last_user = max((i for i, m in enumerate(messages) if m.role == "user"), default=None)
    if last_user is None:
        return ()
    offsets: set[int] = set()
    for message in messages[last_user:]:
        text = message.content
        for anchor in _anchors(text):
            found = rendered.rfind(anchor[:_SNIPPET_CHARS])
            if found > 0:
                offsets.add(found)
    positions: set[int] = set()
    for offset in sorted(offsets, reverse=True)[:MAX_HINTS]:
        # Counted from the end: the text after an anchor is short (the user's part), while the prompt
        # before it is the long system prompt, which every request would tokenize again otherwise.
        # Tokenized alone, the text may split a token or two differently at its start than within
        # the whole prompt; a checkpoint a little early still serves, one past the divergence not.
        rest = shield.tokenize(rendered[offset:], literals, add_special=False)
        position = len(tokens) - len(rest) - _BOUNDARY_SLACK
        if 0 < position < len(tokens) - 1:
            positions.add(position)
    return tuple(sorted(positions))


def _anchors(text: str) -> list[str]:
    """The message's text from its start, and from its last line (where a typed request usually is)."""
    stripped = text.strip()
    if not stripped:
        return []
    last_line = stripped.rsplit("\n", 1)[-1].strip()
    return [stripped, last_line] if last_line and last_line != stripped else [stripped]
