"""Request model for POST /v1/responses (the OpenAI Responses API that Codex CLI uses)."""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field


class _Lenient(BaseModel):
    model_config = ConfigDict(extra="allow")


class FunctionTool(_Lenient):
    """`tools[i]`: function tools are served; built-in tools (web_search...) are rejected with a 400."""

    type: str
    name: str | None = None
    description: str | None = None
    parameters: dict[str, Any] | None = None
    strict: bool | None = None


class TextFormat(_Lenient):
    """`text.format`: text, json_object or json_schema."""

    type: Literal["text", "json_object", "json_schema"] = "text"
    name: str | None = None
    schema_: dict[str, Any] | None = Field(None, alias="schema")
    strict: bool | None = None


class TextConfig(_Lenient):
    """`text`."""

    format: TextFormat | None = None


class ResponsesRequest(_Lenient):
    """POST /v1/responses."""

    model: str = ""
    input: str | list[dict[str, Any]]
    instructions: str | None = None
    tools: list[FunctionTool] | None = None
    tool_choice: str | dict[str, Any] | None = None
    max_output_tokens: int | None = Field(None, ge=1)
    temperature: float | None = Field(None, ge=0, le=2)
    top_p: float | None = Field(None, ge=0, le=1)
    stream: bool = False
    text: TextConfig | None = None
    parallel_tool_calls: bool | None = None
    previous_response_id: str | None = None
    metadata: dict[str, Any] | None = None
    store: bool | None = None
