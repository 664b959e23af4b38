"""Request and response models for the OpenAI-shaped endpoints (chat, completions, models, embeddings).

Unknown request fields are tolerated (SDKs add new ones all the time); known fields with the
wrong type are a 400 in OpenAI's error shape. See schemas_common for which response keys are
sent as null and which are left out.
"""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import Field

from launcher.engines.base import TokenLogprob
from launcher.server.core.generation import Usage
from launcher.server.errors import ApiError, openai_type
from launcher.server.schemas_common import OMIT_IF_NONE, GenerationFields, Lenient, WireModel


class FunctionCall(Lenient):
    """`function` inside an assistant message's tool call."""

    name: str
    arguments: str | dict[str, Any] = ""


class ToolCall(Lenient):
    """One tool call in an assistant message of the history."""

    id: str | None = None
    type: Literal["function"] = "function"
    function: FunctionCall


class ChatMessage(Lenient):
    """One message of the chat history."""

    role: Literal["system", "developer", "user", "assistant", "tool", "function"]
    content: str | list[dict[str, Any]] | None = None
    name: str | None = None
    tool_calls: list[ToolCall] | None = None
    tool_call_id: str | None = None
    reasoning_content: str | None = None


class FunctionDefinition(Lenient):
    """A function the model may call."""

    name: str = Field(min_length=1)
    description: str | None = None
    parameters: dict[str, Any] | None = None
    strict: bool | None = None


class ToolDefinition(Lenient):
    """`tools[i]` of a chat request."""

    type: Literal["function"] = "function"
    function: FunctionDefinition


class NamedToolChoice(Lenient):
    """`tool_choice: {"type": "function", "function": {"name": ...}}`."""

    type: Literal["function"] = "function"
    function: dict[str, str]


class JsonSchemaFormat(Lenient):
    """`response_format.json_schema`."""

    name: str = "response"
    schema_: dict[str, Any] | None = Field(None, alias="schema")
    strict: bool | None = None


class ResponseFormat(Lenient):
    """`response_format` of a chat request."""

    type: Literal["text", "json_object", "json_schema"]
    json_schema: JsonSchemaFormat | None = None


class StreamOptions(Lenient):
    """`stream_options`."""

    include_usage: bool = False


# The most choices one request may ask for (`n`). OpenAI allows 128, but here each choice is a whole
# generation on the local machine: it holds one of the engine's parallel sequences (4 by default) or
# a place in its wait queue (64 by default), so 128 would fill that queue for every other client and
# keep a 2-core machine busy for minutes. 16 covers what clients ask n for (a few candidates to pick
# from, self-consistency votes); more is a clear 400 rather than a long wait or a 429.
MAX_CHOICES = 16


class SamplingFields(GenerationFields):
    """Sampling knobs shared by chat and text completions."""

    top_k: int | None = Field(None, ge=0)
    min_p: float | None = Field(None, ge=0, le=1)
    seed: int | None = None
    presence_penalty: float | None = Field(None, ge=-2, le=2)
    frequency_penalty: float | None = Field(None, ge=-2, le=2)
    repeat_penalty: float | None = Field(None, gt=0)
    logit_bias: dict[str, float] | None = None
    stop: str | list[str] | None = None
    n: int = Field(1, ge=1, le=MAX_CHOICES)
    stream_options: StreamOptions | None = None
    user: str | None = None
    ignore_eos: bool = False  # llama-server / vLLM extension: generate exactly max_tokens (benchmarks)


class ChatCompletionRequest(SamplingFields):
    """POST /v1/chat/completions."""

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

    prompt: str | list[str] | list[int]
    max_tokens: int | None = Field(16, ge=1)
    echo: bool = False
    logprobs: int | None = Field(None, ge=0, le=20)
    suffix: str | None = None


class EmbeddingRequest(Lenient):
    """POST /v1/embeddings."""

    model: str = ""
    input: str | list[str] | list[int] | list[list[int]]
    encoding_format: Literal["float", "base64"] = "float"
    dimensions: int | None = None


# Responses.

OpenAIFinish = Literal["stop", "length", "tool_calls"]


def openai_finish(reason: str) -> OpenAIFinish:
    """OpenAI's finish reason of a reply that ended on its own.

    A cut or failed reply has none: it ends with an error (`generation.cut_short`), never with a
    finish an agent would take for a whole answer; asking for one here is a bug.
    """
    if reason in ("cancelled", "error"):
        raise ValueError(f"a {reason} reply has no finish_reason; it ends with an error")
    if reason == "length":
        return "length"
    return "tool_calls" if reason == "tool_calls" else "stop"


class PromptTokensDetails(WireModel):
    """`usage.prompt_tokens_details`."""

    cached_tokens: int


class UsageInfo(WireModel):
    """`usage` of chat and text completions."""

    prompt_tokens: int
    completion_tokens: int
    total_tokens: int
    prompt_tokens_details: PromptTokensDetails

    @classmethod
    def of(cls, usage: Usage) -> UsageInfo:
        """OpenAI's usage for the server's token counts."""
        return cls(
            prompt_tokens=usage.prompt_tokens,
            completion_tokens=usage.completion_tokens,
            total_tokens=usage.total_tokens,
            prompt_tokens_details=PromptTokensDetails(cached_tokens=usage.cached_tokens),
        )


class TopLogprob(WireModel):
    """One alternative in `top_logprobs`."""

    token: str
    logprob: float
    bytes: list[int]


class TokenLogprobInfo(WireModel):
    """One entry of `logprobs.content`."""

    token: str
    logprob: float
    bytes: list[int]
    top_logprobs: list[TopLogprob]

    @classmethod
    def of(cls, item: TokenLogprob) -> TokenLogprobInfo:
        """The entry for one generated token."""
        return cls(
            token=item.text,
            logprob=item.logprob,
            bytes=list(item.text.encode()),
            top_logprobs=[TopLogprob(token=text, logprob=value, bytes=list(text.encode())) for text, value in item.top],
        )


class ChoiceLogprobs(WireModel):
    """`choices[i].logprobs` of a chat reply."""

    content: list[TokenLogprobInfo]

    @classmethod
    def of(cls, items: tuple[TokenLogprob, ...] | list[TokenLogprob]) -> ChoiceLogprobs:
        """The logprobs of these tokens."""
        return cls(content=[TokenLogprobInfo.of(item) for item in items])


class FunctionCallInfo(WireModel):
    """`function` of a tool call in a reply; a stream sends the name once, then the arguments."""

    name: Annotated[str | None, OMIT_IF_NONE] = None
    arguments: str


class ToolCallInfo(WireModel):
    """A tool call in a reply; in a stream, `index` says which call a delta continues."""

    index: Annotated[int | None, OMIT_IF_NONE] = None
    id: Annotated[str | None, OMIT_IF_NONE] = None
    type: Annotated[Literal["function"] | None, OMIT_IF_NONE] = None
    function: FunctionCallInfo


class AssistantMessage(WireModel):
    """`choices[i].message`: `content` is null when the reply is only tool calls."""

    role: Literal["assistant"] = "assistant"
    content: str | None
    reasoning_content: Annotated[str | None, OMIT_IF_NONE] = None
    tool_calls: Annotated[list[ToolCallInfo] | None, OMIT_IF_NONE] = None


class ChatChoice(WireModel):
    """`choices[i]` of a chat completion (one per choice the request asked for with `n`)."""

    index: int = 0
    message: AssistantMessage
    logprobs: ChoiceLogprobs | None = None
    finish_reason: OpenAIFinish


class ChatCompletion(WireModel):
    """The body of a non-streaming chat completion."""

    id: str
    object: Literal["chat.completion"] = "chat.completion"
    created: int
    model: str
    system_fingerprint: None = None
    choices: list[ChatChoice]
    usage: UsageInfo


class ChatDelta(WireModel):
    """`choices[i].delta` of a stream chunk: only what this chunk adds."""

    role: Annotated[Literal["assistant"] | None, OMIT_IF_NONE] = None
    content: Annotated[str | None, OMIT_IF_NONE] = None
    reasoning_content: Annotated[str | None, OMIT_IF_NONE] = None
    tool_calls: Annotated[list[ToolCallInfo] | None, OMIT_IF_NONE] = None


class ChunkChoice(WireModel):
    """The choice a stream chunk continues (`index`: which of the request's `n`)."""

    index: int = 0
    delta: ChatDelta
    logprobs: ChoiceLogprobs | None = None
    finish_reason: OpenAIFinish | None = None


class ChatCompletionChunk(WireModel):
    """One chunk of a streamed chat completion. `usage` is sent (null until the last chunk) only
    when the client asked for it with stream_options.include_usage; see `wire_chunk`."""

    id: str
    object: Literal["chat.completion.chunk"] = "chat.completion.chunk"
    created: int
    model: str
    system_fingerprint: None = None
    choices: list[ChunkChoice]
    usage: UsageInfo | None = None

    def wire_chunk(self, include_usage: bool) -> dict[str, Any]:
        """The chunk's JSON, with or without the `usage` key."""
        return self.model_dump(exclude=None if include_usage else {"usage"})


class CompletionChoice(WireModel):
    """`choices[i]` of a text completion, or the choice a stream chunk continues."""

    index: int = 0
    text: str
    logprobs: None = None
    finish_reason: OpenAIFinish | None = None


class Completion(WireModel):
    """A text completion, whole or one stream chunk (the last of which may carry only `usage`)."""

    id: str
    object: Literal["text_completion"] = "text_completion"
    created: int
    model: str
    choices: list[CompletionChoice]
    usage: Annotated[UsageInfo | None, OMIT_IF_NONE] = None


class StreamErrorDetail(WireModel):
    """`error` of an error event in a stream."""

    message: str
    type: str = "server_error"
    param: None = None
    code: str | None = None


class StreamError(WireModel):
    """The event a stream sends when its reply is cut or fails after the headers went out
    (the openai SDK raises it as an APIError)."""

    error: StreamErrorDetail

    @classmethod
    def of(cls, err: ApiError) -> StreamError:
        """The event for the error the same request would have got before any output."""
        return cls(error=StreamErrorDetail(message=err.message, type=openai_type(err.status), code=err.code))


class ModelCard(WireModel):
    """A /v1/models entry; an alias names the model it stands for in `alias_for`.

    A model the server can load but has not loaded yet says `loaded: false` and leaves out what
    only a load tells (context, engine, quant, ...).
    """

    id: str
    object: Literal["model"] = "model"
    created: int = 0
    owned_by: str = "launcher"
    loaded: bool = True
    context_length: Annotated[int | None, OMIT_IF_NONE] = None
    max_model_len: Annotated[int | None, OMIT_IF_NONE] = None
    max_output_tokens: int | None = None
    engine: Annotated[str | None, OMIT_IF_NONE] = None
    engine_reason: Annotated[str | None, OMIT_IF_NONE] = None
    engine_version: Annotated[str | None, OMIT_IF_NONE] = None
    quant: str | None = None
    architecture: Annotated[str | None, OMIT_IF_NONE] = None
    format: Annotated[str | None, OMIT_IF_NONE] = None
    parallel: Annotated[int | None, OMIT_IF_NONE] = None
    can_embed: Annotated[bool | None, OMIT_IF_NONE] = None
    memory_bytes: Annotated[int | None, OMIT_IF_NONE] = None  # the advisor's estimate of what it takes
    alias_for: Annotated[str | None, OMIT_IF_NONE] = None
    remote: Annotated[str | None, OMIT_IF_NONE] = None  # the registered remote that serves it (`launcher remote`)


class ModelList(WireModel):
    """GET /v1/models."""

    object: Literal["list"] = "list"
    data: list[ModelCard]


class Embedding(WireModel):
    """One vector of an embeddings reply."""

    object: Literal["embedding"] = "embedding"
    index: int
    embedding: list[float]


class EmbeddingUsage(WireModel):
    """`usage` of an embeddings reply."""

    prompt_tokens: int
    total_tokens: int


class EmbeddingList(WireModel):
    """POST /v1/embeddings."""

    object: Literal["list"] = "list"
    data: list[Embedding]
    model: str
    usage: EmbeddingUsage
