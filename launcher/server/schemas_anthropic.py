"""Request models for the Anthropic Messages endpoints (Claude Code and the anthropic SDK)."""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field


class _Lenient(BaseModel):
    model_config = ConfigDict(extra="allow")


class ContentBlock(_Lenient):
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


class Message(_Lenient):
    """One turn of the conversation; `system` is a mid-conversation system message (Claude Code sends them)."""

    role: Literal["user", "assistant", "system"]
    content: str | list[ContentBlock]


class Tool(_Lenient):
    """A tool: client tools have an input_schema; server tools (web_search...) only a `type` and are skipped."""

    name: str = Field(min_length=1)
    description: str | None = None
    input_schema: dict[str, Any] | None = None
    type: str | None = None
    defer_loading: bool | None = None


class ToolChoice(_Lenient):
    """`tool_choice`: auto, any, tool (with name), none; a newer type is read as auto."""

    type: str
    name: str | None = None
    disable_parallel_tool_use: bool | None = None


class TextBlockParam(_Lenient):
    """A system prompt block (text; other kinds, such as tool_addition, are skipped)."""

    type: str = "text"
    text: str = ""


class OutputFormat(_Lenient):
    """`output_config.format`: structured output as a JSON schema."""

    type: str
    schema_: dict[str, Any] | None = Field(None, alias="schema")


class OutputConfig(_Lenient):
    """`output_config` (effort and the like are accepted and ignored)."""

    format: OutputFormat | None = None


class MessagesRequest(_Lenient):
    """POST /v1/messages."""

    model: str = ""
    messages: list[Message] = Field(min_length=1)
    max_tokens: int = Field(ge=1)
    system: str | list[TextBlockParam] | None = None
    stop_sequences: list[str] | None = None
    stream: bool = False
    temperature: float | None = Field(None, ge=0, le=1)
    top_p: float | None = Field(None, ge=0, le=1)
    top_k: int | None = Field(None, ge=0)
    tools: list[Tool] | None = None
    tool_choice: ToolChoice | None = None
    metadata: dict[str, Any] | None = None
    output_config: OutputConfig | None = None


class CountTokensRequest(_Lenient):
    """POST /v1/messages/count_tokens."""

    model: str = ""
    messages: list[Message] = Field(min_length=1)
    system: str | list[TextBlockParam] | None = None
    tools: list[Tool] | None = None
    tool_choice: ToolChoice | None = None
