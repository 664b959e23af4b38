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
from launcher.server.core.chat import ChatOptions, ChatRun, ChatStream, ColdStart, check_options, start_chat
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
    """A chat request under way: its body, the answering model's name, the reply's id, the run."""

    body: ChatBodyT
    served_model: str
    reply_id: str
    run: ChatStream


async def start_chat_request(
    request: Request, schema: type[ChatBodyT], to_options: Callable[[ChatBodyT], ChatOptions], id_prefix: str
) -> StartedChat[ChatBodyT]:
    """Read, check and start a chat request of any API.

    Every error is raised before any output, except for a stream whose model must load first:
    that one starts at once (`ColdStart`) and reports what goes wrong in the stream. A remote
    model's request goes to its upstream (`RemoteChat`), whatever API it arrived on.
    """
    state = state_of(request)
    body = await parse_body(request, schema)
    options = to_options(body)
    check_options(options)
    reply_id = new_id(id_prefix)
    options.settings.request_id = reply_id
    remote = await state.remote_entry(body.model)
    if remote is not None:
        return StartedChat(body, remote.name, reply_id, await state.remotes.start_chat(remote, options, state.metrics))
    if body.stream and state.needs_load(body.model):
        entry = await state.pool.entry(body.model)  # an unknown name is still a 404
        state.check_open()

        async def start() -> ChatRun:
            async with state.using(body.model, body.ttl) as slot:
                return await start_chat(slot, options)

        return StartedChat(body, entry.name, reply_id, ColdStart(start))
    async with state.using(body.model, body.ttl) as slot:
        run = await start_chat(slot, options)
    return StartedChat(body, slot.id, reply_id, run)
