"""An MCP server the tests define with the official SDK (`mcp.server.mcpserver.MCPServer`), to drive the
Chat page's MCP host through real servers over both transports it speaks.

    python demo_server.py stdio                       the stdio transport (a child of the host)
    python demo_server.py http --port N [--token T]   Streamable HTTP on 127.0.0.1:N at /mcp (0: any free
                                                      port); prints "DEMO_READY <port>" once it listens.
                                                      With --token, a request needs "Authorization: Bearer T".
    python demo_server.py broken                      writes why on stderr and exits 2 before speaking MCP
    python demo_server.py mute                        starts but never answers (a server that hangs)

Tools: add(a, b), slow(seconds), crash() (the process dies at once, after a line on stderr),
echo_env(name) (what the server's environment holds), pid() (its process id, so a test can check
that it is gone after the host stopped).
"""

from __future__ import annotations

import argparse
import os
import socket
import sys
from typing import Any

import anyio
from mcp.server.mcpserver import MCPServer

server = MCPServer("demo", instructions="A demo server for the launcher's tests.", log_level="WARNING")


@server.tool()
def add(a: float, b: float) -> str:
    """Add two numbers."""
    return f"{a + b:g}"


@server.tool()
async def slow(seconds: float) -> str:
    """Wait `seconds`, then answer."""
    print(f"demo server: slow started ({seconds:g} s)", file=sys.stderr, flush=True)  # tests wait for this line
    await anyio.sleep(seconds)
    return f"slept {seconds:g} s"


@server.tool()
def crash() -> str:
    """End the server's process at once, as a crashing server does."""
    print("demo server: crashing on purpose (the crash tool)", file=sys.stderr, flush=True)
    os._exit(3)


@server.tool()
def echo_env(name: str) -> str:
    """The value of the environment variable `name` in the server's process."""
    value = os.environ.get(name)
    return f"{name} is not set" if value is None else f"{name}={value}"


@server.tool()
def pid() -> str:
    """The server's process id."""
    return str(os.getpid())


def _require_token(app: Any, token: str) -> Any:
    """The app behind a bearer-token check, as a hosted server that needs a key does."""
    expected = f"Bearer {token}".encode()

    async def guarded(scope: dict[str, Any], receive: Any, send: Any) -> None:
        if scope["type"] == "http" and dict(scope["headers"]).get(b"authorization") != expected:
            await send({"type": "http.response.start", "status": 401, "headers": [(b"content-type", b"text/plain")]})
            await send({"type": "http.response.body", "body": b"missing or wrong token"})
            return
        await app(scope, receive, send)

    return guarded


def serve_http(port: int, token: str | None) -> None:
    import uvicorn

    app = server.streamable_http_app()
    # bound and listening before the ready line, so a client that reads it can connect at once
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind(("127.0.0.1", port))
    sock.listen(64)
    config = uvicorn.Config(_require_token(app, token) if token else app, log_level="warning", lifespan="on")
    print(f"DEMO_READY {sock.getsockname()[1]}", flush=True)
    uvicorn.Server(config).run(sockets=[sock])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("mode", choices=["stdio", "http", "broken", "mute"])
    parser.add_argument("--port", type=int, default=0)
    parser.add_argument("--token")
    args = parser.parse_args()
    if args.mode == "stdio":
        server.run("stdio")
    elif args.mode == "http":
        serve_http(args.port, args.token)
    elif args.mode == "broken":
        print("demo server: cannot start: DEMO_CONFIG is missing", file=sys.stderr, flush=True)
        sys.exit(2)
    else:
        sys.stdin.buffer.read()  # never answers; ends when the host closes its stdin


if __name__ == "__main__":
    main()
