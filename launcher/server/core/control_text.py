"""Control-token text inside what a client sends stays text.

A rendered chat prompt is tokenized with special-token parsing on, because the template's own
markers (`<start_of_turn>`, `<|im_end|>`, ...) must become control tokens. Without care, the same
parse turns `<end_of_turn>` typed by a user, pasted from a file or returned by a tool into a real
turn boundary, so text can forge a system turn or end the user's. Here each control-token string
found in message content is swapped for a placeholder before rendering; after rendering, the
prompt is tokenized piece by piece: template text with special parsing, each swapped string as
plain text (`<`, `end`, `_of`, ... as the model would read it in a file).

Which strings are control tokens is asked of the model's own tokenizer (one token with special
parsing, several without), so this holds for every vocabulary and engine; answers are cached.
"""

from __future__ import annotations

import re
import threading
from dataclasses import replace

from launcher.engines.base import LoadedModel
from launcher.server.core.messages import ChatMessage

# The shapes control tokens take across vocabularies: <|im_end|>, <end_of_turn>, [INST], [TOOL_CALLS].
_CANDIDATE = re.compile(r"<\|[^<>|\s]{1,48}\|>|<[^<>\s]{1,48}>|\[[A-Z_]{2,32}\]")
# Placeholders from the Private Use Area. A client that types one gets plain text for it: harmless.
_OPEN, _CLOSE = "\ue000", "\ue001"
_PLACEHOLDER = re.compile(f"{_OPEN}(\\d+){_CLOSE}")
_CACHE_LIMIT = 4096


class ControlText:
    """Shields one model's control-token strings in message content from the special-token parse."""

    def __init__(self, model: LoadedModel) -> None:
        self._model = model
        self._known: dict[str, bool] = {}
        self._lock = threading.Lock()  # prompts are prepared on worker threads

    def is_control(self, text: str) -> bool:
        """True when `text` is the text of one of this vocabulary's special tokens."""
        with self._lock:
            known = self._known.get(text)
        if known is None:
            special = self._model.tokenize(text, parse_special=True)
            known = len(special) == 1 and self._model.tokenize(text, parse_special=False) != special
            with self._lock:
                if len(self._known) >= _CACHE_LIMIT:
                    self._known.clear()
                self._known[text] = known
        return known

    def shield(self, messages: list[ChatMessage]) -> tuple[list[ChatMessage], list[str]]:
        """`messages` with every control-token string in their content replaced by a placeholder,
        and the replaced strings (placeholder N stands for strings[N])."""
        literals: list[str] = []

        def swap(match: re.Match[str]) -> str:
            text = match.group(0)
            if not self.is_control(text):
                return text
            literals.append(text)
            return f"{_OPEN}{len(literals) - 1}{_CLOSE}"

        out = []
        for message in messages:
            content = message.content
            if "<" in content or "[" in content:
                before = len(literals)
                shielded = _CANDIDATE.sub(swap, content)
                if len(literals) > before:
                    message = replace(message, content=shielded)
            out.append(message)
        return out, literals

    def tokenize(self, prompt: str, literals: list[str], *, add_special: bool) -> list[int]:
        """Tokens of a rendered prompt: its text with special parsing, each placeholder as plain text."""
        if not literals:
            return self._model.tokenize(prompt, add_special=add_special, parse_special=True)
        tokens: list[int] = []
        start = 0
        for match in _PLACEHOLDER.finditer(prompt):
            index = int(match.group(1))
            if index >= len(literals):
                continue  # a placeholder the client typed itself: left as the text it is
            tokens += self._piece(prompt[start : match.start()], add_special and not tokens and start == 0)
            tokens += self._model.tokenize(literals[index], parse_special=False)
            start = match.end()
        tokens += self._piece(prompt[start:], add_special and not tokens)
        return tokens

    def _piece(self, text: str, add_special: bool) -> list[int]:
        if not text and not add_special:
            return []
        return self._model.tokenize(text, add_special=add_special, parse_special=True)


def restore(prompt: str, literals: list[str]) -> str:
    """The rendered prompt with the placeholders turned back into the strings they stand for."""
    if not literals:
        return prompt

    def back(match: re.Match[str]) -> str:
        index = int(match.group(1))
        return literals[index] if index < len(literals) else match.group(0)

    return _PLACEHOLDER.sub(back, prompt)
