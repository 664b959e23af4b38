"""Another OpenAI-compatible server whose models this one serves: a registered remote, or a child
engine this server started (`launcher serve MODEL --engine vllm`, launcher/engines/child/).

What travels to it is its own key, never the key of the client that called this server: the
local key guards this machine, and a remote that logs or leaks what it receives must not learn it.

Nothing a remote sends is trusted to be small or quick. Its answers are read through
`decoded_pieces`, which inflates gzip and deflate itself, a piece at a time, and stops at a cap
(httpx would inflate a whole network read at once: a gzip bomb). Every call has a connect
timeout, a deadline for its answer to start (`HEADERS_TIMEOUT_S`) and a limit on silence
(`READ_TIMEOUT_S`); the small calls (model lists, metrics) also have a deadline for the whole
answer (`SMALL_CALL_DEADLINE_S`), since a remote that drips one byte at a time never trips a
timeout between bytes. The limits are module constants, read at each call.
"""

from __future__ import annotations

import asyncio
import json
import zlib
from collections.abc import AsyncGenerator, AsyncIterator
from dataclasses import dataclass, field

import httpx

from launcher.core.errors import ServerError
from launcher.core.model_cards import context_length_of_card

LIST_TIMEOUT_S = 5.0
"""How long listing a remote's models may take, all of it (a remote that is down or drips must not hold
the server's listing, nor `launcher remote add` and `list`)."""
CONNECT_TIMEOUT_S = 10.0
"""How long connecting to a remote may take."""
HEADERS_TIMEOUT_S = 300.0
"""How long a chat request waits for the remote's answer to start (its status line and headers)."""
READ_TIMEOUT_S = 600.0
"""The longest silence inside an answer: a remote reading a long prompt sends nothing until its first
token (this server sends its own client keep-alives meanwhile). In a streamed reply it bounds the time
between two lines, so a remote that drips bytes without ever ending a line trips it too."""
SMALL_CALL_DEADLINE_S = 5.0
"""The whole of a small answer (an error body, metrics) must arrive within this."""
MAX_LIST_BYTES = 4 * 1024 * 1024
"""A remote's /v1/models, inflated (a thousand models are ~200 kB)."""
MAX_ERROR_BYTES = 16 * 1024
"""What is read of a remote's error body; its message is cut to ERROR_MESSAGE_CHARS for the client."""
ERROR_MESSAGE_CHARS = 1000
MAX_LINE_BYTES = 4 * 1024 * 1024
"""One line of a streamed reply (one SSE event's data), inflated."""
MAX_REPLY_BYTES = 64 * 1024 * 1024
"""A whole chat reply, streamed or not, inflated."""
ACCEPT_ENCODING = "gzip, deflate"
"""The encodings asked for: the ones `decoded_pieces` inflates with a bound."""
_PIECE_BYTES = 64 * 1024


class AnswerTooLarge(Exception):
    """A remote's answer went past a size cap."""


class AnswerUnreadable(Exception):
    """A remote's answer is in a form this server does not read (an unknown content encoding)."""


def call_timeout(total_s: float | None = None) -> httpx.Timeout:
    """The httpx timeouts of one upstream call (`total_s` caps each for a small call)."""
    read = READ_TIMEOUT_S if total_s is None else min(READ_TIMEOUT_S, total_s)
    return httpx.Timeout(connect=CONNECT_TIMEOUT_S, read=read, write=max(read, 10.0), pool=30.0)


@dataclass(frozen=True)
class Upstream:
    """Where an upstream server is and how to call it."""

    name: str  # the remote's registered name, or the child engine's (its spec's name)
    base_url: str  # the OpenAI base URL, ending in /v1
    api_key: str | None = field(default=None, repr=False)
    prefix: str = ""  # put before its model ids to make this server's names ("gpu/"; "" for a child)
    engine: str = "remote"  # what /v1/models and /launcher/models say runs it

    @property
    def root_url(self) -> str:
        """The server's root, where /health and /metrics are (the base URL without its /v1)."""
        return self.base_url.removesuffix("/v1")

    def headers(self) -> dict[str, str]:
        """The headers every request to it carries: its own key, as OpenAI-compatible servers read it."""
        return {"Authorization": f"Bearer {self.api_key}"} if self.api_key else {}

    def local_name(self, model: str) -> str:
        """This server's name for the upstream's model `model`."""
        return self.prefix + model


@dataclass(frozen=True)
class RemoteModel:
    """A model an upstream serves, as this server passes requests to it."""

    upstream: Upstream
    model: str  # the id the upstream knows it by
    context_length: int | None = None  # when its /v1/models says


def unreachable(upstream: Upstream, err: Exception) -> str:
    """One line saying that `upstream` did not answer, and why."""
    detail = str(err) or type(err).__name__
    return f"the remote {upstream.name} ({upstream.base_url}) cannot be reached: {detail}"


# -- reading an answer with a bound -------------------------------------------------------------------


def _inflater(response: httpx.Response) -> zlib._Decompress | None:
    encoding = response.headers.get("content-encoding", "").strip().lower()
    if encoding in ("", "identity"):
        return None
    if encoding in ("gzip", "x-gzip"):
        return zlib.decompressobj(zlib.MAX_WBITS | 16)
    if encoding == "deflate":
        return zlib.decompressobj(zlib.MAX_WBITS | 32)  # zlib- or gzip-wrapped, as servers send it
    raise AnswerUnreadable(f"an answer in the {encoding!r} encoding, which was not asked for")


async def decoded_pieces(response: httpx.Response, limit_bytes: int) -> AsyncGenerator[bytes, None]:
    """The body of a streamed `response`, inflated a piece at a time; raises AnswerTooLarge past `limit_bytes`."""
    inflater = _inflater(response)
    total = 0
    async for raw in response.aiter_raw():
        data = raw
        while data:
            if inflater is None:
                piece, data = data, b""
            else:
                try:
                    piece = inflater.decompress(data, _PIECE_BYTES)
                except zlib.error as err:
                    raise AnswerUnreadable(f"a compressed answer that does not inflate ({err})") from err
                data = inflater.unconsumed_tail
                if inflater.eof:
                    data = b""
            total += len(piece)
            if total > limit_bytes:
                raise AnswerTooLarge(f"an answer larger than {_size(limit_bytes)}")
            if piece:
                yield piece
            if data:
                await asyncio.sleep(0)  # one network read may inflate to a GB: other requests go between pieces


async def read_capped(response: httpx.Response, limit_bytes: int) -> bytes:
    """The whole inflated body of a streamed `response`; raises AnswerTooLarge past `limit_bytes`."""
    return b"".join([piece async for piece in decoded_pieces(response, limit_bytes)])


async def read_head(response: httpx.Response, limit_bytes: int) -> bytes:
    """The first `limit_bytes` of the inflated body (the rest is not read: an error body's start says enough)."""
    head = bytearray()
    try:
        async for piece in decoded_pieces(response, 2**62):
            head += piece[: limit_bytes - len(head)]
            if len(head) >= limit_bytes:
                break
    except (httpx.HTTPError, AnswerUnreadable):
        pass  # what came is what there is to say
    return bytes(head)


async def lines(pieces: AsyncIterator[bytes], limit_bytes: int) -> AsyncGenerator[bytes, None]:
    """The lines of an inflated body (without their line ends); raises AnswerTooLarge for one past `limit_bytes`."""
    start: list[bytes] = []  # the line under way, in pieces (joined once it ends: no copy per piece)
    size = 0
    async for piece in pieces:
        if b"\n" not in piece:
            start.append(piece)
            size += len(piece)
        else:
            *complete, rest = piece.split(b"\n")
            complete[0] = b"".join([*start, complete[0]])
            for line in complete:
                if len(line) > limit_bytes:
                    raise AnswerTooLarge(f"a line longer than {_size(limit_bytes)}")
                yield line.removesuffix(b"\r")
            start, size = [rest], len(rest)
        if size > limit_bytes:
            raise AnswerTooLarge(f"a line longer than {_size(limit_bytes)}")
    if size:
        yield b"".join(start).removesuffix(b"\r")


def _size(count: int) -> str:
    return f"{count // (1024 * 1024)} MB" if count >= 1024 * 1024 else f"{count // 1024} kB"


async def get_small(
    client: httpx.AsyncClient, url: str, headers: dict[str, str], limit_bytes: int, deadline_s: float
) -> tuple[int, bytes]:
    """GET `url` whole within `deadline_s` (all of it: connecting, waiting, reading) and `limit_bytes`:
    its status and inflated body. Raises TimeoutError, AnswerTooLarge, AnswerUnreadable or httpx.HTTPError."""
    async with asyncio.timeout(deadline_s):
        request = client.build_request(
            "GET", url, headers=headers | {"Accept-Encoding": ACCEPT_ENCODING}, timeout=call_timeout(deadline_s)
        )
        response = await client.send(request, stream=True)
        try:
            return response.status_code, await read_capped(response, limit_bytes)
        finally:
            await response.aclose()


# -- model lists ----------------------------------------------------------------------------------------


def list_models(upstream: Upstream, timeout_s: float | None = None) -> list[RemoteModel]:
    """The models `upstream` lists at /v1/models, all of the answer within `timeout_s` (default
    LIST_TIMEOUT_S), for a caller without an event loop (`launcher remote add` and `list`). Raises
    ServerError saying what went wrong."""

    async def listing() -> list[RemoteModel]:
        async with httpx.AsyncClient() as client:
            return await fetch_models(client, upstream, timeout_s)

    return asyncio.run(listing())


async def fetch_models(
    client: httpx.AsyncClient, upstream: Upstream, timeout_s: float | None = None
) -> list[RemoteModel]:
    """The models `upstream` lists at /v1/models (aliases a launcher lists are left out: the names
    its models go by are enough), all of the answer within `timeout_s` (default LIST_TIMEOUT_S) and
    MAX_LIST_BYTES. Raises ServerError saying what went wrong."""
    deadline = LIST_TIMEOUT_S if timeout_s is None else timeout_s
    try:
        status, content = await get_small(
            client, upstream.base_url + "/models", upstream.headers(), MAX_LIST_BYTES, deadline
        )
    except TimeoutError as err:
        raise ServerError(
            f"the remote {upstream.name} ({upstream.base_url}) did not answer /v1/models within {deadline:g} s"
        ) from err
    except (AnswerTooLarge, AnswerUnreadable) as err:
        raise ServerError(f"the remote {upstream.name} answered /v1/models with {err}") from err
    except httpx.HTTPError as err:
        raise ServerError(unreachable(upstream, err)) from err
    if status in (401, 403):
        raise ServerError(
            f"the remote {upstream.name} refused the key ({status}): add it again with its key "
            f"(`launcher remote add {upstream.name} URL --api-key-stdin`)"
        )
    if status != 200:
        raise ServerError(f"the remote {upstream.name} answered /v1/models with HTTP {status}")
    try:
        listing = json.loads(content)
        cards = listing.get("data", [])
        if not isinstance(cards, list):
            raise ValueError("data is not a list")
    except (ValueError, AttributeError, RecursionError) as err:
        raise ServerError(f"the remote {upstream.name} answered /v1/models with something else than a list") from err
    models = []
    for card in cards:
        if isinstance(card, dict) and isinstance(card.get("id"), str) and not card.get("alias_for"):
            models.append(RemoteModel(upstream, card["id"], context_length_of_card(card)))
    return models
