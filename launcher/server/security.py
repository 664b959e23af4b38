"""Who may talk to the server: a Host-header check, an Origin check and the API key.

The Host check defends a loopback server against DNS rebinding (a web page on evil.com
resolving its name to 127.0.0.1): only localhost names and the bound host are accepted.
The Origin check stops a web page the user merely visits from spending this machine's compute:
a browser may send a "simple" cross-site POST without asking first, and it always says which
page sent it in `Origin`. Agents, SDKs and editors' extension hosts send no Origin; a web app
that should call the server is allowed with `--cors-origins`.
A non-loopback bind requires an API key instead (the CLI generates one if none is given).
Pure ASGI so streaming and disconnect detection pass through untouched.
"""

from __future__ import annotations

import hmac
import json

from starlette.types import ASGIApp, Receive, Scope, Send

from launcher.server.errors import error_body

OPEN_PATHS = frozenset({"/health", "/"})
LOOPBACK_NAMES = frozenset({"localhost", "127.0.0.1", "[::1]", "::1"})


def _host_name(host_header: str) -> str:
    host = host_header.strip().lower()
    if host.startswith("["):
        return host[: host.find("]") + 1] if "]" in host else host
    return host.rsplit(":", 1)[0] if host.count(":") == 1 else host


def key_matches(expected: str, headers: dict[bytes, bytes]) -> bool:
    """True when the request carries the key as `Authorization: Bearer KEY` or `x-api-key: KEY`."""
    candidates = []
    auth = headers.get(b"authorization", b"").decode("latin-1")
    if auth.lower().startswith("bearer "):
        candidates.append(auth[7:].strip())
    api_key = headers.get(b"x-api-key")
    if api_key is not None:
        candidates.append(api_key.decode("latin-1").strip())
    want = expected.encode()
    # compare_digest on every candidate so timing does not reveal which header matched
    results = [hmac.compare_digest(c.encode(), want) for c in candidates]
    return any(results)


def origin_allowed(origin: str, host_header: str, cors_origins: list[str]) -> bool:
    """True for a page of this server itself, or one listed in `--cors-origins` (`*`: any)."""
    if "*" in cors_origins or origin in cors_origins:
        return True
    scheme, _, rest = origin.partition("://")
    return scheme in ("http", "https") and rest.lower() == host_header.strip().lower()


class SecurityMiddleware:
    """Rejects requests with a foreign Host header (loopback binds), from a foreign web page, or
    without the API key."""

    def __init__(
        self,
        app: ASGIApp,
        *,
        api_key: str | None,
        allowed_hosts: set[str] | None,
        cors_origins: list[str] | None = None,
    ) -> None:
        self.app = app
        self.api_key = api_key
        self.allowed_hosts = {h.lower() for h in allowed_hosts} if allowed_hosts is not None else None
        self.cors_origins = list(cors_origins or [])

    async def _reject(
        self, scope: Scope, send: Send, status: int, message: str, extra: list[tuple[bytes, bytes]]
    ) -> None:
        body = json.dumps(error_body(scope.get("path", ""), status, message)).encode()
        headers = [(b"content-type", b"application/json"), (b"content-length", str(len(body)).encode()), *extra]
        await send({"type": "http.response.start", "status": status, "headers": headers})
        await send({"type": "http.response.body", "body": body})

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        """Check, then pass through."""
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        headers = dict(scope.get("headers", []))
        if self.allowed_hosts is not None:
            host = _host_name(headers.get(b"host", b"").decode("latin-1"))
            if host not in self.allowed_hosts:
                message = f"Host {host!r} is not allowed (this server only answers on its own address)."
                await self._reject(scope, send, 403, message, [])
                return
        origin = headers.get(b"origin")
        if origin is not None:
            page = origin.decode("latin-1")
            if not origin_allowed(page, headers.get(b"host", b"").decode("latin-1"), self.cors_origins):
                message = (
                    f"Requests from the web page origin {page!r} are refused, so that sites you visit cannot use "
                    f"this server. To allow a web app, start the server with --cors-origins {page}."
                )
                await self._reject(scope, send, 403, message, [])
                return
        needs_key = bool(self.api_key) and scope.get("method") != "OPTIONS" and scope.get("path") not in OPEN_PATHS
        if needs_key and not key_matches(str(self.api_key), headers):
            message = "Missing or wrong API key: send it as 'Authorization: Bearer KEY' or 'x-api-key: KEY'."
            await self._reject(scope, send, 401, message, [(b"www-authenticate", b"Bearer")])
            return
        await self.app(scope, receive, send)


def allowed_hosts_for(host: str, is_loopback: bool) -> set[str] | None:
    """Host names accepted for a server bound to `host` (None: no check, e.g. bound to all interfaces)."""
    if not is_loopback:
        return None
    names = set(LOOPBACK_NAMES)
    names.add(host.lower())
    names.add(f"[{host.lower()}]")
    return names
