"""One finished reply, gathered from the generation's events, for every non-streaming route.

Chat Completions, Messages and Responses each show the same reply in their own shape; they all
read it from a `ChatResult`: the answer text, the reasoning, the tool calls, the logprobs, the
reply as content blocks in order, and the `Finish` (reason, usage with cached tokens, stop string).
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Awaitable, Callable, Iterable
from dataclasses import dataclass, field

from starlette.requests import Request

from launcher.engines.base import TokenLogprob
from launcher.server.core.chat import ChatEvent, ChatStream, ReasoningDelta, TextDelta, ToolCallDelta
from launcher.server.core.choices import Choices, RunT
from launcher.server.core.generation import Chunk, Finish, cut_short
from launcher.server.core.toolcalls import ParsedToolCall
from launcher.server.routes_common import collect_until_disconnect

ReplyPart = TextDelta | ReasoningDelta | ToolCallDelta


@dataclass
class ChatResult:
    """A whole reply."""

    finish: Finish
    text: str = ""  # all the answer text, whitespace between tool calls included
    reasoning: str = ""
    tool_calls: list[ParsedToolCall] = field(default_factory=list)
    logprobs: list[TokenLogprob] = field(default_factory=list)
    # The reply as content blocks, in order: consecutive text (or reasoning) is one part, and text
    # that is only whitespace opens no text part (it is what a model writes between blocks).
    parts: list[ReplyPart] = field(default_factory=list)


def starts_block(text: str) -> bool:
    """Whether text may open a new text block: whitespace alone is what a model writes between
    blocks (after its reasoning, between tool calls), and an empty block would only clutter."""
    return bool(text.strip())


@dataclass
class _Block:
    """A text or reasoning block while its pieces arrive (joined once, at the end)."""

    reasoning: bool
    pieces: list[str]


class ResultBuilder:
    """Takes the events of one reply in order; `result()` once the `Finish` has come."""

    def __init__(self) -> None:
        self._text: list[str] = []
        self._reasoning: list[str] = []
        self._calls: list[ParsedToolCall] = []
        self._logprobs: list[TokenLogprob] = []
        self._blocks: list[_Block | ToolCallDelta] = []
        self._finish: Finish | None = None

    def add(self, event: ChatEvent | Chunk) -> None:
        """One more event."""
        if isinstance(event, TextDelta):  # a raw completion's Chunk too: the same type
            self._text.append(event.text)
            self._logprobs.extend(event.logprobs)
            self._add_to_block(event.text, reasoning=False)
        elif isinstance(event, ReasoningDelta):
            self._reasoning.append(event.text)
            self._add_to_block(event.text, reasoning=True)
        elif isinstance(event, ToolCallDelta):
            self._calls.append(event.call)
            self._blocks.append(event)
        else:
            self._finish = event

    def _add_to_block(self, text: str, *, reasoning: bool) -> None:
        last = self._blocks[-1] if self._blocks else None
        if isinstance(last, _Block) and last.reasoning == reasoning:
            last.pieces.append(text)
        elif reasoning or starts_block(text):
            self._blocks.append(_Block(reasoning, [text]))

    def result(self) -> ChatResult:
        """The finished reply."""
        if self._finish is None:
            raise RuntimeError("the reply has not finished")
        parts: list[ReplyPart] = []
        for block in self._blocks:
            if isinstance(block, ToolCallDelta):
                parts.append(block)
            elif block.reasoning:
                parts.append(ReasoningDelta("".join(block.pieces)))
            else:
                parts.append(TextDelta("".join(block.pieces)))
        return ChatResult(
            finish=self._finish,
            text="".join(self._text),
            reasoning="".join(self._reasoning),
            tool_calls=list(self._calls),
            logprobs=list(self._logprobs),
            parts=parts,
        )


def gather(events: Iterable[ChatEvent | Chunk]) -> ChatResult:
    """The reply these events make up."""
    builder = ResultBuilder()
    for event in events:
        builder.add(event)
    return builder.result()


async def collect(
    request: Request, events: AsyncIterator[ChatEvent | Chunk], close: Callable[[], Awaitable[None]]
) -> ChatResult:
    """The whole reply; `close` ends the generation however collecting ends (a client that hangs
    up mid-way raises ClientDisconnected: its generation must not run on).

    A reply that did not end on its own raises its error (`cut_short`: a 503 with Retry-After for a
    stopping server, a 500 for a failed engine) and its text so far is dropped: a 200 would say
    the half answer is the whole one, while an error is what every SDK retries (the openai and
    anthropic clients retry a 503 after its Retry-After) or reports to the agent's user.
    """
    try:
        items = await collect_until_disconnect(request, events)
    finally:
        await close()
    result = gather(items)
    cut = cut_short(result.finish)
    if cut is not None:
        raise cut
    return result


async def chat_result(request: Request, run: ChatStream) -> ChatResult:
    """The whole reply of a chat run; a cut or failed generation is an HTTP error, not a reply."""
    return await collect(request, run.events(), run.aclose)


async def choice_results(request: Request, choices: Choices[RunT], count: int) -> list[ChatResult]:
    """The whole reply of each of a request's `count` choices, in order; as `collect`, one choice
    cut or failed is the request's HTTP error (the other choices stop with it)."""
    try:
        items = await collect_until_disconnect(request, choices.events())
    finally:
        await choices.aclose()
    builders = [ResultBuilder() for _ in range(count)]
    for index, event in items:
        builders[index].add(event)
        cut = cut_short(event) if isinstance(event, Finish) else None
        if cut is not None:
            raise cut
    return [builder.result() for builder in builders]
