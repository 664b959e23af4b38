"""Request and response models for the Anthropic Messages endpoints (Claude Code and the anthropic SDK)."""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import Field

from launcher.server.core.generation import Usage
from launcher.server.errors import ApiError, anthropic_type
from launcher.server.schemas_common import OMIT_IF_NONE, GenerationFields, Lenient, WireModel


class ContentBlock(Lenient):
    """A content block: text, image, tool_use, tool_result, thinking, document..."""

    type: str
    text: str | None = None
    id: str | None = None
    name: str | None = None
    input: dict[str, Any] | None = None
    tool_use_id: str | None = None
    content: str | list[dict[str, Any]] | None = None
    is_error: bool | None = None
    thinking: str | None = None


class Message(Lenient):
    """One turn of the conversation; `system` is a mid-conversation system message (Claude Code sends them)."""

    role: Literal["user", "assistant", "system"]
    content: str | list[ContentBlock]


class Tool(Lenient):
    """A tool: client tools have an input_schema; server tools (web_search...) only a `type` and are skipped."""

    name: str = Field(min_length=1)
    description: str | None = None
    input_schema: dict[str, Any] | None = None
    type: str | None = None
    defer_loading: bool | None = None


class ToolChoice(Lenient):
    """`tool_choice`: auto, any, tool (with name), none; a newer type is read as auto."""

    type: str
    name: str | None = None
    disable_parallel_tool_use: bool | None = None


class TextBlockParam(Lenient):
    """A system prompt block (text; other kinds, such as tool_addition, are skipped)."""

    type: str = "text"
    text: str = ""


class OutputFormat(Lenient):
    """`output_config.format`: structured output as a JSON schema."""

    type: str
    schema_: dict[str, Any] | None = Field(None, alias="schema")


class OutputConfig(Lenient):
    """`output_config` (effort and the like are accepted and ignored)."""

    format: OutputFormat | None = None


class CountTokensRequest(Lenient):
    """POST /v1/messages/count_tokens: the conversation, without what only generating needs."""

    model: str = ""
    messages: list[Message] = Field(min_length=1)
    system: str | list[TextBlockParam] | None = None
    tools: list[Tool] | None = None
    tool_choice: ToolChoice | None = None


class MessagesRequest(CountTokensRequest, GenerationFields):
    """POST /v1/messages."""

    max_tokens: int = Field(ge=1)
    stop_sequences: list[str] | None = None
    temperature: float | None = Field(None, ge=0, le=1)  # Anthropic's range is narrower than OpenAI's
    top_k: int | None = Field(None, ge=0)
    metadata: dict[str, Any] | None = None
    output_config: OutputConfig | None = None


# Responses.


class TokenCount(WireModel):
    """The body of a count_tokens reply."""

    input_tokens: int


class AnthropicUsage(WireModel):
    """`usage`: `input_tokens` excludes what was read from the cache (clients add the two to size the
    context, so counting cached tokens in both would double them). message_start, sent before the
    prompt is read, has only the two plain counts."""

    input_tokens: int
    cache_read_input_tokens: Annotated[int | None, OMIT_IF_NONE] = None
    cache_creation_input_tokens: Annotated[int | None, OMIT_IF_NONE] = None
    output_tokens: int

    @classmethod
    def of(cls, usage: Usage) -> AnthropicUsage:
        """The counts of a finished (or finishing) reply."""
        return cls(
            input_tokens=usage.prompt_tokens - usage.cached_tokens,
            cache_read_input_tokens=usage.cached_tokens,
            cache_creation_input_tokens=0,
            output_tokens=usage.completion_tokens,
        )


class TextBlock(WireModel):
    """A text content block."""

    type: Literal["text"] = "text"
    text: str


class ThinkingBlock(WireModel):
    """The model's reasoning; no signature, since nothing here signs it."""

    type: Literal["thinking"] = "thinking"
    thinking: str
    signature: str = ""


class ToolUseBlock(WireModel):
    """A tool call."""

    type: Literal["tool_use"] = "tool_use"
    id: str
    name: str
    input: dict[str, Any]


ReplyBlock = TextBlock | ThinkingBlock | ToolUseBlock


class MessageReply(WireModel):
    """The body of a non-streaming reply, and the message of message_start."""

    id: str
    type: Literal["message"] = "message"
    role: Literal["assistant"] = "assistant"
    model: str
    content: list[ReplyBlock]
    stop_reason: str | None
    stop_sequence: str | None
    usage: AnthropicUsage


class MessageStartEvent(WireModel):
    """message_start."""

    type: Literal["message_start"] = "message_start"
    message: MessageReply


class PingEvent(WireModel):
    """ping: Anthropic's own keep-alive."""

    type: Literal["ping"] = "ping"


class ContentBlockStartEvent(WireModel):
    """content_block_start."""

    type: Literal["content_block_start"] = "content_block_start"
    index: int
    content_block: ReplyBlock


class TextBlockDelta(WireModel):
    """More text of a text block."""

    type: Literal["text_delta"] = "text_delta"
    text: str


class ThinkingBlockDelta(WireModel):
    """More reasoning of a thinking block."""

    type: Literal["thinking_delta"] = "thinking_delta"
    thinking: str


class InputJsonBlockDelta(WireModel):
    """A tool call's input JSON (this server sends it whole, in one delta)."""

    type: Literal["input_json_delta"] = "input_json_delta"
    partial_json: str


class ContentBlockDeltaEvent(WireModel):
    """content_block_delta."""

    type: Literal["content_block_delta"] = "content_block_delta"
    index: int
    delta: TextBlockDelta | ThinkingBlockDelta | InputJsonBlockDelta


class ContentBlockStopEvent(WireModel):
    """content_block_stop."""

    type: Literal["content_block_stop"] = "content_block_stop"
    index: int


class StopInfo(WireModel):
    """`delta` of message_delta."""

    stop_reason: str
    stop_sequence: str | None


class MessageDeltaEvent(WireModel):
    """message_delta: how the reply ended, and the usage so far (cumulative)."""

    type: Literal["message_delta"] = "message_delta"
    delta: StopInfo
    usage: AnthropicUsage


class MessageStopEvent(WireModel):
    """message_stop."""

    type: Literal["message_stop"] = "message_stop"


class ErrorDetail(WireModel):
    """`error` of an error event."""

    type: str = "api_error"
    message: str


class ErrorEvent(WireModel):
    """error: the reply was cut or failed after the stream started (the anthropic SDK raises it)."""

    type: Literal["error"] = "error"
    error: ErrorDetail

    @classmethod
    def of(cls, err: ApiError) -> ErrorEvent:
        """The event for the error the same request would have got before any output
        (a 503 is `overloaded_error`, which Claude Code and the SDK retry)."""
        return cls(error=ErrorDetail(type=anthropic_type(err.status), message=err.message))


StreamEvent = (
    MessageStartEvent
    | PingEvent
    | ContentBlockStartEvent
    | ContentBlockDeltaEvent
    | ContentBlockStopEvent
    | MessageDeltaEvent
    | MessageStopEvent
    | ErrorEvent
)
