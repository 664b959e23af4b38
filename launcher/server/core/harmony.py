"""Split a gpt-oss ("harmony") reply into reasoning and answer, while streaming.

gpt-oss writes its reply as messages, each a header and a body:
`<|channel|>analysis<|message|>...<|end|><|start|>assistant<|channel|>final<|message|>...<|return|>`
(the first header has no `<|start|>assistant`: the prompt ends with it). The analysis channel is
the model's thinking, final is the answer, commentary without a recipient is a preamble meant for
the user (content, as llama.cpp treats it). A message addressed `to=functions.NAME` is a tool call
ended by `<|call|>`; the recipient may stand before the channel
(`<|start|>assistant to=functions.NAME<|channel|>commentary json<|message|>`, or in the reply's first
header ` to=functions.NAME<|channel|>...`, its role being the prompt's end) or after it, and
both are passed on as content in the one form `StreamingToolParser` reads, so tool calls are
still parsed from the answer stream. Control tokens never reach the client.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from launcher.server.core.reasoning import PieceKind, partial_suffix

START, CHANNEL, MESSAGE = "<|start|>", "<|channel|>", "<|message|>"
BODY_ENDS = ("<|end|>", "<|return|>", "<|call|>")
# A header right after a body also ends it, should the model skip `<|end|>`; the marker stays for the header.
NEW_HEADER = (START, CHANNEL)
# the reply's first header starts after the prompt's `<|start|>assistant`: at its channel or its recipient
HEADER_OPENINGS = (START, CHANNEL, "assistant", "to=")
MAX_HEADER = 256  # longer without `<|message|>`: not a header, so the text is the answer
TOOL_CALL_START = "<|channel|>commentary to=functions."  # what StreamingToolParser("harmony") looks for
TOOL_CALL_END = "<|call|>"

_CHANNEL_NAME = re.compile(r"<\|channel\|>\s*(\w+)")
_RECIPIENT = re.compile(r"to=([^\s<]+)")

Pieces = list[tuple[PieceKind, str]]


@dataclass(frozen=True)
class _Message:
    """Where one message's body goes, and the text that frames it for the tool-call parser."""

    kind: PieceKind
    prefix: str = ""
    suffix: str = ""


def _message_for(header: str) -> _Message:
    recipient = _RECIPIENT.search(header)
    if recipient:
        name = recipient.group(1)
        if name.startswith("functions."):
            return _Message("content", f"{TOOL_CALL_START}{name.removeprefix('functions.')}{MESSAGE}", TOOL_CALL_END)
        return _Message("reasoning")  # a built-in tool (browser, python) the server does not run: not the answer
    channel = _CHANNEL_NAME.search(header)
    if channel and channel.group(1) == "analysis":
        return _Message("reasoning")
    return _Message("content")  # final, a preamble, or a channel we do not know: never lose answer text


def _merged(pieces: Pieces) -> Pieces:
    # One piece per kind and feed, so a chunk's logprobs are attached once.
    out: Pieces = []
    for kind, text in pieces:
        if out and out[-1][0] == kind:
            out[-1] = (kind, out[-1][1] + text)
        elif text:
            out.append((kind, text))
    return out


class HarmonySplitter:
    """Feeds text, returns (kind, text) pieces; holds back only what could still be a control token or header."""

    def __init__(self) -> None:
        self.buffer = ""
        self.message: _Message | None = None  # None: reading a header

    def feed(self, text: str) -> Pieces:
        """Pieces made certain by `text`."""
        self.buffer += text
        out: Pieces = []
        while True:
            more = self._read_header(out) if self.message is None else self._read_body(out)
            if not more:
                return _merged(out)

    def _read_header(self, out: Pieces) -> bool:
        """Consume one header if complete; False when more text is needed."""
        self.buffer = self.buffer.lstrip()
        if not self.buffer:
            return False
        if not self.buffer.startswith(HEADER_OPENINGS):
            if any(opening.startswith(self.buffer) for opening in HEADER_OPENINGS):
                return False
            self.message = _Message("content")  # not harmony: the text is the answer
            return True
        header, found, rest = self.buffer.partition(MESSAGE)
        if not found:
            if len(self.buffer) <= MAX_HEADER:
                return False
            out.append(("content", self.buffer))
            self.buffer, self.message = "", _Message("content")
            return True
        self.buffer, self.message = rest, _message_for(header)
        out.append(("content", self.message.prefix))
        return True

    def _read_body(self, out: Pieces) -> bool:
        """Pass on body text; True when the body ended and a header follows."""
        assert self.message is not None
        ends = [(self.buffer.find(marker), marker) for marker in BODY_ENDS + NEW_HEADER if marker in self.buffer]
        if not ends:
            hold = max(partial_suffix(self.buffer, marker) for marker in BODY_ENDS + NEW_HEADER)
            out.append((self.message.kind, self.buffer[: len(self.buffer) - hold]))
            self.buffer = self.buffer[len(self.buffer) - hold :]
            return False
        index, marker = min(ends)
        out.append((self.message.kind, self.buffer[:index]))
        out.append(("content", self.message.suffix))
        self.buffer = self.buffer[index + len(marker) if marker in BODY_ENDS else index :]
        self.message = None
        return True

    def finish(self) -> Pieces:
        """Whatever is still held at the end of generation."""
        text, self.buffer = self.buffer, ""
        if self.message is None:
            # A header cut off by max_tokens is only control tokens; text without them is the answer.
            return [] if "<|" in text or not text.strip() else [("content", text)]
        # An unterminated tool call is left without `<|call|>`: the tool-call parser reads it as it stands.
        return _merged([(self.message.kind, text)])
