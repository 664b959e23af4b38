"""A stand-in for a running `launcher serve`, as `launcher bench --calibrate` sees it: /health with its
`serving` object, /metrics with the engine's memory figures, and a chat stream with scripted timings.

Timings are fixed so the measured rates are known: a prompt of at least `long_prompt_words` words
takes `prefill_delay` to its first token, a shorter one `short_delay`; then one chunk every
`decode_delay`. Usage counts one prompt token per word plus `template_tokens`, of which the
template's `template_tokens` are reported as cached, so the uncached prompt tokens are the words.

With `speculative_speedup` set it also speculates: /metrics has the speculative draft counters and a
streaming /v1/completions decodes `speculative_speedup` times faster for a body with "speculative": "auto".
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, PlainTextResponse, Response, StreamingResponse
from starlette.routing import Route

MODEL_ID = "tiny-llama"
MIB = 1024**2


@dataclass
class FakeServe:
    """Knobs and observations shared between a test and the app."""

    model_path: Path
    engine: str = "llamacpp"
    api_key: str | None = None
    report_serving: bool = True
    chat_status: int = 200  # anything else: every chat request fails with it
    decode_delay: float = 0.02
    prefill_delay: float = 0.25
    short_delay: float = 0.01
    long_prompt_words: int = 500
    template_tokens: int = 5
    memory: dict[str, int] = field(
        default_factory=lambda: {"weights": 100 * MIB, "kv_cache": 20 * MIB, "compute": 5 * MIB, "swa_checkpoints": MIB}
    )
    # Set: /metrics also has launcher serve's per-stream decode counters, as timed "in the engine":
    # each stream adds its tokens after the first and that many times this delay.
    server_decode_delay: float | None = None
    stream_decode: list[float] = field(default_factory=lambda: [0.0, 0.0])  # tokens, seconds
    speculative_speedup: float | None = None  # set: speculates (see the module's docstring)
    reject_speculative: bool = False  # a 400 for a body with a `speculative` field, as a strict server
    drafts: list[int] = field(default_factory=lambda: [0, 0])  # drafted, accepted
    bodies: list[dict[str, Any]] = field(default_factory=list)
    completion_bodies: list[dict[str, Any]] = field(default_factory=list)
    health_headers: list[str] = field(default_factory=list)

    def serving(self) -> dict[str, Any]:
        """The contract's `serving` object."""
        return {
            "model_path": str(self.model_path),
            "format": "gguf",
            "context": 4096,
            "parallel": 1,
            "kv_cache_type": "f16",
            "gpu_layers": 0,
            "threads": None,
        }


def _chunk(content: str | None, finish: str | None = None) -> str:
    delta = {} if content is None else {"content": content}
    payload = {
        "id": "c",
        "object": "chat.completion.chunk",
        "model": MODEL_ID,
        "choices": [{"index": 0, "delta": delta, "finish_reason": finish}],
    }
    return f"data: {json.dumps(payload)}\n\n"


def build_app(fake: FakeServe) -> Starlette:
    """/health, /metrics and a streaming /v1/chat/completions."""

    def authorised(request: Request) -> bool:
        return fake.api_key is None or request.headers.get("authorization") == f"Bearer {fake.api_key}"

    async def health(request: Request) -> Response:
        fake.health_headers.append(request.headers.get("authorization", ""))
        if not authorised(request):  # like launcher serve: the status only, without the key
            return JSONResponse({"status": "ok"})
        details: dict[str, Any] = {"model": MODEL_ID, "engine": fake.engine}
        if fake.report_serving:
            details["serving"] = fake.serving()
        return JSONResponse({"status": "ok", **details})

    async def metrics(request: Request) -> Response:
        lines = [
            "# HELP launcher_engine_memory_bytes engine-specific memory",
            "# TYPE launcher_engine_memory_bytes gauge",
            *(f'launcher_engine_memory_bytes{{kind="{kind}"}} {value}' for kind, value in fake.memory.items()),
        ]
        if fake.server_decode_delay is not None:
            tokens, seconds = fake.stream_decode
            lines += [
                "# TYPE launcher_stream_decode_tokens_total counter",
                f"launcher_stream_decode_tokens_total {tokens}",
                "# TYPE launcher_stream_decode_seconds_total counter",
                f"launcher_stream_decode_seconds_total {seconds}",
            ]
        if fake.speculative_speedup is not None:
            lines += [
                "# TYPE launcher_speculative_draft_tokens counter",
                f'launcher_speculative_draft_tokens_total{{model="{MODEL_ID}"}} {fake.drafts[0]}',
                "# TYPE launcher_speculative_accepted_tokens counter",
                f'launcher_speculative_accepted_tokens_total{{model="{MODEL_ID}"}} {fake.drafts[1]}',
            ]
        return PlainTextResponse("\n".join(lines) + "\n")

    async def chat(request: Request) -> Response:
        if not authorised(request):
            return JSONResponse({"error": {"message": "bad key"}}, status_code=401)
        body = await request.json()
        fake.bodies.append(body)
        if fake.chat_status != 200:
            return JSONResponse({"error": {"message": "scripted failure"}}, status_code=fake.chat_status)
        words = sum(len(str(m["content"]).split()) for m in body["messages"])
        first_delay = fake.prefill_delay if words >= fake.long_prompt_words else fake.short_delay

        async def stream() -> AsyncIterator[str]:
            await asyncio.sleep(first_delay)
            for index in range(int(body["max_tokens"])):
                if index:
                    await asyncio.sleep(fake.decode_delay)
                yield _chunk(f"w{index} ")
            yield _chunk(None, "length")
            if fake.server_decode_delay is not None:
                after_first = int(body["max_tokens"]) - 1
                fake.stream_decode[0] += after_first
                fake.stream_decode[1] += after_first * fake.server_decode_delay
            usage = {
                "prompt_tokens": words + fake.template_tokens,
                "completion_tokens": int(body["max_tokens"]),
                "prompt_tokens_details": {"cached_tokens": fake.template_tokens},
            }
            yield f"data: {json.dumps({'id': 'c', 'choices': [], 'usage': usage})}\n\n"
            yield "data: [DONE]\n\n"

        return StreamingResponse(stream(), media_type="text/event-stream")

    async def completions(request: Request) -> Response:
        body = await request.json()
        fake.completion_bodies.append(body)
        if fake.speculative_speedup is None and not fake.reject_speculative:  # a server without speculation
            return JSONResponse({"error": {"message": "not found"}}, status_code=404)
        if fake.reject_speculative and "speculative" in body:
            return JSONResponse({"error": {"message": "unknown field speculative"}}, status_code=400)
        speedup = fake.speculative_speedup if body.get("speculative") == "auto" else None
        tokens = int(body["max_tokens"])

        async def stream() -> AsyncIterator[str]:
            await asyncio.sleep(fake.short_delay)
            for index in range(tokens):
                if index:
                    await asyncio.sleep(fake.decode_delay / (speedup or 1.0))
                yield f"data: {json.dumps({'id': 'c', 'choices': [{'index': 0, 'text': f'x{index} '}]})}\n\n"
            if fake.server_decode_delay is not None:
                fake.stream_decode[0] += tokens - 1
                fake.stream_decode[1] += (tokens - 1) * fake.server_decode_delay / (speedup or 1.0)
            if speedup is not None:
                fake.drafts[0] += tokens
                fake.drafts[1] += tokens // 2
            usage = {"prompt_tokens": 400, "completion_tokens": tokens}
            yield f"data: {json.dumps({'id': 'c', 'choices': [], 'usage': usage})}\n\n"
            yield "data: [DONE]\n\n"

        return StreamingResponse(stream(), media_type="text/event-stream")

    return Starlette(
        routes=[
            Route("/health", health, methods=["GET"]),
            Route("/metrics", metrics, methods=["GET"]),
            Route("/v1/chat/completions", chat, methods=["POST"]),
            Route("/v1/completions", completions, methods=["POST"]),
        ]
    )
