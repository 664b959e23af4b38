"""Request and response models for POST /v1/responses (the OpenAI Responses API that Codex CLI uses)."""

from __future__ import annotations

from typing import Any, Literal

from pydantic import Field

from launcher.server.core.generation import Usage
from launcher.server.errors import ApiError
from launcher.server.schemas_common import GenerationFields, Lenient, WireModel


class FunctionTool(Lenient):
    """`tools[i]`: function tools are served; built-in tools (web_search...) are rejected with a 400."""

    type: str
    name: str | None = None
    description: str | None = None
    parameters: dict[str, Any] | None = None
    strict: bool | None = None


class TextFormat(Lenient):
    """`text.format`: text, json_object or json_schema."""

    type: Literal["text", "json_object", "json_schema"] = "text"
    name: str | None = None
    schema_: dict[str, Any] | None = Field(None, alias="schema")
    strict: bool | None = None


class TextConfig(Lenient):
    """`text`."""

    format: TextFormat | None = None


class ResponsesRequest(GenerationFields):
    """POST /v1/responses."""

    input: str | list[dict[str, Any]]
    instructions: str | None = None
    tools: list[FunctionTool] | None = None
    tool_choice: str | dict[str, Any] | None = None
    max_output_tokens: int | None = Field(None, ge=1)
    text: TextConfig | None = None
    parallel_tool_calls: bool | None = None
    previous_response_id: str | None = None
    metadata: dict[str, Any] | None = None
    store: bool | None = None


# Responses.

ItemStatus = Literal["in_progress", "completed", "incomplete"]


class InputTokensDetails(WireModel):
    """`usage.input_tokens_details`."""

    cached_tokens: int


class OutputTokensDetails(WireModel):
    """`usage.output_tokens_details` (reasoning is not counted apart)."""

    reasoning_tokens: int = 0


class ResponseUsage(WireModel):
    """`usage` of a finished response."""

    input_tokens: int
    input_tokens_details: InputTokensDetails
    output_tokens: int
    output_tokens_details: OutputTokensDetails
    total_tokens: int

    @classmethod
    def of(cls, usage: Usage) -> ResponseUsage:
        """The Responses usage for the server's token counts."""
        return cls(
            input_tokens=usage.prompt_tokens,
            input_tokens_details=InputTokensDetails(cached_tokens=usage.cached_tokens),
            output_tokens=usage.completion_tokens,
            output_tokens_details=OutputTokensDetails(),
            total_tokens=usage.total_tokens,
        )


class OutputText(WireModel):
    """An output_text content part."""

    type: Literal["output_text"] = "output_text"
    text: str
    annotations: list[Any] = Field(default_factory=list)
    logprobs: list[Any] = Field(default_factory=list)


class MessageItem(WireModel):
    """An assistant message output item; its text part comes when it is completed."""

    id: str
    type: Literal["message"] = "message"
    status: ItemStatus
    role: Literal["assistant"] = "assistant"
    content: list[OutputText]

    @classmethod
    def of(cls, item_id: str, text: str, status: ItemStatus) -> MessageItem:
        """The item with `text` (completed, or cut: incomplete), or empty while it is in progress."""
        return cls(id=item_id, status=status, content=[OutputText(text=text)] if status != "in_progress" else [])


class FunctionCallItem(WireModel):
    """A function_call output item."""

    id: str
    type: Literal["function_call"] = "function_call"
    status: ItemStatus
    call_id: str
    name: str
    arguments: str


OutputItem = MessageItem | FunctionCallItem


class ResponseError(WireModel):
    """`error` of a failed response."""

    code: str = "server_error"
    message: str

    @classmethod
    def of(cls, err: ApiError) -> ResponseError:
        """The error the same request would have got before any output. Codex retries a failed
        response unless its code says retrying cannot help, and only a refused request is that; a
        prompt over the context keeps its own code, the one Codex answers by compacting the conversation."""
        if err.code == "context_length_exceeded":
            return cls(code=err.code, message=err.message)
        return cls(code="invalid_prompt" if err.status < 500 else "server_error", message=err.message)


class IncompleteDetails(WireModel):
    """Why a response is incomplete."""

    reason: Literal["max_output_tokens"] = "max_output_tokens"


class TextSettings(WireModel):
    """`text`: the reply format (always plain text in the echo)."""

    format: dict[str, Any] = Field(default_factory=lambda: {"type": "text"})


class ResponseObject(WireModel):
    """The response, in the body and in the lifecycle events; it echoes the request's settings."""

    id: str
    object: Literal["response"] = "response"
    created_at: int
    status: Literal["in_progress", "completed", "incomplete", "failed"] = "in_progress"
    model: str
    output: list[OutputItem] = Field(default_factory=list)
    error: ResponseError | None = None
    incomplete_details: IncompleteDetails | None = None
    instructions: str | None
    metadata: dict[str, Any]
    parallel_tool_calls: bool = False
    temperature: float | None
    top_p: float | None
    tool_choice: str | dict[str, Any]
    tools: list[dict[str, Any]]
    max_output_tokens: int | None
    text: TextSettings = Field(default_factory=TextSettings)
    truncation: Literal["disabled"] = "disabled"
    usage: ResponseUsage | None = None


class ResponseEvent(WireModel):
    """A stream event; the route numbers them in order (`sequence_number`)."""

    type: str
    sequence_number: int = 0


class LifecycleEvent(ResponseEvent):
    """response.created, .in_progress, .completed, .incomplete, .failed."""

    response: ResponseObject


class OutputItemEvent(ResponseEvent):
    """response.output_item.added and .done."""

    output_index: int
    item: OutputItem


class _ItemEvent(ResponseEvent):
    """An event about one output item."""

    item_id: str
    output_index: int


class _ContentEvent(_ItemEvent):
    """An event about the (one) content part of a message item."""

    content_index: int = 0


class ContentPartEvent(_ContentEvent):
    """response.content_part.added and .done."""

    part: OutputText


class OutputTextDeltaEvent(_ContentEvent):
    """response.output_text.delta."""

    type: str = "response.output_text.delta"
    delta: str
    logprobs: list[Any] = Field(default_factory=list)


class OutputTextDoneEvent(_ContentEvent):
    """response.output_text.done."""

    type: str = "response.output_text.done"
    text: str
    logprobs: list[Any] = Field(default_factory=list)


class ArgumentsDeltaEvent(_ItemEvent):
    """response.function_call_arguments.delta (this server sends the arguments whole)."""

    type: str = "response.function_call_arguments.delta"
    delta: str


class ArgumentsDoneEvent(_ItemEvent):
    """response.function_call_arguments.done."""

    type: str = "response.function_call_arguments.done"
    arguments: str
    name: str
