"""Run the app under uvicorn on a socket we bind ourselves (so `--port 0` reports the real port)."""

from __future__ import annotations

import asyncio
import errno
import ipaddress
import json
import logging
import os
import secrets
import socket
import sys
from typing import TYPE_CHECKING, Any

from launcher.core.config import ServeConfig
from launcher.core.errors import ServerError

if TYPE_CHECKING:
    import uvicorn
    from starlette.applications import Starlette

log = logging.getLogger(__name__)


def bind_socket(host: str, port: int) -> socket.socket:
    """A listening socket on host:port; a taken port is a clear ServerError."""
    try:
        family = socket.AF_INET6 if isinstance(ipaddress.ip_address(host), ipaddress.IPv6Address) else socket.AF_INET
    except ValueError:
        family = socket.AF_INET  # a host name such as "localhost"
    sock = socket.socket(family, socket.SOCK_STREAM)
    if sys.platform != "win32":
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        sock.bind((host, port))
        sock.listen(2048)
    except OSError as err:
        sock.close()
        if err.errno == errno.EADDRINUSE:
            raise ServerError(
                f"Port {port} on {host} is already in use (another server, or launcher serve already running). "
                "Choose another with --port N, or --port 0 to pick a free one."
            ) from err
        if err.errno == errno.EADDRNOTAVAIL:
            raise ServerError(f"Cannot bind {host}: this machine has no such address. Check --host.") from err
        raise ServerError(f"Cannot listen on {host}:{port}: {err.strerror or err}") from err
    sock.setblocking(False)
    return sock


def public_url(host: str, port: int) -> str:
    """The URL clients on this machine use for a server bound to host:port."""
    if host in ("0.0.0.0", ""):
        host = "127.0.0.1"
    elif host == "::":
        host = "::1"
    if ":" in host:
        host = f"[{host}]"
    return f"http://{host}:{port}"


def uvicorn_server(app: Starlette, config: ServeConfig, **overrides: Any) -> uvicorn.Server:
    """The uvicorn server for `app` with the launcher's connection limits and a graceful stop."""
    import uvicorn

    from launcher.server.connections import KEEPALIVE_S, guarded_protocol, raise_file_limit

    state = app.state.server

    class DrainingServer(uvicorn.Server):
        """On a stop signal, running streams get their proper end before connections close."""

        async def shutdown(self, sockets: list[socket.socket] | None = None) -> None:
            await state.drain()
            await super().shutdown(sockets)

    settings: dict[str, Any] = {
        # uvicorn follows `launcher --log-level` (its startup chatter only from INFO down)
        "log_level": "info" if logging.getLogger().isEnabledFor(logging.INFO) else "warning",
        "access_log": False,
        "lifespan": "on",
        "timeout_graceful_shutdown": 3,
        "timeout_keep_alive": KEEPALIVE_S,
        "http": guarded_protocol(raise_file_limit(config.max_connections)),
    }
    return DrainingServer(uvicorn.Config(app, **(settings | overrides)))


def serve(config: ServeConfig) -> int:
    """Plan, bind, load (in the background, /health says 503 meanwhile), announce, serve until a signal."""
    from launcher.engines import registry
    from launcher.server.app import create_app
    from launcher.server.planning import plan

    if not config.is_loopback and not config.api_key:
        config = config.model_copy(update={"api_key": secrets.token_urlsafe(24)})
        print(
            f"Binding {config.host} exposes the server to the network; API key required: {config.api_key}",
            file=sys.stderr,
            flush=True,
        )
    if config.log_requests != "off":  # the request log shows at the default WARNING level too, as llama-server's
        logging.getLogger("launcher.requests").setLevel(logging.INFO)
    setup = plan(config)
    config = setup.config
    engine = registry.get(setup.engine)
    sock = bind_socket(config.host, config.port)
    port = sock.getsockname()[1]

    def load() -> object:
        return engine.load(setup.model, config)

    app = create_app(load, config, engine_name=setup.engine, engine_reason=setup.engine_reason)  # type: ignore[arg-type]
    state = app.state.server
    server = uvicorn_server(app, config)
    print(f"Loading {setup.model.name} with {setup.engine} ({setup.engine_reason})...", file=sys.stderr, flush=True)

    async def main() -> int:
        serving = asyncio.create_task(server.serve(sockets=[sock]))
        while not server.started and not serving.done():
            await asyncio.sleep(0.02)
        while not state.loaded.is_set() and not serving.done():
            await asyncio.sleep(0.05)
        if serving.done():
            return 1
        if state.load_error is not None:
            error = state.load_error
            print("LAUNCHER_ERROR " + json.dumps({"kind": type(error).__name__, "message": str(error)}), flush=True)
            print(f"error: {error}", file=sys.stderr, flush=True)
            server.should_exit = True
            await serving
            return int(getattr(error, "exit_code", 1))
        url = public_url(config.host, port)
        info = state.model.info
        ready = {
            "url": url,
            "base_url": f"{url}/v1",
            "model": state.model_id,
            "engine": setup.engine,
            "engine_reason": setup.engine_reason,
            "context_length": info.context_length,
            "parallel": info.parallel,
            "serving": state.serving(),
            "api_key_required": bool(config.api_key),
            "pid": os.getpid(),
        }
        print("LAUNCHER_READY " + json.dumps(ready), flush=True)
        print(f"Serving {state.model_id} on {url}/v1 (Ctrl+C to stop)", file=sys.stderr, flush=True)
        await serving
        return 0

    try:
        return asyncio.run(main())
    finally:
        sock.close()
