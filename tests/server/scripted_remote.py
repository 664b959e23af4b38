"""A launcher server around a scripted model, standing in for a remote whose exact output a test needs.

The model (tests/server/fake_model.py) is the only stand-in: HTTP, templates, tool-call parsing and
SSE are the real server's. `seen` records each request's path and headers, to show what the proxy
sent (only Chat Completions, with the remote's own key). Run as a module, it serves in a process of
its own (so a test can kill it mid-reply) and prints `PORT <n>` once it listens.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
from dataclasses import dataclass, field

from starlette.applications import Starlette
from starlette.types import ASGIApp, Receive, Scope, Send

from launcher.core.config import ServeConfig
from launcher.server.app import create_app
from launcher.server.runner import bind_socket, uvicorn_server
from tests.fixtures.models import TINY_CHAT_TEMPLATE
from tests.server.fake_model import FakeModel, fake_info

MODEL_ID = "scripted-model"
GREETING = "Hello from the remote."
WEATHER = "It is sunny in Paris."
LONG_REQUEST = "Tell me a long story."
LONG_REPLY = "once upon a time " * 500
WEATHER_CALL = {"name": "get_weather", "arguments": {"city": "Paris"}}


def scripted_reply(prompt: str) -> str:
    """A tool result gets the weather; an offered get_weather tool gets a call to it; LONG_REQUEST a long
    story; anything else the greeting."""
    last_turn = prompt.rsplit("<|im_start|>", 2)[-2] if prompt.count("<|im_start|>") >= 2 else prompt
    if "<tool_response>" in last_turn:
        return WEATHER
    if LONG_REQUEST in last_turn:
        return LONG_REPLY
    if '"name": "get_weather"' in prompt:
        return "<tool_call>\n" + json.dumps(WEATHER_CALL) + "\n</tool_call>"
    return GREETING


@dataclass
class SeenRequest:
    """What the remote received."""

    method: str
    path: str
    headers: dict[str, str] = field(default_factory=dict)


class Recorder:
    """ASGI middleware noting every HTTP request's method, path and headers."""

    def __init__(self, app: ASGIApp, seen: list[SeenRequest]) -> None:
        self.app = app
        self.seen = seen

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http":
            headers = {k.decode("latin-1"): v.decode("latin-1") for k, v in scope["headers"]}
            self.seen.append(SeenRequest(scope["method"], scope["path"], headers))
        await self.app(scope, receive, send)


def scripted_remote(api_key: str | None = None, delay: float = 0.0) -> tuple[Starlette, FakeModel, list[SeenRequest]]:
    """The app, its scripted model and the record of what it received."""
    info = fake_info(id=MODEL_ID, chat_template=TINY_CHAT_TEMPLATE, context_length=100_000)
    model = FakeModel(reply=scripted_reply, delay=delay, info=info)
    app = create_app(model, ServeConfig(port=0, api_key=api_key), name=MODEL_ID)
    seen: list[SeenRequest] = []
    app.add_middleware(Recorder, seen=seen)
    return app, model, seen


def main() -> int:
    """Serve on a free loopback port until killed."""
    parser = argparse.ArgumentParser()
    parser.add_argument("--api-key")
    parser.add_argument("--delay", type=float, default=0.0)
    args = parser.parse_args()
    app, _, _ = scripted_remote(args.api_key, args.delay)
    sock = bind_socket("127.0.0.1", 0)
    server = uvicorn_server(app, app.state.server.config, log_level="warning")
    print(f"PORT {sock.getsockname()[1]}", flush=True)
    asyncio.run(server.serve(sockets=[sock]))
    return 0


if __name__ == "__main__":
    sys.exit(main())
