"""Chat requests in one internal shape, shared by the OpenAI, Anthropic and Responses routes.

Each route converts its request into `ChatOptions` (typed `ChatMessage`s, tools in
OpenAI's function format, one `GenerationSettings`) and its output events (`TextDelta`,
`ReasoningDelta`, `ToolCallDelta`, then the generation's `Finish`) back into its own wire shape;
result.py gathers them into one finished reply for the non-streaming paths. Here: history
validation, template rendering, tool-call parsing (grammar-constrained when the client requires
a call) and response formats.
"""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass, field, replace
from functools import partial
from typing import Any, Literal, Protocol

import anyio

from launcher.engines.base import TokenLogprob
from launcher.server.body import loads_checked
from launcher.server.core.checkpoint_hints import checkpoint_hints
from launcher.server.core.control_text import restore
from launcher.server.core.generation import (
    Chunk,
    Finish,
    FinishReason,
    Generation,
    GenerationSettings,
    Usage,
    check_prompt_chars,
    needs_bos,
    start_generation,
)
from launcher.server.core.harmony import HarmonySplitter
from launcher.server.core.messages import ChatMessage, ToolCall
from launcher.server.core.reasoning import ReplySplitter, ThinkSplitter
from launcher.server.core.templates import TemplateError, ToolFormat, detect_tool_format
from launcher.server.core.toolcalls import (
    ParsedToolCall,
    StreamingToolParser,
    TextPiece,
    lazy_tool_constraint,
    tool_constraint,
)
from launcher.server.errors import ApiError, bad_request
from launcher.server.metrics import ModelMetrics
from launcher.server.pool.model_slot import ModelSlot
from launcher.server.request_log import current_request

log = logging.getLogger(__name__)

ToolChoice = Literal["none", "auto", "required"] | str  # any other string: the one function to call


@dataclass
class ChatOptions:
    """A chat request, whatever API it arrived on. `settings.constraint` is the reply format the
    client asked for; a required tool call replaces it with the call grammar."""

    messages: list[ChatMessage]
    tools: list[dict[str, Any]] = field(default_factory=list)
    tool_choice: ToolChoice = "auto"
    settings: GenerationSettings = field(default_factory=GenerationSettings)
    parallel_tool_calls: bool = True  # several calls in one reply (OpenAI's `parallel_tool_calls`)


# Answer text: a generation chunk with the reasoning and the tool calls taken out.
TextDelta = Chunk


@dataclass(frozen=True)
class ReasoningDelta:
    """The model's thinking (`<think>` tags, gpt-oss's analysis channel), apart from the answer."""

    text: str


@dataclass(frozen=True)
class ToolCallDelta:
    """One complete tool call, numbered from 0 in the reply."""

    index: int
    call: ParsedToolCall


ChatEvent = TextDelta | ReasoningDelta | ToolCallDelta | Finish


_MEDIA_PARTS = ("image_url", "image", "input_image", "input_audio", "input_file", "file", "document")


def media_omitted(kind: str) -> str:
    """What the model reads in place of an image (or audio, or file) it cannot see."""
    return f"[{kind} omitted: this model reads text only]"


def text_of(content: Any, *, param: str, media: Literal["refuse", "note"] = "refuse") -> str:
    """Message content (a string or a list of text parts) as one string.

    Media the model cannot read is a clear 400 (`refuse`) or, in earlier turns and tool
    results, a note in its place (`note`), so one screenshot does not break a whole session.
    Part types newer than this server are skipped.
    """
    if content is None:
        return ""
    if isinstance(content, str):
        return content
    if not isinstance(content, list):
        raise bad_request("Message content must be a string or a list of content parts.", param=param)
    parts: list[str] = []
    for part in content:
        kind = part.get("type") if isinstance(part, dict) else None
        if kind in ("text", "input_text", "output_text"):
            parts.append(str(part.get("text", "")))
        elif kind in _MEDIA_PARTS and media == "refuse":
            raise bad_request(f"This model reads text only; {kind} content is not supported.", param=param)
        elif kind in _MEDIA_PARTS:
            parts.append(media_omitted(str(kind)))
        else:
            log.debug("skipping a content part of type %r in %s", kind, param)
    return "".join(parts)


def _arguments_object(arguments: Any, *, param: str) -> dict[str, Any]:
    if isinstance(arguments, dict):
        return arguments
    if arguments in (None, ""):
        return {}
    if not isinstance(arguments, str):
        raise bad_request("Tool-call arguments in the history must be a JSON object string.", param=param)
    value = loads_checked(arguments, what="the tool-call arguments", param=param)
    if not isinstance(value, dict):
        raise bad_request("Tool-call arguments in the history must be a JSON object.", param=param)
    return value


def normalize_history(messages: list[dict[str, Any]]) -> list[ChatMessage]:
    """Validate a tool-call history (OpenAI-shaped dicts, as each route writes its request) and type it."""
    out: list[ChatMessage] = []
    open_calls: set[str] = set()
    for i, message in enumerate(messages):
        role = message["role"]
        if role == "developer":
            role = "system"
        asked_now = i == len(messages) - 1 and role == "user"
        content = text_of(message.get("content"), param=f"messages.{i}", media="refuse" if asked_now else "note")
        if role == "assistant" and message.get("tool_calls"):
            calls = []
            for j, call in enumerate(message["tool_calls"]):
                function = call.get("function") or {}
                if not function.get("name"):
                    raise bad_request("Each tool call needs function.name.", param=f"messages.{i}.tool_calls.{j}")
                call_id = call.get("id") or f"call_{i}_{j}"
                open_calls.add(call_id)
                arguments = _arguments_object(function.get("arguments"), param=f"messages.{i}.tool_calls.{j}")
                calls.append(ToolCall(id=call_id, name=function["name"], arguments=arguments))
            out.append(ChatMessage(role=role, content=content, tool_calls=tuple(calls)))
        elif role in ("tool", "function"):
            if not out or not any(m.tool_calls for m in out if m.role == "assistant"):
                raise bad_request(
                    "A tool message must follow an assistant message with tool_calls.", param=f"messages.{i}"
                )
            call_id = message.get("tool_call_id")
            if role == "tool" and not call_id:
                raise bad_request("A tool message needs tool_call_id.", param=f"messages.{i}.tool_call_id")
            if call_id and call_id not in open_calls:
                raise bad_request(
                    f"tool_call_id {call_id!r} does not match any earlier tool call.", param=f"messages.{i}"
                )
            out.append(
                ChatMessage(role="tool", content=content, tool_call_id=call_id, name=message.get("name") or None)
            )
        else:
            out.append(ChatMessage(role=role, content=content))
    return out


def _check_tool_names(tools: list[dict[str, Any]]) -> None:
    """Tool names become literals in the call grammar and the template: no quotes, backslashes or
    whitespace (the hosted APIs allow only letters, digits, `_` and `-`; this is more lenient)."""
    for index, tool in enumerate(tools):
        name = str(tool["function"]["name"])
        if len(name) > 256 or any(c in '"\\' or c.isspace() or not c.isprintable() for c in name):
            raise bad_request(
                f"Tool name {name[:80]!r} is not allowed: use at most 256 characters without quotes, backslashes "
                "or spaces (letters, digits, '_' and '-' work everywhere).",
                param=f"tools.{index}",
            )


def _choice_tools(options: ChatOptions) -> list[dict[str, Any]]:
    if options.tool_choice in ("none", "auto", "required"):
        return options.tools
    chosen = [t for t in options.tools if t["function"]["name"] == options.tool_choice]
    if not chosen:
        raise bad_request(f"tool_choice names {options.tool_choice!r}, which is not in tools.", param="tool_choice")
    return chosen


@dataclass
class ChatRun:
    """A started chat generation."""

    generation: Generation
    tool_format: ToolFormat | None  # None: tool calls are not parsed
    grammar: Literal["lazy", "required", "none"] = "none"  # the call grammar the reply ran under
    thinking: ReplySplitter | None = None  # None: the model does not think apart from its answer
    metrics: ModelMetrics | None = None  # where the calls are counted
    tools: list[dict[str, Any]] | None = None  # the request's: they type tagged arguments, name fenced calls

    @property
    def prompt_tokens(self) -> int:
        """Prompt size in tokens."""
        return self.generation.prompt_tokens

    async def events(self) -> AsyncIterator[ChatEvent]:
        """Text deltas and tool calls as they become certain, then the `Finish` ("tool_calls" when
        the reply made any)."""
        parser = StreamingToolParser(self.tool_format, self.tools) if self.tool_format else None
        calls = repaired = 0

        def answer(text: str, logprobs: tuple[TokenLogprob, ...], final: bool) -> list[ChatEvent]:
            nonlocal calls, repaired
            if parser is None:
                return [TextDelta(text, logprobs)] if (text or logprobs) else []
            out: list[ChatEvent] = []
            for event in parser.feed(text) + (parser.finish() if final else []):
                if isinstance(event, TextPiece):
                    if event.text:
                        out.append(TextDelta(event.text, logprobs))
                else:
                    out.append(ToolCallDelta(calls, event))
                    calls += 1
                    repaired += event.repaired
            return out

        def split(text: str, logprobs: tuple[TokenLogprob, ...], final: bool) -> list[ChatEvent]:
            if self.thinking is None:
                return answer(text, logprobs, final)
            pieces = self.thinking.feed(text) + (self.thinking.finish() if final else [])
            out: list[ChatEvent] = []
            for kind, piece in pieces:
                if kind == "reasoning":
                    out.append(ReasoningDelta(piece))
                else:
                    out.extend(answer(piece, logprobs, False))
            if final:
                out.extend(answer("", (), True))
            return out

        async for item in self.generation:
            if isinstance(item, Chunk):
                for event in split(item.text, item.logprobs, False):
                    yield event
                continue
            for event in split("", (), True):
                yield event
            self._count_calls(calls, repaired, parser.left_as_text if parser is not None else 0)
            reason: FinishReason = "tool_calls" if calls and item.reason in ("stop", "length") else item.reason
            yield replace(item, reason=reason)

    def _count_calls(self, calls: int, repaired: int, left_as_text: int) -> None:
        """The reply's calls in the request log line and /metrics (`calls` includes the `repaired` ones)."""
        record = current_request()
        if record is not None:
            record.tool_calls += calls
            record.calls_repaired += repaired
            record.calls_as_text += left_as_text
            record.tool_grammar = self.grammar if self.grammar != "none" else ""
        if self.metrics is not None:
            outcomes = (("parsed", calls - repaired), ("repaired", repaired), ("left_as_text", left_as_text))
            for outcome, count in outcomes:
                if count:
                    self.metrics.tool_calls.labels(self.metrics.name, outcome, self.grammar).inc(count)

    async def aclose(self) -> None:
        """Stop generating (client gone or done)."""
        await self.generation.aclose()


class ChatStream(Protocol):
    """A chat reply under way, as the routes write it out: a `ChatRun`, or a `ColdStart` whose
    model is still loading."""

    @property
    def prompt_tokens(self) -> int:
        """Prompt size in tokens (0 while not known yet)."""
        ...

    def events(self) -> AsyncIterator[ChatEvent]:
        """The reply's events, ending with its `Finish`."""
        ...

    async def aclose(self) -> None:
        """Stop generating (client gone or done)."""
        ...


class ColdStart:
    """A streamed chat whose model must load first.

    The route sends its headers and first event at once and then keep-alives (its usual
    `with_keepalives` around `events()`) while the model loads, so an agent does not time out
    on a cold model: Cline gives up after 30 s of silence, and a 30B model takes longer than
    that to read from disk. An error found once the model is there (a failed load, a prompt
    longer than its context) arrives as the stream's error event, in the API's own shape.
    """

    def __init__(self, start: Callable[[], Awaitable[ChatRun]]) -> None:
        self._start = start
        self._run: ChatRun | None = None
        self._closed = False

    @property
    def prompt_tokens(self) -> int:
        """The prompt's size once the model has read it (0 before)."""
        return self._run.prompt_tokens if self._run is not None else 0

    async def events(self) -> AsyncIterator[ChatEvent]:
        """Load and start, then the run's events; a failure is one error `Finish`."""
        try:
            self._run = await self._start()
        except ApiError as err:  # written as the error it is (a 503's status and Retry-After kept)
            yield Finish("error", Usage(0, 0), error=err.message, request_error=err.status < 500, refused=err)
            return
        if self._closed:  # the client left while the model loaded
            await self._run.aclose()
            return
        async for event in self._run.events():
            yield event

    async def aclose(self) -> None:
        """Stop generating, or never start when the client left during the load."""
        self._closed = True
        if self._run is not None:
            await self._run.aclose()


@dataclass(frozen=True)
class RenderedPrompt:
    """A chat rendered for the model: its text, its tokens, and where the engine should save checkpoints."""

    text: str
    tokens: list[int]
    checkpoint_hints: tuple[int, ...] = ()


def _prepare(slot: ModelSlot, options: ChatOptions) -> tuple[str, list[int]]:
    """The rendered prompt and its tokens (no checkpoint hints: for counting)."""
    rendered = _render(slot, options, hints=False)
    return rendered.text, rendered.tokens


def _render(slot: ModelSlot, options: ChatOptions, *, hints: bool) -> RenderedPrompt:
    """The rendered prompt and its tokens; control-token text in the messages stays text (control_text).
    With `hints`, and an engine that asks for them, also where the user's part begins (checkpoint_hints)."""
    model, template = slot.model, slot.template
    shield = slot.control_text()
    messages, literals = shield.shield(options.messages)
    tools = options.tools if options.tool_choice != "none" else []
    try:
        text = template.render(messages, tools or None)
    except TemplateError as err:
        raise bad_request(str(err), param="messages") from err
    check_prompt_chars(len(text), model.info.context_length)
    tokens = shield.tokenize(text, literals, add_special=needs_bos(model, text, template.bos_token))
    found: tuple[int, ...] = ()
    if hints and getattr(model, "wants_checkpoint_hints", False):
        found = checkpoint_hints(shield, text, messages, literals, tokens)
    return RenderedPrompt(restore(text, literals), tokens, found)


async def prepare_prompt(slot: ModelSlot, options: ChatOptions) -> tuple[str, list[int]]:
    """`_prepare` on a worker thread: rendering and tokenizing a long conversation takes a while, and
    every other request (and /health) would wait for it on the event loop."""
    return await anyio.to_thread.run_sync(_prepare, slot, options)


def check_options(options: ChatOptions) -> None:
    """What can be refused without the model (tool choice, tool names)."""
    if options.tool_choice not in ("none", "auto") and not options.tools:
        raise bad_request("tool_choice requires tools.", param="tool_choice")
    _check_tool_names(options.tools)


async def start_chat(slot: ModelSlot, options: ChatOptions) -> ChatRun:
    """Render, check and start a chat generation on a loaded model (errors are raised before any output)."""
    model, template = slot.model, slot.template
    check_options(options)
    rendered = await anyio.to_thread.run_sync(partial(_render, slot, options, hints=True))
    text, prompt = rendered.text, rendered.tokens
    constraint = options.settings.constraint
    tool_format: ToolFormat | None = None
    grammar: Literal["lazy", "required", "none"] = "none"
    thinks = "<think>" in template.source
    opens_thinking = thinks and text.rstrip().endswith("<think>")
    if options.tools and options.tool_choice != "none":
        tool_format = template.tool_format
        if options.tool_choice != "auto":
            # `required` may make several calls where the client allows it; a named function, one
            several = options.tool_choice == "required" and options.parallel_tool_calls
            constraint, tool_format = tool_constraint(template.tool_format, _choice_tools(options), parallel=several)
            grammar = "required"
        elif (
            constraint is None and slot.config.tool_call_grammar == "lazy" and getattr(model, "lazy_constraints", False)
        ):
            # free text until the model starts a call; the call itself can only be well formed
            constraint = lazy_tool_constraint(
                template.tool_format,
                options.tools,
                parallel=options.parallel_tool_calls,
                thinking="inside" if opens_thinking else "maybe" if thinks else "no",
            )
            grammar = "lazy" if constraint is not None else "none"
    if options.tools and options.tool_choice == "auto" and options.settings.constraint is not None:
        tool_format = None  # a JSON reply was asked for; do not read it as a call
    settings = replace(options.settings, constraint=constraint)
    generation = await start_generation(
        model,
        slot.metrics,
        prompt,
        settings,
        output_cap=slot.config.max_output_tokens,
        live=slot.live,
        checkpoint_hints=rendered.checkpoint_hints,
    )
    thinking: ReplySplitter | None = None
    free = constraint is None or bool(constraint.triggers)  # a lazy call grammar leaves the thinking free
    if free and detect_tool_format(template.source) == "harmony":
        thinking = HarmonySplitter()  # gpt-oss: analysis/final channels, whatever tools the template offers
    elif free and thinks:
        thinking = ThinkSplitter(starts_inside=opens_thinking)
    return ChatRun(generation, tool_format, grammar, thinking, slot.metrics, options.tools)
