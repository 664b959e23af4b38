"""Split a thinking model's `<think>...</think>` out of its reply, while streaming.

Qwen3, DeepSeek-R1 and similar templates let the model reason inside `<think>` tags before the
answer. Clients expect that apart from the answer (OpenAI-compatible servers use
`reasoning_content`, Anthropic uses `thinking` blocks), and tool calls are only read from the
answer. Some templates open the tag in the prompt, so the reply may start inside it.
"""

from __future__ import annotations

from typing import Literal, Protocol

OPEN, CLOSE = "<think>", "</think>"

PieceKind = Literal["reasoning", "content"]


def partial_suffix(text: str, marker: str) -> int:
    """How many characters at the end of `text` could be the start of `marker`."""
    for size in range(min(len(marker) - 1, len(text)), 0, -1):
        if text.endswith(marker[:size]):
            return size
    return 0


class ReplySplitter(Protocol):
    """Splits a streamed reply into reasoning and content pieces (`ThinkSplitter`, `HarmonySplitter`)."""

    def feed(self, text: str) -> list[tuple[PieceKind, str]]:
        """Pieces made certain by `text`."""
        ...

    def finish(self) -> list[tuple[PieceKind, str]]:
        """Whatever is still held at the end of generation."""
        ...


class ThinkSplitter:
    """Feeds text, returns (kind, text) pieces; holds back only what could still be a tag."""

    def __init__(self, *, starts_inside: bool = False) -> None:
        # after_think: whitespace between </think> and the answer is dropped
        self.state: Literal["start", "thinking", "after_think", "answer"] = "thinking" if starts_inside else "start"
        self.buffer = ""
        self.skip_space = True  # whitespace right after <think> is not part of the thought

    def feed(self, text: str) -> list[tuple[PieceKind, str]]:
        """Pieces made certain by `text`."""
        self.buffer += text
        out: list[tuple[PieceKind, str]] = []
        while True:
            if self.state == "start":
                stripped = self.buffer.lstrip()
                if not stripped or (OPEN.startswith(stripped) and len(stripped) < len(OPEN)):
                    return out  # could still be the opening tag
                if stripped.startswith(OPEN):
                    self.buffer = stripped[len(OPEN) :]
                    self.state = "thinking"
                    continue
                self.state = "answer"
            if self.state == "thinking":
                if self.skip_space:
                    self.buffer = self.buffer.lstrip()
                    if not self.buffer:
                        return out
                    self.skip_space = False
                if CLOSE in self.buffer:
                    thought, _, rest = self.buffer.partition(CLOSE)
                    if thought:
                        out.append(("reasoning", thought))
                    self.buffer = rest
                    self.state = "after_think"
                    continue
                hold = partial_suffix(self.buffer, CLOSE)
                ready = self.buffer[: len(self.buffer) - hold]
                if ready:
                    out.append(("reasoning", ready))
                self.buffer = self.buffer[len(ready) :]
                return out
            if self.state == "after_think":
                self.buffer = self.buffer.lstrip()
                if not self.buffer:
                    return out
                self.state = "answer"
            if self.buffer:
                out.append(("content", self.buffer))
            self.buffer = ""
            return out

    def finish(self) -> list[tuple[PieceKind, str]]:
        """Whatever is still held at the end of generation."""
        if self.state == "after_think":
            self.buffer = self.buffer.lstrip()
        if not self.buffer:
            return []
        kind: PieceKind = "reasoning" if self.state == "thinking" else "content"
        text, self.buffer = self.buffer, ""
        return [(kind, text)]
