"""Reading a request's JSON body without letting a client exhaust memory, time or the stack.

Every limit answers with a client error in the caller's API shape, never a 500:
- a declared `Content-Length` over the limit is a 413 before a byte is read, and the bytes are
  counted while reading, so a body without a length cannot grow past the limit either;
- a body that pauses longer than `BODY_IDLE_TIMEOUT_S`, or takes over `BODY_READ_TIMEOUT_S` in all, is a 408;
- a client that leaves mid-upload is a 499 (nobody is there to read it), not a server error;
- a `Content-Type` other than JSON is a 415: a browser can send `text/plain` cross-site without
  asking first, so accepting it would let any web page run generations here;
- JSON nested deeper than `MAX_JSON_DEPTH` is a 400: the parser and everything after it recurse;
- a lone UTF-16 surrogate (`"\\ud800"`, valid JSON but not Unicode) is a 400 naming where it is,
  as the hosted APIs answer: no tokenizer can encode it.

Large bodies are parsed on a worker thread so that a 30 MB request does not pause every stream.
"""

from __future__ import annotations

import asyncio
import json
import re
from typing import Any

import anyio
from starlette.requests import ClientDisconnect, Request

from launcher.server.errors import ApiError, ClientDisconnected, bad_request

MAX_BODY_BYTES = 32 * 1024 * 1024
BODY_READ_TIMEOUT_S = 60.0  # a 32 MiB body at a slow 1 MB/s still arrives in time
BODY_IDLE_TIMEOUT_S = 10.0  # but a body that stops arriving is given up on sooner
MAX_JSON_DEPTH = 128  # agents' tool schemas nest a dozen levels; nothing legitimate nests a hundred
_THREAD_PARSE_BYTES = 256 * 1024  # below this, parsing is faster than the hop to a thread

# `\ud800`-`\udfff` escapes: only a body that has one can hold a lone surrogate, so only such a
# body pays for the walk over its strings (a pair like `\ud83d\ude00` is decoded as one emoji).
_SURROGATE_ESCAPE = re.compile(rb"\\u[dD][89a-fA-F]")
_JSON_TYPES = ("application/json", "application/x-ndjson")

# Closing the connection after refusing a body: otherwise the client keeps sending it.
_CLOSE = {"Connection": "close"}


def _mib(size: int) -> str:
    return f"{size // (1024 * 1024)} MiB"


def check_content_type(request: Request) -> None:
    """A present Content-Type must be JSON (`application/json`, `application/*+json`); absent is fine."""
    value = request.headers.get("content-type")
    if value is None:
        return  # curl without -H, simple scripts; a browser always sends one with a body
    kind = value.split(";", 1)[0].strip().lower()
    if kind in _JSON_TYPES or (kind.startswith("application/") and kind.endswith("+json")):
        return
    raise ApiError(
        415,
        f"Content-Type {kind or value!r} is not accepted: send the body as JSON with 'Content-Type: application/json'.",
        headers=_CLOSE,
    )


async def read_body(request: Request, limit: int = MAX_BODY_BYTES) -> bytes:
    """The raw body, at most `limit` bytes, read within BODY_READ_TIMEOUT_S."""
    declared = request.headers.get("content-length")
    if declared is not None:
        try:
            size = int(declared)
        except ValueError:
            raise ApiError(400, f"Content-Length {declared!r} is not a number.", headers=_CLOSE) from None
        if size > limit:
            raise ApiError(413, f"The request body is {size:,} bytes; the limit is {_mib(limit)}.", headers=_CLOSE)
    chunks: list[bytes] = []
    received = 0
    try:
        loop = asyncio.get_running_loop()
        overall = loop.time() + BODY_READ_TIMEOUT_S
        async with asyncio.timeout(BODY_IDLE_TIMEOUT_S) as deadline:
            async for chunk in request.stream():
                deadline.reschedule(min(overall, loop.time() + BODY_IDLE_TIMEOUT_S))
                received += len(chunk)
                if received > limit:
                    raise ApiError(413, f"The request body is larger than {_mib(limit)}.", headers=_CLOSE)
                chunks.append(chunk)
    except TimeoutError:
        message = (
            f"The request body did not arrive in time ({received:,} bytes came; a body may pause "
            f"{BODY_IDLE_TIMEOUT_S:.0f} s at most and take {BODY_READ_TIMEOUT_S:.0f} s in all)."
        )
        raise ApiError(408, message, headers=_CLOSE) from None
    except ClientDisconnect:
        raise ClientDisconnected from None
    return b"".join(chunks)


def _where(path: list[str | int]) -> str:
    return ".".join(str(part) for part in path) or "the body"


def check_json_value(value: Any, *, check_text: bool = True, param: str | None = None) -> None:
    """Raise a 400 if `value` nests deeper than MAX_JSON_DEPTH or (`check_text`) holds a lone surrogate.

    Iterative, so a hostile value cannot exhaust the stack here either.
    """
    stack: list[tuple[Any, int, list[str | int]]] = [(value, 1, [])]
    while stack:
        item, depth, path = stack.pop()
        if isinstance(item, str):
            if check_text:
                _check_text(item, path, param)
            continue
        if not isinstance(item, dict | list):
            continue
        if depth > MAX_JSON_DEPTH:
            where = param or _where(path)
            raise bad_request(f"The JSON in {where} is nested more than {MAX_JSON_DEPTH} levels deep.", param=param)
        if isinstance(item, dict):
            for key, child in item.items():
                if check_text:
                    _check_text(key, path, param)
                stack.append((child, depth + 1, [*path, key]))
        else:
            stack.extend((child, depth + 1, [*path, index]) for index, child in enumerate(item))


def _check_text(text: str, path: list[str | int], param: str | None) -> None:
    try:
        text.encode("utf-8")
    except UnicodeEncodeError as err:
        char = text[err.start]
        raise bad_request(
            f"{param or _where(path)} contains a lone UTF-16 surrogate (\\u{ord(char):04x}), which is not "
            "valid Unicode. Send whole characters (a surrogate pair is one character).",
            param=param or _where(path) or None,
        ) from None


def _no_constant(name: str) -> Any:
    # NaN and Infinity are not JSON; accepted, they would be echoed into replies no client can parse.
    raise ValueError(f"{name} is not a JSON value")


def loads_checked(raw: str | bytes, *, what: str, param: str | None = None) -> Any:
    """`json.loads` for client-supplied JSON, with the depth and Unicode checks; a 400 when it fails."""
    try:
        # Strict UTF-8 first: json.loads(bytes) would let encoded lone surrogates through.
        value = json.loads(raw.decode("utf-8") if isinstance(raw, bytes) else raw, parse_constant=_no_constant)
    except RecursionError:
        message = f"The JSON in {what} is nested more than {MAX_JSON_DEPTH} levels deep."
        raise bad_request(message, param=param) from None
    except (json.JSONDecodeError, UnicodeDecodeError, ValueError) as err:
        raise bad_request(f"{what[:1].upper()}{what[1:]} is not valid JSON: {err}", param=param) from None
    data = raw.encode("utf-8", "surrogatepass") if isinstance(raw, str) else raw
    check_json_value(value, check_text=_SURROGATE_ESCAPE.search(data) is not None, param=param)
    return value


async def read_json_object(request: Request) -> dict[str, Any]:
    """The body as a JSON object, after the content-type, size, time, depth and Unicode checks."""
    raw = await read_body(request)  # read first even when refused: a client still sending would be reset
    check_content_type(request)
    if len(raw) >= _THREAD_PARSE_BYTES:
        data = await anyio.to_thread.run_sync(lambda: loads_checked(raw, what="the request body"))
    else:
        data = loads_checked(raw, what="the request body")
    if not isinstance(data, dict):
        raise bad_request("The request body must be a JSON object.")
    return data
