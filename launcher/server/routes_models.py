"""Which models this server has: `/v1/models` for clients, `/launcher/models` for the app and `launcher ps`.

`/v1/models` lists every model a request may name: the loaded ones with their numbers, the ones
it would load on first use (`loaded: false`), and the aliases (`alias_for`). `/launcher/models`
lists what is loaded now, with memory and activity, and `/launcher/models/load` and `/unload`
let the app and `launcher ps` load or free one. They sit outside `/v1` because they are the
launcher's own, and behind the API key like every route but /health.
"""

from __future__ import annotations

from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

from launcher.server.body import read_json_object
from launcher.server.errors import ApiError, bad_request
from launcher.server.openai_api.schemas_openai import ModelCard, ModelList
from launcher.server.pool.model_slot import ModelEntry, ModelSlot
from launcher.server.routes_common import state_of
from launcher.server.state import ServerState


def loaded_card(slot: ModelSlot) -> ModelCard:
    """A loaded model's /v1/models entry."""
    info = slot.model.info
    return ModelCard(
        id=slot.id,
        context_length=info.context_length,
        max_model_len=info.context_length,
        max_output_tokens=slot.config.max_output_tokens,
        engine=slot.engine_name or info.engine,
        engine_reason=slot.engine_reason,
        engine_version=info.engine_version,
        quant=info.quant,
        architecture=info.architecture,
        format=info.format,
        parallel=info.parallel,
        can_embed=info.can_embed,
        memory_bytes=slot.needed_bytes or None,
    )


def remote_card(entry: ModelEntry, available: bool = True) -> ModelCard:
    """A remote model's /v1/models entry, owned by its remote: ready once the remote has listed it
    (nothing loads here); `loaded: false` until then (a preset or alias naming it before its remote answered)."""
    assert entry.remote is not None
    upstream = entry.remote.upstream
    return ModelCard(
        id=entry.name,
        owned_by=upstream.name,
        loaded=available,
        context_length=entry.remote.context_length,
        max_model_len=entry.remote.context_length,
        max_output_tokens=entry.config.max_output_tokens,
        engine=upstream.engine,
        remote=upstream.name,
    )


def _entry_card(state: ServerState, entry: ModelEntry) -> ModelCard:
    if entry.remote is not None:
        return remote_card(entry, state.remotes.available(entry.remote))
    slot = state.pool.slots.get(entry.name)
    if slot is not None:
        return loaded_card(slot)
    return ModelCard(id=entry.name, loaded=False, max_output_tokens=entry.config.max_output_tokens)


def model_cards(state: ServerState) -> list[ModelCard]:
    """The default model first, then the others by name, then the aliases."""
    names = state.pool.names
    order = sorted(names.entries, key=lambda name: (name != names.default, name))
    cards = [_entry_card(state, names.entries[name]) for name in order]
    by_id = {card.id: card for card in cards}
    aliases = [
        by_id[target].model_copy(update={"id": alias, "alias_for": target})
        for alias, target in names.aliases.items()
        if target in by_id
    ]
    return cards + aliases


async def list_models(request: Request) -> Response:
    """GET /v1/models (never waits on a load or a generation)."""
    return JSONResponse(ModelList(data=model_cards(state_of(request))).wire())


async def get_model(request: Request) -> Response:
    """GET /v1/models/{id}: a model or an alias."""
    state = state_of(request)
    wanted = request.path_params["model_id"]
    for card in model_cards(state):
        if card.id == wanted:
            return JSONResponse(card.wire())
    known = ", ".join(sorted(state.pool.names.entries))
    raise ApiError(404, f"Model {wanted!r} is not served here; models: {known}.", code="model_not_found")


async def loaded_models(request: Request) -> Response:
    """GET /launcher/models: what is loaded now, with memory and activity (`launcher ps`), and the
    remote models (served by other servers: nothing of theirs is loaded here)."""
    state = state_of(request)
    pool = state.pool
    remote = {
        name: {"remote": entry.remote.upstream.name, "url": entry.remote.upstream.base_url, "model": entry.remote.model}
        for name, entry in sorted(pool.names.entries.items())
        if entry.remote is not None
    }
    return JSONResponse(
        {
            "models": [slot.describe() for slot in sorted(pool.slots.values(), key=lambda s: s.id)],
            "available": sorted(pool.names.entries),
            "memory_budget_bytes": pool.budget_bytes,
            "memory_used_bytes": pool.used_bytes,
            "max_models": pool.max_models,
            "loads": dict(pool.load_counts),
            "remote_models": remote,
        }
    )


async def _named_model(request: Request) -> str:
    data = await read_json_object(request)
    name = data.get("model")
    if not isinstance(name, str) or not name:
        raise bad_request('Name the model: {"model": "NAME"}.', param="model")
    return name


async def load_model(request: Request) -> Response:
    """POST /launcher/models/load {"model": NAME}: load it now (a request would load it anyway)."""
    state = state_of(request)
    name = await _named_model(request)
    async with state.using(name) as slot:
        return JSONResponse(slot.describe())


async def unload_model(request: Request) -> Response:
    """POST /launcher/models/unload {"model": NAME}: free it now (a 409 while it answers requests)."""
    state = state_of(request)
    name = await _named_model(request)
    if not await state.pool.unload(name):
        raise ApiError(404, f"{name!r} is not loaded.", param="model", code="model_not_loaded")
    return JSONResponse({"unloaded": name})


ROUTES = [
    Route("/v1/models", list_models, methods=["GET"]),
    Route("/v1/models/{model_id:path}", get_model, methods=["GET"]),
    Route("/launcher/models", loaded_models, methods=["GET"]),
    Route("/launcher/models/load", load_model, methods=["POST"]),
    Route("/launcher/models/unload", unload_model, methods=["POST"]),
]
