"""Helpers every route module shares: body parsing, ids, stop strings, starting a chat, waiting for a whole reply."""

from __future__ import annotations

import secrets
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass
from typing import Generic, TypeVar

import anyio
from pydantic import BaseModel, ValidationError
from starlette.requests import Request

from launcher.server.body import read_json_object
from launcher.server.chat import ChatOptions, ChatRun, start_chat
from launcher.server.errors import ClientDisconnected, bad_request, validation_message
from launcher.server.schemas_common import GenerationFields
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


def stops_from(stop: str | list[str] | None, *, param: str = "stop") -> list[str]:
    """Stop strings as a list (at most 16, none empty)."""
    stops = [stop] if isinstance(stop, str) else list(stop or [])
    if len(stops) > 16:
        raise bad_request("At most 16 stop sequences are supported.", param=param)
    return [s for s in stops if s]


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


ChatBodyT = TypeVar("ChatBodyT", bound=GenerationFields)


@dataclass
class StartedChat(Generic[ChatBodyT]):
    """A chat request under way: its body, the served model's name, the reply's id, the run."""

    body: ChatBodyT
    served_model: str
    reply_id: str
    run: ChatRun


async def start_chat_request(
    request: Request, schema: type[ChatBodyT], to_options: Callable[[ChatBodyT], ChatOptions], id_prefix: str
) -> StartedChat[ChatBodyT]:
    """Read, check and start a chat request of any API; every error is raised before any output."""
    state = state_of(request)
    body = await parse_body(request, schema)
    served = state.resolve_model(body.model)
    options = to_options(body)
    reply_id = new_id(id_prefix)
    options.settings.request_id = reply_id
    return StartedChat(body, served, reply_id, await start_chat(state, options))
