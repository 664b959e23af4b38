"""Request models for the OpenAI-shaped endpoints.

Unknown fields are tolerated (SDKs add new ones all the time); known fields with the wrong
type are a 400 in OpenAI's error shape.
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field


class _Lenient(BaseModel):
    model_config = ConfigDict(extra="allow")


class FunctionCall(_Lenient):
    """`function` inside an assistant message's tool call."""

    name: str
    arguments: str | dict[str, Any] = ""


class ToolCall(_Lenient):
    """One tool call in an assistant message of the history."""

    id: str | None = None
    type: Literal["function"] = "function"
    function: FunctionCall


class ChatMessage(_Lenient):
    """One message of the chat history."""

    role: Literal["system", "developer", "user", "assistant", "tool", "function"]
    content: str | list[dict[str, Any]] | None = None
    name: str | None = None
    tool_calls: list[ToolCall] | None = None
    tool_call_id: str | None = None
    reasoning_content: str | None = None


class FunctionDefinition(_Lenient):
    """A function the model may call."""

    name: str = Field(min_length=1)
    description: str | None = None
    parameters: dict[str, Any] | None = None
    strict: bool | None = None


class ToolDefinition(_Lenient):
    """`tools[i]` of a chat request."""

    type: Literal["function"] = "function"
    function: FunctionDefinition


class NamedToolChoice(_Lenient):
    """`tool_choice: {"type": "function", "function": {"name": ...}}`."""

    type: Literal["function"] = "function"
    function: dict[str, str]


class JsonSchemaFormat(_Lenient):
    """`response_format.json_schema`."""

    name: str = "response"
    schema_: dict[str, Any] | None = Field(None, alias="schema")
    strict: bool | None = None


class ResponseFormat(_Lenient):
    """`response_format` of a chat request."""

    type: Literal["text", "json_object", "json_schema"]
    json_schema: JsonSchemaFormat | None = None


class StreamOptions(_Lenient):
    """`stream_options`."""

    include_usage: bool = False


class SamplingFields(_Lenient):
    """Sampling knobs shared by chat and text completions."""

    temperature: float | None = Field(None, ge=0, le=2)
    top_p: float | None = Field(None, ge=0, le=1)
    top_k: int | None = Field(None, ge=0)
    min_p: float | None = Field(None, ge=0, le=1)
    seed: int | None = None
    presence_penalty: float | None = Field(None, ge=-2, le=2)
    frequency_penalty: float | None = Field(None, ge=-2, le=2)
    repeat_penalty: float | None = Field(None, gt=0)
    logit_bias: dict[str, float] | None = None
    stop: str | list[str] | None = None
    n: int = Field(1, ge=1, le=1)
    stream: bool = False
    stream_options: StreamOptions | None = None
    user: str | None = None
    ignore_eos: bool = False  # llama-server / vLLM extension: generate exactly max_tokens (benchmarks)


class ChatCompletionRequest(SamplingFields):
    """POST /v1/chat/completions."""

    model: str = ""
    messages: list[ChatMessage] = Field(min_length=1)
    max_tokens: int | None = Field(None, ge=1)
    max_completion_tokens: int | None = Field(None, ge=1)
    tools: list[ToolDefinition] | None = None
    tool_choice: Literal["none", "auto", "required"] | NamedToolChoice | None = None
    parallel_tool_calls: bool | None = None
    response_format: ResponseFormat | None = None
    logprobs: bool = False
    top_logprobs: int | None = Field(None, ge=0, le=20)


class CompletionRequest(SamplingFields):
    """POST /v1/completions."""

    model: str = ""
    prompt: str | list[str] | list[int]
    max_tokens: int | None = Field(16, ge=1)
    echo: bool = False
    logprobs: int | None = Field(None, ge=0, le=20)
    suffix: str | None = None


class EmbeddingRequest(_Lenient):
    """POST /v1/embeddings."""

    model: str = ""
    input: str | list[str] | list[int] | list[list[int]]
    encoding_format: Literal["float", "base64"] = "float"
    dimensions: int | None = None
