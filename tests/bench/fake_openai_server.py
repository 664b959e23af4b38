"""A small but real OpenAI-shaped streaming server for the bench runner tests.

Stands in until `launcher serve` can be started on the tiny model in every checkout: a real
FastAPI app on real uvicorn (port 0) that streams one chunk per word with fixed delays, so
the runner's timing, usage and concurrency handling are exercised over real HTTP.
"""

from __future__ import annotations

import asyncio
import json
import threading
import time
from collections.abc import AsyncIterator, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

import uvicorn
from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse, PlainTextResponse, StreamingResponse
from prometheus_client import CollectorRegistry, ProcessCollector, generate_latest

MODEL_ID = "fake-model-Q4_K_M"


@dataclass
class FakeServerState:
    """Knobs and observations shared between the test and the app."""

    first_token_delay: float = 0.05
    token_delay: float = 0.002
    send_usage: bool = True
    # A prompt of at least `stall_prompt_words` words "prefills" for `prefill_stall` seconds before
    # its first token, and every other stream sends nothing meanwhile (an engine without chunked prefill).
    stall_prompt_words: int | None = None
    prefill_stall: float = 0.0
    stalled_until: float = 0.0  # time.monotonic() until which streams hold their next token
    running: int = 0
    max_running: int = 0
    bodies: list[dict[str, Any]] = field(default_factory=list)


def _chunk(content: str | None, finish: str | None = None) -> str:
    delta = {} if content is None else {"content": content}
    payload = {
        "id": "chatcmpl-fake",
        "object": "chat.completion.chunk",
        "created": int(time.time()),
        "model": MODEL_ID,
        "choices": [{"index": 0, "delta": delta, "finish_reason": finish}],
    }
    return f"data: {json.dumps(payload)}\n\n"


async def _hold_while_stalled(state: FakeServerState) -> None:
    while (remaining := state.stalled_until - time.monotonic()) > 0:
        await asyncio.sleep(remaining)


def build_app(state: FakeServerState) -> FastAPI:
    """The app: /v1/models, streaming /v1/chat/completions, /metrics."""
    app = FastAPI()
    registry = CollectorRegistry()
    ProcessCollector(registry=registry)

    @app.get("/v1/models")
    async def models() -> dict[str, Any]:
        return {"object": "list", "data": [{"id": MODEL_ID, "object": "model", "owned_by": "fake-engine"}]}

    @app.get("/metrics")
    async def metrics() -> PlainTextResponse:
        return PlainTextResponse(generate_latest(registry).decode())

    @app.post("/v1/chat/completions", response_model=None)
    async def chat(request: Request) -> StreamingResponse | JSONResponse:
        body = await request.json()
        state.bodies.append(body)
        if body.get("model") not in (None, MODEL_ID):
            return JSONResponse({"error": {"message": "model not found", "type": "invalid_request_error"}}, 404)
        prompt_words = sum(len(str(m["content"]).split()) for m in body["messages"])
        if body.get("response_format", {}).get("type") == "json_schema":
            words = ['{"title": "t", ', '"year": 1, ', '"tags": [], ', '"summary": "s"}']
        else:
            words = [f"w{i} " for i in range(int(body["max_tokens"]))]
        include_usage = state.send_usage and body.get("stream_options", {}).get("include_usage")

        stalls_others = state.stall_prompt_words is not None and prompt_words >= state.stall_prompt_words

        async def stream() -> AsyncIterator[str]:
            state.running += 1
            state.max_running = max(state.max_running, state.running)
            try:
                if stalls_others:
                    state.stalled_until = time.monotonic() + state.prefill_stall
                    await asyncio.sleep(state.prefill_stall)
                await asyncio.sleep(state.first_token_delay)
                for i, word in enumerate(words):
                    if i:
                        await asyncio.sleep(state.token_delay)
                    if not stalls_others:
                        await _hold_while_stalled(state)
                    yield _chunk(word)
                yield _chunk(None, "length")
                if include_usage:
                    usage = {
                        "prompt_tokens": prompt_words + 5,
                        "completion_tokens": len(words),
                        "total_tokens": prompt_words + 5 + len(words),
                    }
                    yield f"data: {json.dumps({'id': 'chatcmpl-fake', 'choices': [], 'usage': usage})}\n\n"
                yield "data: [DONE]\n\n"
            finally:
                state.running -= 1

        return StreamingResponse(stream(), media_type="text/event-stream")

    return app


@contextmanager
def serve_fake(state: FakeServerState) -> Iterator[str]:
    """Run the app on uvicorn, port 0, in a thread; yield its base URL; always stop it."""
    config = uvicorn.Config(build_app(state), host="127.0.0.1", port=0, log_level="warning", lifespan="off")
    server = uvicorn.Server(config)
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    try:
        deadline = time.monotonic() + 20
        while not server.started:
            if not thread.is_alive() or time.monotonic() > deadline:
                raise RuntimeError("fake server did not start")
            time.sleep(0.01)
        port = server.servers[0].sockets[0].getsockname()[1]
        yield f"http://127.0.0.1:{port}/v1"
    finally:
        server.should_exit = True
        thread.join(timeout=20)


if __name__ == "__main__":  # `python -m tests.bench.fake_openai_server PORT`: the same app as a process
    import sys

    uvicorn.run(build_app(FakeServerState()), host="127.0.0.1", port=int(sys.argv[1]), log_level="warning")
