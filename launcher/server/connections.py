"""Connection limits uvicorn does not have: a deadline for a request's headers and a cap on connections.

uvicorn waits forever for the first request on a new connection, so clients that connect and
never finish their headers (or send them a byte at a time) hold a file descriptor each until the
process runs out and even /health stops answering. Here:
- a connection must complete a request's headers within `HEADER_TIMEOUT_S` of opening (or of
  its previous response, plus the keep-alive idle time), or it is closed;
- at most `max_connections` are open. Past the cap, the oldest connection that is not serving a
  request (never sent one, or idle between requests) is closed to make room, else the oldest one
  still sending its request body (slow uploaders hold no work yet), so idle or trickling clients
  cannot lock out a real one; only when every connection is being served does a newcomer get a 503.
Request bodies have their own deadline where they are read (`body.py`).

This subclasses uvicorn's h11 protocol (always installed with uvicorn) and uses its `cycle`,
`transport` and `on_response_complete`; tests/server/test_connections.py pins that behaviour.
"""

from __future__ import annotations

import asyncio
import json
import logging
import sys
import time
from typing import Any

import h11
from uvicorn.protocols.http.h11_impl import H11Protocol

log = logging.getLogger(__name__)

HEADER_TIMEOUT_S = 10.0
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

    def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
        """Register, make room under the cap (or refuse), and start the header deadline."""
        super().connection_made(transport)
        self._idle(self.header_timeout_s)
        if len(self.connections) > self.max_connections and not self._evict_idle():
            log.warning("refused a connection: %d open, all serving requests", len(self.connections) - 1)
            self._refused = True
            self._busy()
            transport.write(_BUSY_RESPONSE)
            transport.write_eof()
            # Read (and drop) what the client sends meanwhile: closing with unread data would reset
            # the connection, and the client would see a reset instead of the 503.
            self.loop.call_later(1.0, transport.close)

    def data_received(self, data: bytes) -> None:
        """Read as uvicorn does; a request whose headers are complete stops the deadline."""
        if self._refused:
            return
        super().data_received(data)
        if self.cycle is not None and self.cycle is not self._seen_cycle:
            self._seen_cycle = self.cycle
            self._request_since = time.monotonic()
            self._busy()

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
        """Make room: close the longest-idle other connection, else the oldest one whose request body
        is still arriving (no work has started for it); False if every other one is being served."""
        others = [c for c in self.connections if c is not self and isinstance(c, GuardedH11Protocol)]
        idle = [c for c in others if c._idle_since is not None and not c._refused]
        if idle:
            victim = min(idle, key=lambda c: c._idle_since or 0.0)
        else:
            uploading = [c for c in others if c.conn.their_state is h11.SEND_BODY and not c._refused]
            if not uploading:
                return False
            victim = min(uploading, key=lambda c: c._request_since)
        victim._busy()
        victim.transport.close()
        return True


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
