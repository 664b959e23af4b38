"""Run an app under real uvicorn on a loopback port-0 socket in a thread, and always stop it."""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import uvicorn
from starlette.applications import Starlette
from starlette.types import ASGIApp

from launcher.server.runner import bind_socket, uvicorn_server


@contextmanager
def running_app(app: ASGIApp, **settings: Any) -> Iterator[str]:
    """Serve `app` on 127.0.0.1:<free port>; yields the base URL (no /v1).

    The launcher's own app runs with the real server setup (`runner.uvicorn_server`); `settings`
    override its uvicorn settings (e.g. `http=guarded_protocol(8, 0.5)`)."""
    sock = bind_socket("127.0.0.1", 0)
    port = sock.getsockname()[1]
    if isinstance(app, Starlette) and hasattr(app.state, "server"):  # the launcher's app: its real server setup
        server: uvicorn.Server = uvicorn_server(app, app.state.server.config, **({"log_level": "warning"} | settings))
    else:
        server = uvicorn.Server(uvicorn.Config(app, log_level="warning", lifespan="on", timeout_graceful_shutdown=2))
    thread = threading.Thread(target=lambda: asyncio.run(server.serve(sockets=[sock])), daemon=True)
    thread.start()
    deadline = time.monotonic() + 30
    while not server.started:
        if not thread.is_alive() or time.monotonic() > deadline:
            raise RuntimeError("test server did not start")
        time.sleep(0.01)
    try:
        yield f"http://127.0.0.1:{port}"
    finally:
        server.should_exit = True
        thread.join(timeout=30)
        sock.close()
        assert not thread.is_alive(), "test server thread did not stop"
