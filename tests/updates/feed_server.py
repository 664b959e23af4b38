"""A local HTTP server for update tests: it serves a release feed and its files over real loopback HTTP.

    key, public = signing.new_key()
    with FeedServer() as server:
        release = Served("linux-x86_64", "tar.gz", "launcher-0.2.0-linux-x86_64.tar.gz", data)
        url = server.publish("0.2.0", key=key, files=[release])
        monkeypatch.setenv("LAUNCHER_UPDATE_FEED", url)
        ...
        assert server.requests_for("launcher-0.2.0-linux-x86_64.tar.gz")[-1].range == "bytes=100-"

Files are served with Range support (206 and Content-Range for `bytes=N-`), like a release host.
Faults a test can ask for: `truncate(path, at)` announces the whole length but closes the
connection when the file's byte `at` is reached (a dropped transfer; a download retries that by
itself, so `times=DROPS_TO_FAIL` makes one download fail), `serve_instead(path, data)` sends other bytes
than the feed signed (a corrupted transfer or a tampered mirror), `throttle(path, ...)` sends slowly
(progress and cancel), `fail(path, status)` answers an HTTP error. Every request is logged
(`requests`), so a test can show that a refused update fetched no byte, or that a retry resumed.

The feed is built like the release workflow builds it: each file's size, sha256 and an ed25519
signature from `launcher.updates.signing` (no signature when `key` is None, as in a fork's build).
"""

from __future__ import annotations

import hashlib
import http.server
import json
import sys
import threading
import time
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from types import TracebackType
from typing import Any

import pytest

from launcher.catalog import transfer
from launcher.core import paths
from launcher.updates import signing
from launcher.updates.current import this_platform
from launcher.updates.feed import FEED_FILE, FEED_FORMAT

DROPS_TO_FAIL = transfer._RETRIES + 1
"""Dropped transfers in a row that make one download give up: its first try and each retry."""


@dataclass(frozen=True)
class Served:
    """One release file to publish: where it installs, its name and its bytes."""

    platform: str
    kind: str
    name: str
    data: bytes


@dataclass(frozen=True)
class ServedPack:
    """One engine pack to publish (the GPU pack index's fields go in `fields`)."""

    name: str
    data: bytes
    engine_version: str = "b1"
    fields: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class Request:
    """One request the server answered."""

    method: str
    path: str  # without the leading slash
    headers: dict[str, str]

    @property
    def range(self) -> str | None:
        """The Range header, None when the whole file was asked for."""
        return next((value for name, value in self.headers.items() if name.lower() == "range"), None)


def tarball(version: str, data: bytes, *, platform: str | None = None) -> Served:
    """The release file an unpacked (tar.gz) installation updates from, named as scripts/build-app does;
    for this machine's platform unless told another."""
    platform = platform or this_platform()
    return Served(platform, "tar.gz", f"launcher-{version}-{platform}.tar.gz", data)


def fake_build(
    monkeypatch: pytest.MonkeyPatch,
    app_folder: Path | None,
    *,
    version: str = "0.1.0",
    public_key: str | None,
    feed: str | None = None,
) -> dict[str, Any]:
    """Make this process look like a frozen app build: its build_info.json says `version`, carries
    `public_key` (None: a build without a key) and names `feed`; with `app_folder`, sys.frozen is set
    and sys.executable is `app_folder/launcher` (the tar.gz layout; the folder is made). Returns the build info."""
    info: dict[str, Any] = {"version": version}
    if public_key is not None:
        info["update_public_key"] = public_key
    if feed is not None:
        info["update_feed"] = feed
    monkeypatch.setattr(paths, "build_info", lambda: dict(info))
    if app_folder is not None:
        app_folder.mkdir(parents=True, exist_ok=True)
        monkeypatch.setattr(sys, "frozen", True, raising=False)
        monkeypatch.setattr(sys, "executable", str(app_folder / "launcher"))
    return info


def sha256(data: bytes) -> str:
    """Hex sha256, as the feed lists it."""
    return hashlib.sha256(data).hexdigest()


def file_entry(version: str, served: Served, *, key: str | None, url: str | None = None) -> dict[str, Any]:
    """The feed's entry for a release file, signed with `key` (a base64 seed; None: unsigned)."""
    entry: dict[str, Any] = {
        "platform": served.platform,
        "kind": served.kind,
        "name": served.name,
        "url": url or served.name,
        "size": len(served.data),
        "sha256": sha256(served.data),
    }
    if key is not None:
        entry["signature"] = signing.sign(
            signing.private_key(key),
            version,
            served.name,
            len(served.data),
            sha256(served.data),
            purpose=signing.file_purpose(served.platform, served.kind),
        )
    return entry


def pack_entry(version: str, pack: ServedPack, *, key: str | None, url: str | None = None) -> dict[str, Any]:
    """The feed's entry for an engine pack, signed over (release version, pack name, size, sha256) as a pack."""
    entry: dict[str, Any] = {
        **pack.fields,
        "name": pack.name,
        "url": url or f"{pack.name}.tar.gz",
        "size_bytes": len(pack.data),
        "sha256": sha256(pack.data),
        "engine_version": pack.engine_version,
    }
    if key is not None:
        digest = sha256(pack.data)
        entry["signature"] = signing.sign(
            signing.private_key(key), version, pack.name, len(pack.data), digest, purpose=signing.PACK_PURPOSE
        )
    return entry


@dataclass
class _Fault:
    truncate_at: int | None = None
    truncate_times: int = 0
    status: int | None = None
    chunk: int = 0
    delay_s: float = 0.0


class FeedServer:
    """Serves files from memory on 127.0.0.1 (a free port); use as a context manager, or start()/stop()."""

    def __init__(self) -> None:
        self.files: dict[str, bytes] = {}
        self.requests: list[Request] = []
        self._faults: dict[str, _Fault] = {}
        self._lock = threading.Lock()
        self._httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _handler_for(self))
        self._httpd.daemon_threads = True
        self._thread: threading.Thread | None = None

    # -- lifecycle -------------------------------------------------------------------------------

    @property
    def base_url(self) -> str:
        """http://127.0.0.1:PORT/"""
        return f"http://127.0.0.1:{self._httpd.server_address[1]}/"

    def url(self, path: str) -> str:
        """The URL of a served path."""
        return self.base_url + path.lstrip("/")

    def start(self) -> FeedServer:
        """Serve on a background thread."""
        # A short poll: stopping waits for the serving loop to notice, once per test.
        self._thread = threading.Thread(
            target=self._httpd.serve_forever, kwargs={"poll_interval": 0.02}, name="feed-server", daemon=True
        )
        self._thread.start()
        return self

    def stop(self) -> None:
        """Stop serving and close the socket."""
        if self._thread is not None:
            self._httpd.shutdown()
            self._thread.join(timeout=10)
            self._thread = None
        self._httpd.server_close()

    def __enter__(self) -> FeedServer:
        return self.start()

    def __exit__(self, kind: type[BaseException] | None, error: BaseException | None, tb: TracebackType | None) -> None:
        self.stop()

    # -- content ---------------------------------------------------------------------------------

    def add(self, path: str, data: bytes) -> str:
        """Serve `data` at `path`; returns its URL."""
        with self._lock:
            self.files[path.lstrip("/")] = data
        return self.url(path)

    def publish(
        self,
        version: str,
        *,
        key: str | None,
        files: Iterable[Served] = (),
        packs: Iterable[ServedPack] = (),
        date: str = "2026-12-02",
        notes: str = "",
        path: str = FEED_FILE,
        extra: dict[str, Any] | None = None,
    ) -> str:
        """Serve the files and a feed listing them (URLs relative to the feed, as a release's are);
        returns the feed URL."""
        files, packs = list(files), list(packs)
        for served in files:
            self.add(served.name, served.data)
        for pack in packs:
            self.add(f"{pack.name}.tar.gz", pack.data)
        feed: dict[str, Any] = {
            "feed": FEED_FORMAT,
            "version": version,
            "date": date,
            "notes": notes,
            "files": [file_entry(version, served, key=key) for served in files],
            "packs": [pack_entry(version, pack, key=key) for pack in packs],
            **(extra or {}),
        }
        return self.add(path, json.dumps(feed, indent=2).encode())

    # -- faults ----------------------------------------------------------------------------------

    def truncate(self, path: str, at: int, *, times: int = 1) -> None:
        """The next `times` responses for `path` announce the whole length but close the connection
        when the file's byte `at` is reached (a response that starts there sends no body at all)."""
        with self._lock:
            fault = self._faults.setdefault(path.lstrip("/"), _Fault())
            fault.truncate_at, fault.truncate_times = at, times

    def serve_instead(self, path: str, data: bytes) -> None:
        """Serve other bytes at `path` than the feed says (it keeps its size, sha256 and signature)."""
        self.add(path, data)

    def throttle(self, path: str, *, chunk: int, delay_s: float) -> None:
        """Send `path` in `chunk`-byte pieces with `delay_s` between them."""
        with self._lock:
            fault = self._faults.setdefault(path.lstrip("/"), _Fault())
            fault.chunk, fault.delay_s = chunk, delay_s

    def fail(self, path: str, status: int | None) -> None:
        """Answer `path` with this HTTP status (None: serve it again)."""
        with self._lock:
            self._faults.setdefault(path.lstrip("/"), _Fault()).status = status

    def requests_for(self, path: str) -> list[Request]:
        """The requests for one path, in order."""
        with self._lock:
            return [request for request in self.requests if request.path == path.lstrip("/")]

    # -- serving (the handler's thread) ------------------------------------------------------------

    def _answer(self, handler: http.server.BaseHTTPRequestHandler, *, body: bool) -> None:
        path = handler.path.split("?", 1)[0].lstrip("/")
        with self._lock:
            self.requests.append(Request(handler.command, path, dict(handler.headers.items())))
            data = self.files.get(path)
            fault = self._faults.get(path, _Fault())
            cut = fault.truncate_at if fault.truncate_times > 0 and body else None
            if cut is not None:
                fault.truncate_times -= 1
        if fault.status is not None:
            handler.send_error(fault.status)
            return
        if data is None:
            handler.send_error(404)
            return
        start = _range_start(handler.headers.get("Range"), len(data))
        if start is None:
            handler.send_response(416)
            handler.send_header("Content-Range", f"bytes */{len(data)}")
            handler.send_header("Content-Length", "0")
            handler.end_headers()
            return
        handler.send_response(206 if start else 200)
        if start:
            handler.send_header("Content-Range", f"bytes {start}-{len(data) - 1}/{len(data)}")
        handler.send_header("Content-Type", "application/octet-stream")
        handler.send_header("Content-Length", str(len(data) - start))
        handler.send_header("Accept-Ranges", "bytes")
        handler.end_headers()
        if not body:
            return
        payload = data[start:] if cut is None else data[start : max(cut, start)]
        step = fault.chunk or len(payload) or 1
        try:
            for offset in range(0, len(payload), step):
                handler.wfile.write(payload[offset : offset + step])
                handler.wfile.flush()
                if fault.delay_s:
                    time.sleep(fault.delay_s)
        except (BrokenPipeError, ConnectionResetError):
            pass  # the client went away (a cancelled download)
        if cut is not None:
            handler.close_connection = True


def _range_start(header: str | None, size: int) -> int | None:
    """The first byte asked for (0 without Range); None when the range cannot be served."""
    if not header:
        return 0
    unit, _, spec = header.partition("=")
    first, _, _last = spec.partition("-")
    if unit.strip() != "bytes" or not first.strip().isdigit():
        return None
    start = int(first)
    return start if start < size else None


def _handler_for(server: FeedServer) -> type[http.server.BaseHTTPRequestHandler]:
    class Handler(http.server.BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def do_GET(self) -> None:  # http.server's name
            server._answer(self, body=True)

        def do_HEAD(self) -> None:  # http.server's name
            server._answer(self, body=False)

        def log_message(self, format: str, *args: Any) -> None:
            pass  # the request log is `server.requests`; stderr stays quiet

    return Handler
