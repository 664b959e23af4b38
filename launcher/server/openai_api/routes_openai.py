"""OpenAI-shaped routes: /v1/models, /v1/chat/completions, /v1/completions, /v1/embeddings."""

from __future__ import annotations

import time
from collections.abc import AsyncIterator
from dataclasses import replace
from typing import Any

from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

from launcher.engines.base import Constraint
from launcher.server.core.chat import (
    ChatOptions,
    ChatStream,
    ReasoningDelta,
    TextDelta,
    ToolCallDelta,
    normalize_history,
    start_chat,
)
from launcher.server.core.choices import Choices, choice_seed, total_usage
from launcher.server.core.generation import (
    Chunk,
    Finish,
    Generation,
    GenerationSettings,
    cut_short,
    start_generation,
    tokenize_prompt,
)
from launcher.server.core.result import ChatResult, choice_results
from launcher.server.core.toolcalls import ParsedToolCall
from launcher.server.errors import bad_request
from launcher.server.openai_api.schemas_openai import (
    AssistantMessage,
    ChatChoice,
    ChatCompletion,
    ChatCompletionChunk,
    ChatCompletionRequest,
    ChatDelta,
    ChoiceLogprobs,
    ChunkChoice,
    Completion,
    CompletionChoice,
    CompletionRequest,
    Embedding,
    EmbeddingList,
    EmbeddingRequest,
    EmbeddingUsage,
    FunctionCallInfo,
    NamedToolChoice,
    OpenAIFinish,
    ResponseFormat,
    StreamError,
    ToolCallInfo,
    UsageInfo,
    openai_finish,
)
from launcher.server.pool.model_slot import ModelSlot
from launcher.server.routes_common import new_id, parse_body, start_chat_request, state_of, stops_from
from launcher.server.sse import COMMENT_KEEPALIVE, DONE, EventStream, KeepAlive, data_event, with_keepalives


def response_format_constraint(fmt: ResponseFormat | None) -> Constraint | None:
    """`response_format` as a grammar constraint."""
    if fmt is None or fmt.type == "text":
        return None
    if fmt.type == "json_object":
        return Constraint(kind="json_object")
    if fmt.json_schema is None or fmt.json_schema.schema_ is None:
        raise bad_request("response_format json_schema needs json_schema.schema.", param="response_format")
    return Constraint(kind="json_schema", schema=fmt.json_schema.schema_)


def chat_options(body: ChatCompletionRequest) -> ChatOptions:
    """The internal chat request for a chat-completions body."""
    messages = normalize_history([m.model_dump(exclude_none=True) for m in body.messages])
    tools = [t.model_dump(exclude_none=True) for t in body.tools or []]
    choice: str = "auto" if tools else "none"
    if isinstance(body.tool_choice, NamedToolChoice):
        name = body.tool_choice.function.get("name")
        if not name:
            raise bad_request("tool_choice.function.name is required.", param="tool_choice")
        choice = name
    elif body.tool_choice is not None:
        choice = body.tool_choice
    settings = GenerationSettings(
        max_tokens=body.max_completion_tokens or body.max_tokens,
        sampling=body.sampling(),
        constraint=response_format_constraint(body.response_format),
        stops=stops_from(body.stop),
        logprobs=(body.top_logprobs or 0) if body.logprobs else None,
        ignore_eos=body.ignore_eos,
        speculative=body.speculative,
    )
    return ChatOptions(
        messages=messages,
        tools=tools,
        tool_choice=choice,
        settings=settings,
        parallel_tool_calls=body.parallel_tool_calls is not False,
    )


def _tool_call(call: ParsedToolCall) -> ToolCallInfo:
    return ToolCallInfo(
        id=call.id, type="function", function=FunctionCallInfo(name=call.name, arguments=call.arguments)
    )


async def chat_completions(request: Request) -> Any:
    """POST /v1/chat/completions (streaming and not; `n` choices, see choices.py)."""
    started = await start_chat_request(request, ChatCompletionRequest, chat_options, "chatcmpl-")
    body, model_id, completion_id = started.body, started.served_model, started.reply_id
    created = int(time.time())

    async def start(index: int) -> ChatStream:
        return await _start_choice(request, body, completion_id, index)

    choices = Choices(started.run, body.n, start)
    if body.stream:
        include_usage = bool(body.stream_options and body.stream_options.include_usage)
        chunks = _ChatChunks(completion_id, created, model_id, include_usage)
        keepalive_s = state_of(request).keepalive_s
        return EventStream(_chat_stream(choices, body.n, chunks, body.logprobs, keepalive_s), choices.aclose)
    results = await choice_results(request, choices, body.n)
    completion = ChatCompletion(
        id=completion_id,
        created=created,
        model=model_id,
        choices=[_chat_choice(index, result, body.logprobs) for index, result in enumerate(results)],
        usage=UsageInfo.of(total_usage(result.finish for result in results)),
    )
    return JSONResponse(completion.wire())


async def _start_choice(request: Request, body: ChatCompletionRequest, reply_id: str, index: int) -> ChatStream:
    """Start choice `index` (>= 1) of a chat request whose choice 0 runs (start_chat_request started
    it, so the model is known and loaded), with the choice's own seed."""
    options = chat_options(body)
    options.settings.sampling = replace(options.settings.sampling, seed=choice_seed(body.seed, index))
    options.settings.request_id = reply_id
    state = state_of(request)
    remote = await state.remote_entry(body.model)
    if remote is not None:
        return await state.remotes.start_chat(remote, options, state.metrics)
    async with state.using(body.model, body.ttl) as slot:
        return await start_chat(slot, options)


def _chat_choice(index: int, result: ChatResult, want_logprobs: bool) -> ChatChoice:
    calls = [_tool_call(call) for call in result.tool_calls]
    message = AssistantMessage(
        content=result.text if (result.text or not calls) else None,
        reasoning_content=result.reasoning or None,
        tool_calls=calls or None,
    )
    return ChatChoice(
        index=index,
        message=message,
        logprobs=ChoiceLogprobs.of(result.logprobs) if want_logprobs else None,
        finish_reason=openai_finish(result.finish.reason),
    )


class _ChatChunks:
    """The chunks of one streamed chat completion (same id, time and model in each)."""

    def __init__(self, completion_id: str, created: int, model_id: str, include_usage: bool) -> None:
        self.completion_id, self.created, self.model_id = completion_id, created, model_id
        self.include_usage = include_usage

    def event(self, choices: list[ChunkChoice], usage: UsageInfo | None = None) -> bytes:
        chunk = ChatCompletionChunk(
            id=self.completion_id, created=self.created, model=self.model_id, choices=choices, usage=usage
        )
        return data_event(chunk.wire_chunk(self.include_usage))

    def delta(
        self,
        index: int,
        delta: ChatDelta,
        finish: OpenAIFinish | None = None,
        logprobs: ChoiceLogprobs | None = None,
    ) -> bytes:
        return self.event([ChunkChoice(index=index, delta=delta, logprobs=logprobs, finish_reason=finish)])


async def _chat_stream(
    choices: Choices[ChatStream], count: int, chunks: _ChatChunks, want_logprobs: bool, keepalive_s: float
) -> AsyncIterator[bytes]:
    for index in range(count):
        yield chunks.delta(index, ChatDelta(role="assistant", content=""))
    finishes: dict[int, Finish] = {}
    async for item in with_keepalives(choices.events(), keepalive_s):
        if isinstance(item, KeepAlive):
            yield COMMENT_KEEPALIVE
            continue
        index, event = item
        if isinstance(event, TextDelta):
            if event.text or event.logprobs:
                logprobs = ChoiceLogprobs.of(event.logprobs) if want_logprobs else None
                yield chunks.delta(index, ChatDelta(content=event.text), logprobs=logprobs)
        elif isinstance(event, ReasoningDelta):
            yield chunks.delta(index, ChatDelta(reasoning_content=event.text))
        elif isinstance(event, ToolCallDelta):
            # The name first, then the arguments, as the hosted API streams them (clients join deltas).
            named = ToolCallInfo(
                index=event.index,
                id=event.call.id,
                type="function",
                function=FunctionCallInfo(name=event.call.name, arguments=""),
            )
            arguments = ToolCallInfo(index=event.index, function=FunctionCallInfo(arguments=event.call.arguments))
            yield chunks.delta(index, ChatDelta(tool_calls=[named]))
            yield chunks.delta(index, ChatDelta(tool_calls=[arguments]))
        else:
            finishes[index] = event
            cut = cut_short(event)
            if cut is not None:
                # No finish chunk: every finish_reason says the reply is whole (or "length": ask to
                # go on), so a reply cut by a stopping server or a failed engine ends with the error
                # event the openai SDK raises, and a parser that skips it still sees no finish. The
                # choices' events end here (choices.py).
                yield data_event(StreamError.of(cut))
            else:
                yield chunks.delta(index, ChatDelta(), openai_finish(event.reason))
            if chunks.include_usage and (cut is not None or len(finishes) == count):
                yield chunks.event([], UsageInfo.of(total_usage(finishes[i] for i in sorted(finishes))))
    yield DONE


async def completions(request: Request) -> Any:
    """POST /v1/completions: a raw prompt, no chat template."""
    state = state_of(request)
    body = await parse_body(request, CompletionRequest)
    async with state.using(body.model, body.ttl) as slot:
        return await _complete(request, slot, body)


async def _complete(request: Request, slot: ModelSlot, body: CompletionRequest) -> Any:
    model, model_id = slot.model, slot.id
    keepalive_s = state_of(request).keepalive_s
    if isinstance(body.prompt, list) and body.prompt and isinstance(body.prompt[0], str):
        if len(body.prompt) != 1:
            raise bad_request("Only one prompt per request is supported.", param="prompt")
        prompt: str | list[int] = str(body.prompt[0])
    else:
        prompt = body.prompt if isinstance(body.prompt, str) else [int(t) for t in body.prompt]
    tokens = await tokenize_prompt(model, prompt)
    completion_id = new_id("cmpl-")
    settings = GenerationSettings(
        max_tokens=body.max_tokens,
        sampling=body.sampling(),
        stops=stops_from(body.stop),
        logprobs=body.logprobs,
        ignore_eos=body.ignore_eos,
        speculative=body.speculative,
        request_id=completion_id,
    )

    async def start(index: int) -> Generation:
        seeded = replace(settings, sampling=replace(settings.sampling, seed=choice_seed(body.seed, index)))
        return await start_generation(
            model, slot.metrics, tokens, seeded, output_cap=slot.config.max_output_tokens, live=slot.live
        )

    # The same n choices as chat completions (choices.py): the later ones start once the first has read the
    # prompt, and run on the model this request holds (its running generations keep it loaded).
    choices = Choices(await start(0), body.n, start)
    created = int(time.time())
    echo = (prompt if isinstance(prompt, str) else model.detokenize(tokens)) if body.echo else ""

    def payload(choices: list[CompletionChoice], usage: UsageInfo | None = None) -> Completion:
        return Completion(id=completion_id, created=created, model=model_id, choices=choices, usage=usage)

    if body.stream:
        include_usage = bool(body.stream_options and body.stream_options.include_usage)

        async def stream() -> AsyncIterator[bytes]:
            if echo:
                for index in range(body.n):
                    yield data_event(payload([CompletionChoice(index=index, text=echo)]))
            finishes: dict[int, Finish] = {}
            async for item in with_keepalives(choices.events(), keepalive_s):
                if isinstance(item, KeepAlive):
                    yield COMMENT_KEEPALIVE
                    continue
                index, event = item
                if isinstance(event, Chunk):
                    if event.text:
                        yield data_event(payload([CompletionChoice(index=index, text=event.text)]))
                elif isinstance(event, Finish):
                    finishes[index] = event
                    cut = cut_short(event)
                    if cut is not None:  # an error and no finish, as a chat stream (_chat_stream)
                        yield data_event(StreamError.of(cut))
                    else:
                        finish = openai_finish(event.reason)
                        yield data_event(payload([CompletionChoice(index=index, text="", finish_reason=finish)]))
                    if include_usage and (cut is not None or len(finishes) == body.n):
                        usage = total_usage(finishes[i] for i in sorted(finishes))
                        yield data_event(payload([], UsageInfo.of(usage)))
            yield DONE

        return EventStream(stream(), choices.aclose)
    results = await choice_results(request, choices, body.n)
    completion_choices = [
        CompletionChoice(index=index, text=echo + result.text, finish_reason=openai_finish(result.finish.reason))
        for index, result in enumerate(results)
    ]
    usage = total_usage(result.finish for result in results)
    return JSONResponse(payload(completion_choices, UsageInfo.of(usage)).wire())


async def embeddings(request: Request) -> Response:
    """POST /v1/embeddings (a clear 400 when the model cannot embed)."""
    state = state_of(request)
    body = await parse_body(request, EmbeddingRequest)
    async with state.using(body.model) as slot:
        return await _embed(slot, body)


async def _embed(slot: ModelSlot, body: EmbeddingRequest) -> Response:
    model, model_id = slot.model, slot.id
    if not model.info.can_embed:
        raise bad_request(
            f"The model {model_id!r} cannot make embeddings; serve an embedding model.",
            param="model",
            code="model_not_embedding",
        )
    if body.encoding_format != "float":
        raise bad_request("Only encoding_format 'float' is supported.", param="encoding_format")
    raw = body.input
    if isinstance(raw, str):
        texts = [raw]
    elif raw and isinstance(raw[0], str):
        texts = [str(t) for t in raw]
    else:
        rows: list[Any] = list(raw) if (raw and isinstance(raw[0], list)) else [raw]
        texts = [model.detokenize([int(t) for t in row]) for row in rows]
    if not texts or any(not t for t in texts):
        raise bad_request("input must not be empty.", param="input")
    vectors = await model.embed(texts)
    total = sum(len(model.tokenize(t)) for t in texts)
    reply = EmbeddingList(
        data=[Embedding(index=i, embedding=vector) for i, vector in enumerate(vectors)],
        model=model_id,
        usage=EmbeddingUsage(prompt_tokens=total, total_tokens=total),
    )
    return JSONResponse(reply.wire())


ROUTES = [
    Route("/v1/chat/completions", chat_completions, methods=["POST"]),
    Route("/v1/completions", completions, methods=["POST"]),
    Route("/v1/embeddings", embeddings, methods=["POST"]),
]
