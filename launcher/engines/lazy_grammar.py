"""Lazy constraints (`Constraint.triggers`) for engines that enforce grammars with llguidance: output
is free until the text generated so far matches a trigger; from the match's first group on, it must
match the grammar.

`TriggerWatch` is fed each generated token with its bytes and says when a trigger matched, and from
where the grammar takes over (`Handover`); `catch_up` then advances a fresh llguidance matcher over the
output already generated from that point, after which the engine masks tokens as for any constraint.
As in llama.cpp's lazy grammars, triggers are searched (Python `re`) in the whole output so far, in
order, the first that matches wins, and the grammar starts at its first non-empty group (the whole
match without one). A match may start inside a token (a trigger `(\\[TOOL_CALLS\\])` in a tokenizer
that writes `x[TOOL` as one token): the rest of that token's text is re-tokenized for the matcher.

The text searched is each token's bytes as llguidance decodes them (special tokens as their text).
Pure Python: the matcher and the tokenizer table are passed in (MLX and ExLlama both use llguidance).
"""

from __future__ import annotations

import bisect
import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class Handover:
    """Where a lazy grammar takes over: the tail of the token it starts inside (b"" at a token
    boundary), then the tokens generated after it (or from it, at a boundary)."""

    partial: bytes
    tokens: tuple[int, ...]


class TriggerWatch:
    """The output of one sequence, searched for its constraint's triggers after each token."""

    def __init__(self, triggers: Sequence[str], token_bytes: Callable[[int], bytes]) -> None:
        self._patterns = [re.compile(trigger) for trigger in triggers]
        self._token_bytes = token_bytes
        self._tokens: list[int] = []
        self._starts: list[int] = []  # byte offset of each token's first byte
        self._bytes = bytearray()

    def add(self, token: int) -> Handover | None:
        """Take the next generated token; the handover once a trigger matches (then stop feeding)."""
        self._tokens.append(token)
        self._starts.append(len(self._bytes))
        self._bytes += self._token_bytes(token)
        # surrogateescape: a character split across tokens stays undecoded bytes until its last byte
        # arrives, and offsets map back to bytes exactly
        text = self._bytes.decode("utf-8", "surrogateescape")
        for pattern in self._patterns:
            found = pattern.search(text)
            if found is not None:
                groups = range(1, pattern.groups + 1)
                start = next((found.start(g) for g in groups if found.group(g)), found.start())
                return self._handover(len(text[:start].encode("utf-8", "surrogateescape")))
        return None

    def _handover(self, offset: int) -> Handover:
        index = bisect.bisect_right(self._starts, offset) - 1
        if self._starts[index] == offset:
            return Handover(b"", tuple(self._tokens[index:]))
        end = self._starts[index + 1] if index + 1 < len(self._starts) else len(self._bytes)
        return Handover(bytes(self._bytes[offset:end]), tuple(self._tokens[index + 1 :]))


def catch_up(matcher: Any, table: Any, handover: Handover) -> bool:
    """Advance a fresh llguidance matcher over the output from the handover on; False when that output
    already breaks the grammar (the model wrote a trigger and then something no call can start with)."""
    tokens: list[int] = []
    if handover.partial:
        try:  # greedy: the token trie's own spelling of the text, byte for byte
            tokens = list(table.greedy_tokenize(handover.partial.decode("utf-8")))
        except UnicodeDecodeError:
            tokens = list(table.tokenize_bytes(handover.partial))
    tokens += handover.tokens
    return bool(matcher.consume_tokens(tokens)) and not matcher.is_error()
