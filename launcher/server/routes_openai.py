"""OpenAI-shaped routes: /v1/models, /v1/chat/completions, /v1/completions, /v1/embeddings."""

from __future__ import annotations

import time
from collections.abc import AsyncIterator
from typing import Any

from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

from launcher.engines.base import Constraint
from launcher.server.chat import (
    ChatDone,
    ChatOptions,
    ChatRun,
    ReasoningDelta,
    TextDelta,
    ToolCallDelta,
    normalize_history,
    start_chat,
)
from launcher.server.errors import ApiError, bad_request
from launcher.server.generation import Chunk, Finish, Usage, failure, start_generation, tokenize_prompt
from launcher.server.routes_common import (
    collect_until_disconnect,
    new_id,
    openai_logprobs,
    parse_body,
    sampling_from,
    state_of,
    stops_from,
)
from launcher.server.schemas_openai import (
    ChatCompletionRequest,
    CompletionRequest,
    EmbeddingRequest,
    NamedToolChoice,
    ResponseFormat,
)
from launcher.server.sse import COMMENT_KEEPALIVE, DONE, EventStream, KeepAlive, data_event, with_keepalives
from launcher.server.state import ServerState


def usage_json(usage: Usage) -> dict[str, Any]:
    """OpenAI `usage`."""
    return {
        "prompt_tokens": usage.prompt_tokens,
        "completion_tokens": usage.completion_tokens,
        "total_tokens": usage.total_tokens,
        "prompt_tokens_details": {"cached_tokens": usage.cached_tokens},
    }


def model_card(state: ServerState) -> dict[str, Any]:
    """The served model's /v1/models entry."""
    model, _ = state.require_model()
    info = model.info
    return {
        "id": state.model_id,
        "object": "model",
        "created": 0,
        "owned_by": "launcher",
        "context_length": info.context_length,
        "max_model_len": info.context_length,
        "max_output_tokens": state.config.max_output_tokens,
        "engine": state.engine_name or info.engine,
        "engine_reason": state.engine_reason,
        "engine_version": info.engine_version,
        "quant": info.quant,
        "architecture": info.architecture,
        "format": info.format,
        "parallel": info.parallel,
        "can_embed": info.can_embed,
    }


def alias_cards(state: ServerState) -> list[dict[str, Any]]:
    """One entry per NAME=MODEL alias (a name may be a * pattern), pointing at the model it serves."""
    card = model_card(state)
    return [{**card, "id": name, "alias_for": card["id"]} for name in state.config.alias_map]


async def list_models(request: Request) -> Response:
    """GET /v1/models: the served model first, then its aliases (never waits on generation)."""
    state = state_of(request)
    return JSONResponse({"object": "list", "data": [model_card(state), *alias_cards(state)]})


async def get_model(request: Request) -> Response:
    """GET /v1/models/{id}: the served model or one of its aliases."""
    state = state_of(request)
    wanted = request.path_params["model_id"]
    for card in (model_card(state), *alias_cards(state)):
        if card["id"] == wanted:
            return JSONResponse(card)
    raise ApiError(404, f"Model {wanted!r} is not served here; use {state.model_id!r}.")


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
    logprobs = (body.top_logprobs or 0) if body.logprobs else None
    return ChatOptions(
        messages=messages,
        tools=tools,
        tool_choice=choice,
        response_format=response_format_constraint(body.response_format),
        max_tokens=body.max_completion_tokens or body.max_tokens,
        sampling=sampling_from(**_sampling_fields(body)),
        stops=stops_from(body.stop),
        logprobs=logprobs,
        ignore_eos=body.ignore_eos,
    )


def _sampling_fields(body: Any) -> dict[str, Any]:
    names = (
        "temperature",
        "top_p",
        "top_k",
        "min_p",
        "seed",
        "presence_penalty",
        "frequency_penalty",
        "repeat_penalty",
        "logit_bias",
    )
    return {name: getattr(body, name) for name in names}


def _tool_call_json(delta: ToolCallDelta) -> dict[str, Any]:
    return {
        "id": delta.call.id,
        "type": "function",
        "function": {"name": delta.call.name, "arguments": delta.call.arguments},
    }


async def chat_completions(request: Request) -> Any:
    """POST /v1/chat/completions (streaming and not)."""
    state = state_of(request)
    body = await parse_body(request, ChatCompletionRequest)
    model_id = state.resolve_model(body.model)
    options = chat_options(body)
    completion_id = new_id("chatcmpl-")
    options.request_id = completion_id
    run = await start_chat(state, options)
    created = int(time.time())
    if body.stream:
        include_usage = bool(body.stream_options and body.stream_options.include_usage)
        stream = _chat_stream(run, completion_id, created, model_id, include_usage, body.logprobs, state.keepalive_s)
        return EventStream(stream, run.aclose)
    try:
        text: list[str] = []
        logprobs: list[dict[str, Any]] = []
        calls: list[dict[str, Any]] = []
        reasoning: list[str] = []
        done: ChatDone | None = None
        for event in await collect_until_disconnect(request, run.events()):
            if isinstance(event, TextDelta):
                text.append(event.text)
                logprobs.extend(openai_logprobs(event.logprobs))
            elif isinstance(event, ReasoningDelta):
                reasoning.append(event.text)
            elif isinstance(event, ToolCallDelta):
                calls.append(_tool_call_json(event))
            else:
                done = event
    finally:
        await run.aclose()
    assert done is not None
    if done.finish_reason == "error":
        raise failure(done.error, request_error=done.request_error)
    content = "".join(text)
    message: dict[str, Any] = {"role": "assistant", "content": content if (content or not calls) else None}
    if reasoning:
        message["reasoning_content"] = "".join(reasoning)
    if calls:
        message["tool_calls"] = calls
    return JSONResponse(
        {
            "id": completion_id,
            "object": "chat.completion",
            "created": created,
            "model": model_id,
            "system_fingerprint": None,
            "choices": [
                {
                    "index": 0,
                    "message": message,
                    "logprobs": {"content": logprobs} if body.logprobs else None,
                    "finish_reason": _openai_finish(done.finish_reason),
                }
            ],
            "usage": usage_json(done.usage),
        }
    )


def _openai_finish(reason: str) -> str:
    return reason if reason in ("stop", "length", "tool_calls") else "stop"


async def _chat_stream(
    run: ChatRun,
    completion_id: str,
    created: int,
    model_id: str,
    include_usage: bool,
    want_logprobs: bool,
    keepalive_s: float,
) -> AsyncIterator[bytes]:
    def chunk(delta: dict[str, Any], finish: str | None = None, logprobs: Any = None) -> bytes:
        payload: dict[str, Any] = {
            "id": completion_id,
            "object": "chat.completion.chunk",
            "created": created,
            "model": model_id,
            "system_fingerprint": None,
            "choices": [{"index": 0, "delta": delta, "logprobs": logprobs, "finish_reason": finish}],
        }
        if include_usage:
            payload["usage"] = None
        return data_event(payload)

    yield chunk({"role": "assistant", "content": ""})
    async for event in with_keepalives(run.events(), keepalive_s):
        if isinstance(event, KeepAlive):
            yield COMMENT_KEEPALIVE
        elif isinstance(event, TextDelta):
            if event.text or event.logprobs:
                logprobs = {"content": openai_logprobs(event.logprobs)} if want_logprobs else None
                yield chunk({"content": event.text}, logprobs=logprobs)
        elif isinstance(event, ReasoningDelta):
            yield chunk({"reasoning_content": event.text})
        elif isinstance(event, ToolCallDelta):
            call = _tool_call_json(event)
            arguments = call["function"]["arguments"]
            call["function"] = {"name": call["function"]["name"], "arguments": ""}
            yield chunk({"tool_calls": [{"index": event.index, **call}]})
            yield chunk({"tool_calls": [{"index": event.index, "function": {"arguments": arguments}}]})
        else:
            if event.finish_reason == "error":
                yield data_event(
                    {
                        "error": {
                            "message": f"Generation failed: {event.error}",
                            "type": "server_error",
                            "param": None,
                            "code": None,
                        }
                    }
                )
            yield chunk({}, _openai_finish(event.finish_reason))
            if include_usage:
                yield data_event(
                    {
                        "id": completion_id,
                        "object": "chat.completion.chunk",
                        "created": created,
                        "model": model_id,
                        "system_fingerprint": None,
                        "choices": [],
                        "usage": usage_json(event.usage),
                    }
                )
    yield DONE


async def completions(request: Request) -> Any:
    """POST /v1/completions: a raw prompt, no chat template."""
    state = state_of(request)
    body = await parse_body(request, CompletionRequest)
    model, _ = state.require_model()
    model_id = state.resolve_model(body.model)
    if isinstance(body.prompt, list) and body.prompt and isinstance(body.prompt[0], str):
        if len(body.prompt) != 1:
            raise bad_request("Only one prompt per request is supported.", param="prompt")
        prompt: str | list[int] = str(body.prompt[0])
    else:
        prompt = body.prompt if isinstance(body.prompt, str) else [int(t) for t in body.prompt]
    tokens = await tokenize_prompt(model, prompt)
    completion_id = new_id("cmpl-")
    generation = await start_generation(
        model,
        state.metrics,
        tokens,
        max_tokens=body.max_tokens,
        output_cap=state.config.max_output_tokens,
        sampling=sampling_from(**_sampling_fields(body)),
        stops=stops_from(body.stop),
        logprobs=body.logprobs,
        ignore_eos=body.ignore_eos,
        request_id=completion_id,
        live=state.live,
    )
    created = int(time.time())
    echo = (prompt if isinstance(prompt, str) else model.detokenize(tokens)) if body.echo else ""

    def payload(text: str, finish: str | None, usage: Usage | None) -> dict[str, Any]:
        out: dict[str, Any] = {
            "id": completion_id,
            "object": "text_completion",
            "created": created,
            "model": model_id,
            "choices": [{"index": 0, "text": text, "logprobs": None, "finish_reason": finish}],
        }
        if usage is not None:
            out["usage"] = usage_json(usage)
        return out

    if body.stream:
        include_usage = bool(body.stream_options and body.stream_options.include_usage)

        async def stream() -> AsyncIterator[bytes]:
            if echo:
                yield data_event(payload(echo, None, None))
            async for item in with_keepalives(generation.__aiter__(), state.keepalive_s):
                if isinstance(item, KeepAlive):
                    yield COMMENT_KEEPALIVE
                elif isinstance(item, Chunk):
                    if item.text:
                        yield data_event(payload(item.text, None, None))
                else:
                    yield data_event(payload("", _openai_finish(item.reason), None))
                    if include_usage:
                        final = payload("", None, item.usage)
                        final["choices"] = []
                        yield data_event(final)
            yield DONE

        return EventStream(stream(), generation.aclose)
    pieces = [echo]
    finish: Finish | None = None
    try:
        for item in await collect_until_disconnect(request, generation.__aiter__()):
            if isinstance(item, Chunk):
                pieces.append(item.text)
            else:
                finish = item
    finally:
        await generation.aclose()
    assert finish is not None
    return JSONResponse(payload("".join(pieces), _openai_finish(finish.reason), finish.usage))


async def embeddings(request: Request) -> Response:
    """POST /v1/embeddings (a clear 400 when the model cannot embed)."""
    state = state_of(request)
    body = await parse_body(request, EmbeddingRequest)
    model, _ = state.require_model()
    model_id = state.resolve_model(body.model)
    if not model.info.can_embed:
        raise bad_request(
            f"The model {state.model_id!r} cannot make embeddings; serve an embedding model.",
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
    return JSONResponse(
        {
            "object": "list",
            "data": [{"object": "embedding", "index": i, "embedding": v} for i, v in enumerate(vectors)],
            "model": model_id,
            "usage": {"prompt_tokens": total, "total_tokens": total},
        }
    )


ROUTES = [
    Route("/v1/models", list_models, methods=["GET"]),
    Route("/v1/models/{model_id:path}", get_model, methods=["GET"]),
    Route("/v1/chat/completions", chat_completions, methods=["POST"]),
    Route("/v1/completions", completions, methods=["POST"]),
    Route("/v1/embeddings", embeddings, methods=["POST"]),
]
