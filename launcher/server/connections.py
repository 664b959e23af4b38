"""Connection limits uvicorn does not have: a deadline for a request's headers and a cap on connections.

uvicorn waits forever for the first request on a new connection, so clients that connect and
never finish their headers (or send them a byte at a time) hold a file descriptor each until the
process runs out and even /health stops answering. Here:
- a connection must complete a request's headers within `HEADER_TIMEOUT_S` of opening (or of
  its previous response, plus the keep-alive idle time), or it is closed;
- at most `max_connections` are open. Past the cap, the oldest connection that is not serving a
  request (never sent one, or idle between requests) is closed to make room, else the one sending
  its request body the slowest (uploaders hold no work yet; a client trickling a body would
  otherwise hold its place for the whole body deadline, while a steady upload is let finish),
  so idle or trickling clients cannot lock out a real one; only when every connection is being
  served does a newcomer get a 503.
Request bodies have their own deadline where they are read (`body.py`).

A connection closed while the client is still sending (a refused upload: 413, 408, 415, or the 503
above) is closed the way HTTP/1.1 asks (RFC 9112 9.6, "lingering close"): the answer is sent, then our side
is shut for writing (a FIN after the answer), and what the client still sends is read and dropped
until it stops or `LINGER_S` pass. Closing at once with unread data would make the kernel reset the
connection, and a reset can reach the client before the answer does, which then sees a dropped
connection instead of its 413.

This subclasses uvicorn's h11 protocol (always installed with uvicorn) and uses its `cycle`,
`transport` and `on_response_complete`; tests/server/test_connections.py pins that behaviour.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import socket
import sys
import time
from typing import Any, cast

import h11
from uvicorn.protocols.http.h11_impl import H11Protocol

log = logging.getLogger(__name__)

HEADER_TIMEOUT_S = 10.0
LINGER_S = 5.0
"""How long a refused upload's connection keeps reading (and dropping) what the client sends after our
answer: enough for a client on loopback or a LAN to finish a 32 MiB write and read the answer."""
KEEPALIVE_S = 30
"""How long an idle kept-alive connection stays open: longer than any Retry-After the server sends
(generation.MAX_RETRY_AFTER_S), so a client that waits as told retries on its kept connection."""

_BUSY_BODY = json.dumps(
    {
        "error": {
            "message": "The server has too many open connections; retry shortly.",
            "type": "server_unavailable",
            "param": None,
            "code": "too_many_connections",
        }
    }
).encode()
_BUSY_RESPONSE = (
    b"HTTP/1.1 503 Service Unavailable\r\ncontent-type: application/json\r\nretry-after: 1\r\n"
    b"connection: close\r\ncontent-length: " + str(len(_BUSY_BODY)).encode() + b"\r\n\r\n" + _BUSY_BODY
)


class _LingeringTransport:
    """The connection's transport as uvicorn sees it: `close()` lingers while the client is mid-upload.

    uvicorn closes the transport itself once a `Connection: close` answer is written; this is the
    one place every such close passes through. Everything else goes to the real transport.
    """

    def __init__(self, transport: asyncio.Transport, protocol: GuardedH11Protocol) -> None:
        self._transport = transport
        self._protocol = protocol
        self.lingering = False

    def close(self) -> None:
        if self.lingering or self._transport.is_closing():
            return
        if self._protocol.conn.their_state is h11.SEND_BODY and self._transport.can_write_eof():
            self.linger()
        else:
            self._transport.close()

    def linger(self) -> None:
        """Shut our side after what is written, drop what still arrives, close when the client stops."""
        self.lingering = True
        self._transport.write_eof()
        self._transport.resume_reading()
        self._protocol.loop.call_later(LINGER_S, self._transport.close)

    def close_now(self) -> None:
        """Close without lingering (an evicted connection must free its place at once)."""
        self._transport.close()

    def is_closing(self) -> bool:
        return self.lingering or self._transport.is_closing()

    def __getattr__(self, name: str) -> Any:
        return getattr(self._transport, name)


class GuardedH11Protocol(H11Protocol):
    """uvicorn's h11 protocol with a header deadline and the connection cap (set by `guarded_protocol`)."""

    max_connections = 1024
    header_timeout_s = HEADER_TIMEOUT_S

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._deadline: asyncio.TimerHandle | None = None
        self._idle_since: float | None = None  # set while no request is in progress
        self._seen_cycle: object = None
        self._refused = False
        self._request_since = 0.0  # when the request in progress began
        self._request_bytes = 0  # what arrived for it so far (its upload rate picks whom to evict)

    def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
        """Register, make room under the cap (or refuse), and start the header deadline."""
        _no_delay(transport)
        self._linger = _LingeringTransport(transport, self)
        super().connection_made(cast(asyncio.Transport, self._linger))
        self._idle(self.header_timeout_s)
        if len(self.connections) > self.max_connections and not self._evict_idle():
            log.warning("refused a connection: %d open, all serving requests", len(self.connections) - 1)
            self._refused = True
            self._busy()
            transport.write(_BUSY_RESPONSE)
            self._linger.linger()  # the client's request is read and dropped, then the answer is seen

    def data_received(self, data: bytes) -> None:
        """Read as uvicorn does; a request whose headers are complete stops the deadline. Once the
        connection lingers, what arrives is dropped."""
        if self._refused or self._linger.lingering:
            return
        super().data_received(data)
        if self.cycle is not None and self.cycle is not self._seen_cycle:
            self._seen_cycle = self.cycle
            self._request_since = time.monotonic()
            self._request_bytes = 0
            self._busy()
        self._request_bytes += len(data)

    def _upload_rate(self, now: float) -> float:
        """Bytes per second the request in progress has arrived at (its first second counted as one)."""
        return self._request_bytes / max(1.0, now - self._request_since)

    def on_response_complete(self) -> None:
        """Idle again: the next request's headers are due within the keep-alive time plus the deadline."""
        super().on_response_complete()
        if not self.transport.is_closing() and self.cycle is self._seen_cycle:
            self._idle(self.timeout_keep_alive + self.header_timeout_s)

    def connection_lost(self, exc: Exception | None) -> None:
        """Stop the deadline, then uvicorn's cleanup."""
        self._busy()
        super().connection_lost(exc)

    def _idle(self, timeout: float) -> None:
        self._busy()
        self._idle_since = time.monotonic()
        self._deadline = self.loop.call_later(timeout, self._expire)

    def _busy(self) -> None:
        self._idle_since = None
        if self._deadline is not None:
            self._deadline.cancel()
            self._deadline = None

    def _expire(self) -> None:
        self._deadline = None
        if self._idle_since is not None and not self.transport.is_closing():
            self.transport.close()

    def _evict_idle(self) -> bool:
        """Make room: close the longest-idle other connection, else the slowest one whose request body
        is still arriving (no work has started for it); False if every other one is being served."""
        others = [c for c in self.connections if c is not self and isinstance(c, GuardedH11Protocol)]
        open_ = [c for c in others if not c._refused and not c._linger.lingering]
        idle = [c for c in open_ if c._idle_since is not None]
        if idle:
            victim = min(idle, key=lambda c: c._idle_since or 0.0)
        else:
            uploading = [c for c in open_ if c.conn.their_state is h11.SEND_BODY]
            if not uploading:
                return False
            now = time.monotonic()
            victim = min(uploading, key=lambda c: (c._upload_rate(now), c._request_since))
        victim._busy()
        victim._linger.close_now()
        return True


def _no_delay(transport: asyncio.BaseTransport) -> None:
    """Send small writes at once (TCP_NODELAY). With Nagle's algorithm on, a response's last small
    write waits for the ACK of the one before, which a client delays by up to 40 ms: on a kept-alive
    connection every request would pay that. asyncio's own loop sets it already; other loops may not."""
    sock = transport.get_extra_info("socket")
    if sock is not None and sock.family in (socket.AF_INET, socket.AF_INET6):
        with contextlib.suppress(OSError):
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)


def guarded_protocol(max_connections: int, header_timeout_s: float = HEADER_TIMEOUT_S) -> type[GuardedH11Protocol]:
    """The protocol class for uvicorn's `http=` setting with these limits."""
    return type(
        "GuardedH11Protocol",
        (GuardedH11Protocol,),
        {"max_connections": max_connections, "header_timeout_s": header_timeout_s},
    )


def raise_file_limit(max_connections: int) -> int:
    """Let the process hold `max_connections` sockets plus its own files; returns the connection cap
    the file limit allows (lower than asked, with a warning, where the system's hard limit is low)."""
    if sys.platform == "win32":
        return max_connections
    import resource

    wanted = max_connections + 256  # model files, pipes, the listening socket, threads' handles
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if hard != resource.RLIM_INFINITY and hard < wanted:
        cap = max(8, hard - 256)
        log.warning("the open-file limit is %d, so at most %d connections (asked %d)", hard, cap, max_connections)
        wanted, max_connections = hard, cap
    if soft != resource.RLIM_INFINITY and soft < wanted:
        resource.setrlimit(resource.RLIMIT_NOFILE, (wanted, hard))
    return max_connections
