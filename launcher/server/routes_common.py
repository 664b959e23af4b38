"""Helpers every route module shares: body parsing, ids, sampling, logprobs."""

from __future__ import annotations

import secrets
from collections.abc import AsyncIterator
from typing import Any, TypeVar

import anyio
from pydantic import BaseModel, ValidationError
from starlette.requests import Request

from launcher.engines.base import SamplingParams, TokenLogprob
from launcher.server.body import read_json_object
from launcher.server.errors import ClientDisconnected, bad_request, validation_message
from launcher.server.state import ServerState

ModelT = TypeVar("ModelT", bound=BaseModel)
ItemT = TypeVar("ItemT")


def state_of(request: Request) -> ServerState:
    """The server state of the app serving `request`."""
    state: ServerState = request.app.state.server
    return state


async def parse_body(request: Request, model: type[ModelT]) -> ModelT:
    """The JSON body validated as `model`; see `body.read_json_object` for the limits on the way."""
    data = await read_json_object(request)
    try:
        return model.model_validate(data)
    except ValidationError as err:
        message, param = validation_message(err)
        raise bad_request(message, param=param) from None


def new_id(prefix: str) -> str:
    """A random id like `chatcmpl-...`."""
    return f"{prefix}{secrets.token_hex(12)}"


def sampling_from(
    *,
    temperature: float | None = None,
    top_p: float | None = None,
    top_k: int | None = None,
    min_p: float | None = None,
    seed: int | None = None,
    presence_penalty: float | None = None,
    frequency_penalty: float | None = None,
    repeat_penalty: float | None = None,
    logit_bias: dict[str, float] | None = None,
) -> SamplingParams:
    """SamplingParams from optional request fields (unset fields keep the engine defaults)."""
    defaults = SamplingParams()
    bias: dict[int, float] = {}
    for key, value in (logit_bias or {}).items():
        try:
            bias[int(key)] = float(value)
        except ValueError:
            raise bad_request(f"logit_bias keys must be token ids, got {key!r}.", param="logit_bias") from None
    return SamplingParams(
        temperature=defaults.temperature if temperature is None else temperature,
        top_p=defaults.top_p if top_p is None else top_p,
        top_k=defaults.top_k if top_k is None else top_k,
        min_p=defaults.min_p if min_p is None else min_p,
        seed=seed,
        presence_penalty=presence_penalty or 0.0,
        frequency_penalty=frequency_penalty or 0.0,
        repeat_penalty=defaults.repeat_penalty if repeat_penalty is None else repeat_penalty,
        logit_bias=bias,
    )


def stops_from(stop: str | list[str] | None, *, param: str = "stop") -> list[str]:
    """Stop strings as a list (at most 16, none empty)."""
    stops = [stop] if isinstance(stop, str) else list(stop or [])
    if len(stops) > 16:
        raise bad_request("At most 16 stop sequences are supported.", param=param)
    return [s for s in stops if s]


def openai_logprobs(items: tuple[TokenLogprob, ...]) -> list[dict[str, Any]]:
    """Chat-completions `logprobs.content` entries."""
    return [
        {
            "token": item.text,
            "logprob": item.logprob,
            "bytes": list(item.text.encode()),
            "top_logprobs": [
                {"token": text, "logprob": logprob, "bytes": list(text.encode())} for text, logprob in item.top
            ],
        }
        for item in items
    ]


async def collect_until_disconnect(request: Request, events: AsyncIterator[ItemT]) -> list[ItemT]:
    """All items of `events`, stopping early (ClientDisconnected) if the client disconnects.

    A non-streaming request can run for minutes; an agent that gives up must not leave its
    generation running. The caller closes the generation in its `finally`.
    """
    items: list[ItemT] = []
    gone = False
    async with anyio.create_task_group() as group:

        async def watch() -> None:
            nonlocal gone
            while True:
                message = await request.receive()
                if message["type"] == "http.disconnect":
                    gone = True
                    group.cancel_scope.cancel()
                    return

        async def gather() -> None:
            async for item in events:
                items.append(item)
            group.cancel_scope.cancel()

        group.start_soon(watch)
        group.start_soon(gather)
    if gone:
        raise ClientDisconnected
    return items
