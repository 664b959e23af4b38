"""At the connection cap, a client trickling its request body gives way before a steady upload does;
accepted connections send small writes at once (TCP_NODELAY).

The real app and the real uvicorn setup (`runner.uvicorn_server`) with the scripted model.
"""

from __future__ import annotations

import asyncio
import socket
import threading
import time
from typing import Any

import httpx

from launcher.core.config import ServeConfig
from launcher.server.app import create_app
from launcher.server.connections import guarded_protocol
from tests.server.fake_model import FakeModel
from tests.server.harness import running_app

HEAD = b"POST /v1/chat/completions HTTP/1.1\r\nHost: 127.0.0.1\r\ncontent-type: application/json\r\n"


def port_of(url: str) -> int:
    return int(url.rsplit(":", 1)[1])


def closed_by_server(sock: socket.socket) -> bool:
    """True if the server has closed `sock` (EOF or reset), without waiting."""
    sock.setblocking(False)
    try:
        return sock.recv(4096) == b""
    except BlockingIOError:
        return False
    except ConnectionResetError:
        return True
    finally:
        sock.setblocking(True)


def test_at_the_cap_the_slowest_upload_gives_way_not_the_oldest() -> None:
    app = create_app(FakeModel(), ServeConfig(port=0))
    with running_app(app, http=guarded_protocol(4)) as url:
        port = port_of(url)
        size = 400_000
        steady = socket.create_connection(("127.0.0.1", port))
        steady.sendall(HEAD + f"content-length: {size}\r\n\r\n".encode())
        sent = 0
        stop = threading.Event()

        def upload() -> None:  # 20 KB every 50 ms: a steady 400 KB/s, over in 1 s at the end
            nonlocal sent
            while not stop.is_set() and sent < size - 20_000:
                steady.sendall(b" " * 20_000)
                sent += 20_000
                time.sleep(0.05)

        uploader = threading.Thread(target=upload)
        uploader.start()
        time.sleep(0.3)
        tricklers = [socket.create_connection(("127.0.0.1", port)) for _ in range(3)]
        for trickler in tricklers:
            trickler.sendall(HEAD + b"content-length: 1000\r\n\r\n{")
        time.sleep(0.5)
        try:
            assert httpx.get(url + "/health", timeout=10).status_code == 200  # the cap made room
            time.sleep(0.2)
            assert sum(closed_by_server(t) for t in tricklers) == 1
            assert not closed_by_server(steady), "the steady upload was cut for a newcomer"
        finally:
            stop.set()
            uploader.join(timeout=30)
        steady.sendall(b" " * (size - sent - 2) + b"{}")  # the rest: a valid (empty) JSON object
        steady.settimeout(30)
        answer = steady.recv(4096)
        assert answer.startswith(b"HTTP/1.1 "), answer  # answered (a 400 for no messages), not cut
        for sock in [steady, *tricklers]:
            sock.close()


def test_accepted_connections_send_small_writes_at_once() -> None:
    accepted: list[Any] = []

    class Recording(guarded_protocol(64)):  # type: ignore[misc]
        def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
            super().connection_made(transport)
            accepted.append(transport.get_extra_info("socket"))

    app = create_app(FakeModel(), ServeConfig(port=0))
    with running_app(app, http=Recording) as url, httpx.Client() as client:
        for _ in range(3):  # one kept-alive connection
            assert client.get(url + "/health").status_code == 200
        assert len(accepted) == 1
        assert accepted[0].getsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY) != 0
