"""A hostile OpenAI-compatible upstream, for the tests of what a `launcher serve` takes from its remotes.

One process serves every mode, each under its own base URL: `http://127.0.0.1:PORT/MODE/v1`, so one
local server can register each mode as a remote of its own (`launcher remote add MODE URL`). It is
a bare asyncio server writing raw HTTP/1.1, so it can send what no well-behaved framework would:

- `ok`: lists the model `m`, answers a chat with a short stream, a small /metrics
- `bomb`: every answer is a gzip bomb (260 kB that inflate to 256 MB), the chat one as a 200 SSE stream
- `bomberr`: the chat answer is a 500 whose body is a gzip bomb
- `hugeerr`: the chat answer is a 500 with a 50 MB body
- `drip`: every answer starts, then sends one byte every DRIP_S, forever
- `hang`: reads the request and never answers
- `endless`: a chat stream of content events that never ends (whatever max_tokens says)
- `metrics`: /metrics is 50 MB of 100,000 series of the names the launcher reads, each with its own model
- `garbage`: the chat answer is a 200 of application/json that is not JSON
- `wrongshape`: the chat answer is a 200 of JSON that is not a chat completion

Run as a module it prints `PORT <n>` once it listens.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import sys
import zlib

DRIP_S = 0.05
MODEL = "m"
_BOMB: bytes | None = None


def gzip_bomb() -> bytes:
    """A gzip body that inflates to 256 MiB: `data: ` then zeros, no line end (about 260 kB), made once.

    One MiB of zeros is deflated once, ending in a full flush (which forgets the window, so the same
    compressed block can follow itself), and that block is repeated: compressing 256 MiB would take
    half a minute on a busy machine."""
    global _BOMB
    if _BOMB is None:
        mib = 1024 * 1024
        head_deflate = zlib.compressobj(9, zlib.DEFLATED, -zlib.MAX_WBITS)
        head = head_deflate.compress(b"data: ") + head_deflate.flush(zlib.Z_FULL_FLUSH)
        deflate = zlib.compressobj(9, zlib.DEFLATED, -zlib.MAX_WBITS)
        block = deflate.compress(bytes(mib)) + deflate.flush(zlib.Z_FULL_FLUSH)
        end = deflate.flush(zlib.Z_FINISH)
        count = 256
        crc = zlib.crc32(b"data: ")
        zeros_crc = bytes(mib)
        for _ in range(count):
            crc = zlib.crc32(zeros_crc, crc)
        size = (6 + count * mib) & 0xFFFFFFFF
        gzip_header = b"\x1f\x8b\x08\x00\x00\x00\x00\x00\x00\xff"
        trailer = crc.to_bytes(4, "little") + size.to_bytes(4, "little")
        _BOMB = gzip_header + head + block * count + end + trailer
    return _BOMB


def _head(status: int, headers: dict[str, str]) -> bytes:
    reason = {200: "OK", 400: "Bad Request", 404: "Not Found", 500: "Internal Server Error"}.get(status, "X")
    lines = [f"HTTP/1.1 {status} {reason}", *(f"{k}: {v}" for k, v in headers.items())]
    return ("\r\n".join(lines) + "\r\n\r\n").encode()


async def _send(writer: asyncio.StreamWriter, status: int, body: bytes, content_type: str, **extra: str) -> None:
    headers = {"Content-Type": content_type, "Content-Length": str(len(body)), "Connection": "close", **extra}
    writer.write(_head(status, headers))
    for start in range(0, len(body), 1024 * 1024):
        writer.write(body[start : start + 1024 * 1024])
        await writer.drain()
    await writer.drain()


def _chunk(content: str, finish: str | None = None) -> bytes:
    choice = {"index": 0, "delta": {"content": content} if content else {}, "finish_reason": finish}
    return b"data: " + json.dumps({"object": "chat.completion.chunk", "choices": [choice]}).encode() + b"\n\n"


def _models() -> bytes:
    return json.dumps({"object": "list", "data": [{"id": MODEL, "object": "model"}]}).encode()


def _huge_metrics() -> bytes:
    lines = ["# TYPE vllm:num_requests_running gauge"]
    lines += [f'vllm:num_requests_running{{model_name="model-{i:06d}-{"x" * 400}"}} 1' for i in range(100_000)]
    return ("\n".join(lines) + "\n").encode()


async def _drip(writer: asyncio.StreamWriter, content_type: str) -> None:
    writer.write(_head(200, {"Content-Type": content_type, "Connection": "close"}))  # a body until the close
    while not writer.is_closing():
        writer.write(b"d")
        await writer.drain()
        await asyncio.sleep(DRIP_S)


async def _endless(writer: asyncio.StreamWriter) -> None:
    writer.write(_head(200, {"Content-Type": "text/event-stream", "Connection": "close"}))
    while not writer.is_closing():  # until the launcher hangs up
        for _ in range(50):
            writer.write(_chunk("word "))
        await writer.drain()
        await asyncio.sleep(0.001)


async def _answer(mode: str, path: str, writer: asyncio.StreamWriter) -> None:
    kind = "models" if path.endswith("/v1/models") else "metrics" if path.endswith("/metrics") else "chat"
    if mode == "hang":
        await asyncio.sleep(3600)
    if mode == "drip":
        await _drip(writer, "text/event-stream" if kind == "chat" else "application/json")
    if mode == "bomb":
        content_type = {"chat": "text/event-stream", "models": "application/json", "metrics": "text/plain"}[kind]
        await _send(writer, 200, gzip_bomb(), content_type, **{"Content-Encoding": "gzip"})
        return
    if kind == "models":
        await _send(writer, 200, _models(), "application/json")
    elif kind == "metrics":
        body = (
            _huge_metrics() if mode == "metrics" else f'vllm:num_requests_running{{model_name="{MODEL}"}} 2\n'.encode()
        )
        await _send(writer, 200, body, "text/plain")
    elif mode == "bomberr":
        await _send(writer, 500, gzip_bomb(), "application/json", **{"Content-Encoding": "gzip"})
    elif mode == "hugeerr":
        await _send(writer, 500, b'{"error": {"message": "' + b"e" * (50 * 1024 * 1024) + b'"}}', "application/json")
    elif mode == "endless":
        await _endless(writer)
    elif mode == "garbage":
        await _send(writer, 200, b'{"choices": [{"message": {"content": "unfinished', "application/json")
    elif mode == "wrongshape":
        await _send(writer, 200, json.dumps({"result": "no choices here"}).encode(), "application/json")
    else:
        await _send(writer, 200, _chunk("Hello") + _chunk("", "stop") + b"data: [DONE]\n\n", "text/event-stream")


async def _handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    try:
        head = await reader.readuntil(b"\r\n\r\n")
        request_line, *header_lines = head.decode("latin-1").split("\r\n")
        path = request_line.split(" ")[1]
        length = 0
        for line in header_lines:
            name, _, value = line.partition(":")
            if name.strip().lower() == "content-length":
                length = int(value.strip())
        if length:
            await reader.readexactly(length)
        mode = path.strip("/").split("/", 1)[0]
        await _answer(mode, path, writer)
    except (ConnectionError, asyncio.IncompleteReadError, asyncio.LimitOverrunError):
        pass  # the launcher hung up: what these modes expect
    finally:
        with contextlib.suppress(Exception):
            writer.close()


async def _main() -> None:
    gzip_bomb()
    server = await asyncio.start_server(_handle, "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]
    print(f"PORT {port}", flush=True)
    async with server:
        await server.serve_forever()


if __name__ == "__main__":
    try:
        asyncio.run(_main())
    except KeyboardInterrupt:
        sys.exit(0)
