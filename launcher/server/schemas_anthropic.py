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
    """One turn of the conversation."""

    role: Literal["user", "assistant"]
    content: str | list[ContentBlock]


class Tool(_Lenient):
    """A client tool (server tools like web_search have a `type` and no schema; they are rejected)."""

    name: str = Field(min_length=1)
    description: str | None = None
    input_schema: dict[str, Any] | None = None
    type: str | None = None


class ToolChoice(_Lenient):
    """`tool_choice`: auto, any, tool (with name), none."""

    type: Literal["auto", "any", "tool", "none"]
    name: str | None = None
    disable_parallel_tool_use: bool | None = None


class TextBlockParam(_Lenient):
    """A system prompt block."""

    type: Literal["text"] = "text"
    text: str


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


class CountTokensRequest(_Lenient):
    """POST /v1/messages/count_tokens."""

    model: str = ""
    messages: list[Message] = Field(min_length=1)
    system: str | list[TextBlockParam] | None = None
    tools: list[Tool] | None = None
    tool_choice: ToolChoice | None = None
