"""Runs the enabled MCP servers with the official `mcp` SDK and calls their tools for the chat.

Every server lives on one asyncio event loop in a daemon thread of its own, never the caller's:
a server that is slow to start, hangs or crashes cannot block the window. Each server is one
task that holds the SDK's `Client` open from the handshake until `stop()` (the SDK's transports
are context managers whose cancel scopes must be entered and left by the same task). Callers on
other threads reach it through `asyncio.run_coroutine_threadsafe`; `call` blocks its (worker)
thread and never raises: a timeout, a crash or an unknown tool is a `ToolResult` with
`is_error=True` and a message naming the server and what it last wrote on stderr.

A stdio server gets only the SDK's minimal environment (`mcp.client.stdio.get_default_environment`:
HOME, LOGNAME, PATH, SHELL, TERM, USER on POSIX) plus the `env` its config gives: never this app's
(no HF_TOKEN, no LAUNCHER_API_KEY). Its stderr goes to a pipe read here, for the Settings page's
log and for error messages, and the end of that pipe is how an idle server's crash is noticed:
the SDK hides the process, and the pipe ends when the server and every child it started have gone.
Stopping is the SDK's: close stdin, then SIGTERM and SIGKILL to the whole process group.
"""

from __future__ import annotations

import asyncio
import atexit
import collections
import concurrent.futures
import contextlib
import hashlib
import json
import logging
import math
import os
import re
import threading
import time
import weakref
from collections.abc import AsyncIterator, Callable, Mapping
from contextlib import AbstractAsyncContextManager, asynccontextmanager
from dataclasses import dataclass, field
from typing import Any, BinaryIO, Literal

import anyio
import anyio.to_thread
import httpx2
import mcp_types
from mcp.client import Client
from mcp.client._transport import TransportStreams
from mcp.client.sse import sse_client
from mcp.client.stdio import StdioServerParameters, stdio_client
from mcp.client.streamable_http import streamable_http_client
from mcp.shared.exceptions import MCPError

from launcher.chat.mcp_config import McpServer, resolve_secrets
from launcher.core.errors import LauncherError, in_context

log = logging.getLogger(__name__)

State = Literal["stopped", "starting", "ready", "failed"]
STDERR_LINES = 40
_QUALIFIED = re.compile(r"[^a-zA-Z0-9_-]")
_CALL_GRACE_S = 5.0  # beyond a call's own timeout, before the caller's thread gives up on the host
_STOP_TIMEOUT_S = 20.0  # the SDK's stdio shutdown is bounded by ~6 s (stdin close, SIGTERM, SIGKILL)
_ABANDONED_CALL_S = 30.0  # a call whose answer was given up on is cancelled after this, at the latest
_CANCEL_POLL_S = 0.05  # how soon a set cancel event answers a waiting caller
_STDERR_SETTLE_S = 3.0  # how long a crash waits for the rest of the server's stderr, for its message


@dataclass(frozen=True)
class ToolInfo:
    """One tool of one server; `qualified` is the name the model sees (`<server>__<tool>`)."""

    server: str
    name: str
    description: str
    input_schema: dict[str, Any]
    qualified: str


@dataclass(frozen=True)
class ServerState:
    """What a server is doing: its tools when ready, the reason when failed, its last stderr lines."""

    name: str
    state: State
    tools: tuple[ToolInfo, ...] = ()
    error: str | None = None
    stderr: str = ""


@dataclass(frozen=True)
class ToolResult:
    """A tool call's text for the model, and whether it is an error (the model is told either way)."""

    text: str
    is_error: bool


class _StderrTail:
    """The last lines a stdio server wrote on stderr, read by a thread from a pipe until it ends."""

    def __init__(self, read_fd: int, on_end: Callable[[], None]) -> None:
        self._lines: collections.deque[str] = collections.deque(maxlen=STDERR_LINES)
        self._partial = ""
        self._lock = threading.Lock()
        self.ended = threading.Event()
        self._on_end = on_end
        self._reader = os.fdopen(read_fd, "rb", buffering=0)
        self._thread = threading.Thread(target=self._read, name="mcp-stderr", daemon=True)
        self._thread.start()

    def join(self, timeout: float) -> None:
        """Wait for the pipe's end (the server and its children have gone) up to `timeout` seconds."""
        self._thread.join(timeout)

    def _read(self) -> None:
        reader: BinaryIO = self._reader
        try:
            while chunk := reader.read(4096):
                self._add(chunk.decode("utf-8", "replace"))
        except OSError:
            pass
        finally:
            reader.close()
            with self._lock:
                if self._partial:
                    self._lines.append(self._partial)
                    self._partial = ""
            self.ended.set()
            self._on_end()

    def _add(self, text: str) -> None:
        with self._lock:
            lines = (self._partial + text).split("\n")
            self._partial = lines.pop()
            self._lines.extend(line.rstrip("\r") for line in lines)

    def text(self) -> str:
        with self._lock:
            return "\n".join([*self._lines, *([self._partial] if self._partial else [])])


@dataclass
class _Running:
    """One server's task and what it shares with callers."""

    config: McpServer
    client: Client | None = None
    stderr: _StderrTail | None = None
    scope: anyio.CancelScope | None = None
    stopping: bool = False
    exited: asyncio.Event = field(default_factory=asyncio.Event)
    tools: dict[str, ToolInfo] = field(default_factory=dict)  # by qualified name
    http_error: str | None = None  # the last HTTP error status a remote server answered (the SDK drops it)
    future: concurrent.futures.Future[None] | None = None

    def stderr_text(self) -> str:
        return self.stderr.text() if self.stderr else ""


class ToolApprovals:
    """The tools the user said "Always allow" for, as the session's `always_allowed`.

    Kept by (server, tool): the tool the model's name stood for when the user decided, not the name,
    which another configuration may give to another server's tool. Forgotten when the host's servers
    were stopped or replaced (`McpHost.generation`): a server of the same name may now run something
    else. Read from the chat's worker thread, reset from the UI thread: guarded by a lock.
    """

    def __init__(self, host: McpHost | None = None) -> None:
        self._lock = threading.Lock()
        self._host = host
        self._generation = host.generation if host is not None else 0
        self._allowed: set[tuple[str, str]] = set()

    def set_host(self, host: McpHost | None) -> None:
        """Another host (or none): nothing approved for the old one holds."""
        with self._lock:
            self._host = host
            self._generation = host.generation if host is not None else 0
            self._allowed.clear()

    def clear(self) -> None:
        with self._lock:
            self._allowed.clear()

    def __contains__(self, qualified: object) -> bool:
        tool = self._resolve(qualified)
        with self._lock:
            return tool is not None and (tool.server, tool.name) in self._allowed

    def add(self, qualified: str) -> None:
        tool = self._resolve(qualified)
        if tool is not None:  # a name that stands for no tool now is never approved
            with self._lock:
                self._allowed.add((tool.server, tool.name))

    def __len__(self) -> int:
        self._resolve(None)
        with self._lock:
            return len(self._allowed)

    def _resolve(self, qualified: object) -> ToolInfo | None:
        """The tool `qualified` stands for now; None (and nothing approved any more) once the host
        restarted since the approvals were given, even if it restarts while this looks."""
        host = self._host
        generation = host.generation if host is not None else 0
        tool = host.resolve(qualified) if host is not None and isinstance(qualified, str) else None
        with self._lock:
            if host is None or host is not self._host:
                return None
            if generation != self._generation or host.generation != generation:
                self._generation = host.generation
                self._allowed.clear()
                return None
        return tool


class McpHost:
    """The enabled servers of one configuration, connected in the background."""

    def __init__(self, servers: Mapping[str, McpServer], *, start_timeout_s: float = 30.0) -> None:
        self._servers = dict(servers)
        self._prefixes = server_prefixes(self._servers)
        self._generation = 0  # one more at every stop: the servers, and what a tool name means, may change
        self._start_timeout_s = start_timeout_s
        self._lock = threading.Lock()
        self._changed = threading.Condition(self._lock)
        self._lifecycle = threading.RLock()  # one start, stop or restart at a time (a UI worker restarts)
        self._closed = False
        self._states = {name: ServerState(name, "stopped") for name in self._servers}
        self._callbacks: list[Callable[[ServerState], None]] = []
        self._loop: asyncio.AbstractEventLoop | None = None
        self._thread: threading.Thread | None = None
        self._running: dict[str, _Running] = {}
        self._calls: set[asyncio.Future[mcp_types.CallToolResult]] = set()  # on the host's loop
        self._waiting: set[concurrent.futures.Future[ToolResult]] = set()  # callers blocked in call()
        self._at_exit = _stop_at_exit(self)

    # -- lifecycle ---------------------------------------------------------------------------------

    def start(self) -> None:
        """Connect every enabled server, concurrently, in the host's thread; returns at once."""
        with self._lifecycle:
            self._start()

    def _start(self) -> None:
        with self._lock:
            if self._loop is not None or self._closed:
                return
            loop = asyncio.new_event_loop()
            self._loop = loop
        ready = threading.Event()

        def run_loop() -> None:
            asyncio.set_event_loop(loop)
            loop.call_soon(ready.set)
            loop.run_forever()

        self._thread = threading.Thread(target=run_loop, name="mcp-host", daemon=True)
        self._thread.start()
        ready.wait()
        atexit.register(self._at_exit)
        for name, config in self._servers.items():
            if not config.enabled:
                continue
            running = _Running(config)  # its asyncio.Event binds to the host's loop when first awaited
            self._running[name] = running
            self._set(name, "starting")
            running.future = asyncio.run_coroutine_threadsafe(self._serve(running), loop)

    def wait_ready(self, timeout: float) -> None:
        """Wait until no server is still starting (each is ready or failed), or `timeout` seconds."""
        with self._changed:
            self._changed.wait_for(
                lambda: all(state.state != "starting" for state in self._states.values()), timeout=timeout
            )

    def stop(self) -> None:
        """End every server (stdio children are stopped, their process groups killed if they linger)
        and the host's thread. The states become "stopped"; the host can be started again. Blocks
        for up to a few seconds while a server that ignores its closed stdin is terminated."""
        with self._lifecycle:
            self._stop()

    def _stop(self) -> None:
        with self._lock:
            loop, thread = self._loop, self._thread
            running = list(self._running.values())
        if loop is None:
            return
        atexit.unregister(self._at_exit)
        for run in running:
            loop.call_soon_threadsafe(_cancel, run)
        futures = [run.future for run in running if run.future is not None]
        concurrent.futures.wait(futures, timeout=_STOP_TIMEOUT_S)
        with self._lock:
            waiting = list(self._waiting)
        for future in waiting:  # a caller still blocked gets its answer now, not at its timeout
            future.cancel()
        with contextlib.suppress(Exception):  # those and the calls given up on end before the loop does
            asyncio.run_coroutine_threadsafe(self._end_calls(), loop).result(timeout=_STOP_TIMEOUT_S)
        loop.call_soon_threadsafe(loop.stop)
        if thread is not None:
            thread.join(timeout=_STOP_TIMEOUT_S)
        if not loop.is_running():
            loop.close()
        for run in running:  # the pipes ended with the processes: their readers are finishing
            if run.stderr is not None:
                run.stderr.join(_STDERR_SETTLE_S)
        with self._lock:
            self._loop = self._thread = None
            self._running = {}
            self._generation += 1
        for name in self._servers:
            stderr = next((run.stderr_text() for run in running if run.config.name == name), "")
            self._set(name, "stopped", stderr=stderr)

    def close(self) -> None:
        """Stop for good, as the app quits: a restart still queued (Settings changed the servers just
        before) starts nothing afterwards."""
        with self._lifecycle:
            self._closed = True
            self._stop()

    def restart(self, servers: Mapping[str, McpServer]) -> None:
        """Stop, take a new configuration (Settings changed it), and start again; callbacks stay.
        Blocking like `stop`: a UI calls it from a worker."""
        with self._lifecycle:
            self._stop()
            with self._lock:
                self._servers = dict(servers)
                self._prefixes = server_prefixes(self._servers)
                self._generation += 1
                self._states = {name: ServerState(name, "stopped") for name in self._servers}
            self._start()

    # -- what callers read -------------------------------------------------------------------------

    def states(self) -> dict[str, ServerState]:
        """Every configured server's state, enabled or not, in configuration order."""
        with self._lock:
            states = dict(self._states)
            running = dict(self._running)
        # the stderr tail moves on while a server runs: read it now, not when the state last changed
        return {
            name: _with_stderr(state, running[name].stderr_text()) if name in running else state
            for name, state in states.items()
        }

    def tools(self) -> list[ToolInfo]:
        """The tools of the ready servers."""
        with self._lock:
            return [tool for state in self._states.values() if state.state == "ready" for tool in state.tools]

    def resolve(self, qualified: str) -> ToolInfo | None:
        """The ready tool the model's name stands for now (None: no such tool)."""
        return next((tool for tool in self.tools() if tool.qualified == qualified), None)

    @property
    def generation(self) -> int:
        """A number that changes whenever the servers were stopped or replaced (restart, stop): what
        was decided about their tools (an "Always allow") no longer holds after it changes."""
        with self._lock:
            return self._generation

    def openai_tools(self) -> list[dict[str, Any]]:
        """The ready servers' tools as OpenAI chat `tools` entries (our server renders them in the
        model's template)."""
        return [
            {
                "type": "function",
                "function": {
                    "name": tool.qualified,
                    "description": tool.description or f"The {tool.name} tool of the MCP server {tool.server}.",
                    "parameters": tool.input_schema or {"type": "object", "properties": {}},
                },
            }
            for tool in self.tools()
        ]

    def on_change(self, callback: Callable[[ServerState], None]) -> None:
        """Call `callback(state)` whenever a server's state changes; from the host's thread (a Qt
        caller forwards it with a queued signal)."""
        with self._lock:
            self._callbacks.append(callback)

    # -- calls -------------------------------------------------------------------------------------

    def call(
        self,
        qualified: str,
        arguments: dict[str, Any],
        *,
        timeout_s: float | None = None,
        cancel: threading.Event | None = None,
    ) -> ToolResult:
        """Run one tool and wait for its result (blocking: call it from a worker thread). Never raises:
        every failure is an error result whose text says what happened. A set `cancel` (the user's
        Stop) answers at once and cancels the call on the host (the SDK tells the server)."""
        with self._lock:
            loop = self._loop
            found = next(
                ((run, run.tools[qualified]) for run in self._running.values() if qualified in run.tools), None
            )
        if found is None:
            known = ", ".join(tool.qualified for tool in self.tools()) or "none"
            return ToolResult(f"There is no tool named {qualified!r} (the MCP servers' tools: {known}).", True)
        run, tool = found
        if loop is None or threading.current_thread() is self._thread:
            return ToolResult(f"The MCP servers are not running, so {qualified} cannot run.", True)
        limit = timeout_s if timeout_s is not None else run.config.timeout_s
        try:
            future = asyncio.run_coroutine_threadsafe(self._call(run, tool, arguments, limit), loop)
        except RuntimeError:  # the loop stopped in between
            return ToolResult(f"The MCP servers were stopped, so {qualified} did not run.", True)
        with self._lock:
            self._waiting.add(future)
        try:
            return _wait(future, limit + _CALL_GRACE_S, cancel)
        except concurrent.futures.TimeoutError:
            future.cancel()
            if cancel is not None and cancel.is_set():
                return ToolResult(_cancelled(tool), True)
            return ToolResult(_timed_out(tool, limit), True)
        except concurrent.futures.CancelledError:  # stop() ended it
            return ToolResult(_stopped_during(tool), True)
        except Exception as err:  # the promise: a call never raises into the UI
            log.exception("MCP call %s failed", qualified)
            return ToolResult(f"The tool {tool.name} of MCP server {tool.server} failed: {_describe(err)}", True)
        finally:
            with self._lock:
                self._waiting.discard(future)

    async def _call(self, run: _Running, tool: ToolInfo, arguments: dict[str, Any], limit: float) -> ToolResult:
        client = run.client
        if client is None:
            state = self._states.get(tool.server)
            why = state.error if state is not None and state.error else "it was stopped"
            return ToolResult(in_context(f"The MCP server {tool.server} is not running", why), True)
        # The SDK's own timeout ends the call and tells the server to cancel it, but that notice may
        # take seconds to reach a busy HTTP server: the answer does not wait for it, the task finishes
        # in the background (and is cancelled outright should the SDK's clock somehow not end it).
        task = asyncio.ensure_future(client.call_tool(tool.name, arguments, read_timeout_seconds=limit))
        self._calls.add(task)
        task.add_done_callback(self._call_done)
        try:
            done, _ = await asyncio.wait({task}, timeout=limit + 0.5)
        except asyncio.CancelledError:  # the caller stopped (or the host stops): the call ends too
            task.cancel()
            raise
        if not done:
            asyncio.get_running_loop().call_later(_ABANDONED_CALL_S, task.cancel)
            return ToolResult(_timed_out(tool, limit), True)
        try:
            result = task.result()
        except MCPError as err:
            if err.code == mcp_types.REQUEST_TIMEOUT:
                return ToolResult(_timed_out(tool, limit), True)
            if err.code == mcp_types.CONNECTION_CLOSED:
                return ToolResult(await self._connection_lost(run, tool), True)
            return ToolResult(f"The tool {tool.name} of MCP server {tool.server} failed: {err.message}", True)
        except (httpx2.HTTPError, OSError, anyio.BrokenResourceError, anyio.ClosedResourceError):
            return ToolResult(await self._connection_lost(run, tool), True)
        except Exception as err:  # a malformed answer, say: still a result, never an exception
            log.exception("MCP call %s failed", tool.qualified)
            return ToolResult(f"The tool {tool.name} of MCP server {tool.server} failed: {_describe(err)}", True)
        return ToolResult(result_text(result), result.is_error)

    def _call_done(self, task: asyncio.Future[mcp_types.CallToolResult]) -> None:
        self._calls.discard(task)
        if not task.cancelled():
            task.exception()  # read, so an abandoned call's timeout is not reported as never retrieved

    async def _connection_lost(self, run: _Running, tool: ToolInfo) -> str:
        """The message for a call whose server went away; the server is marked failed."""
        if run.stopping:  # the app stopped it: not the server's failure
            return _stopped_during(tool)
        if run.stderr is not None:  # its last words come after the connection closed: wait for them
            with anyio.move_on_after(_STDERR_SETTLE_S):
                await run.exited.wait()
        what = "stopped" if run.config.transport == "stdio" else "could not be reached"
        error = f"The MCP server {tool.server} {what} while running {tool.name}."
        self._set(tool.server, "failed", error=error, stderr=run.stderr_text())
        run.client = None
        return _with_tail(error, run.stderr_text())

    # -- one server's life -------------------------------------------------------------------------

    async def _serve(self, run: _Running) -> None:
        name = run.config.name
        try:
            config = await anyio.to_thread.run_sync(resolve_secrets, run.config)  # a keyring may block
        except LauncherError as err:
            self._set(name, "failed", error=str(err))
            return
        started = False
        # One scope for the whole life: its deadline is the start timeout until the server is ready.
        # (A timeout scope around the handshake alone would close before the SDK's task groups.)
        with anyio.CancelScope(deadline=anyio.current_time() + self._start_timeout_s) as scope:
            run.scope = scope
            if run.stopping:
                scope.cancel()
            try:
                async with Client(self._transport(config, run), client_info=_CLIENT_INFO) as client:
                    tools = await _list_tools(client)
                    scope.deadline = math.inf
                    run.tools = self._name_tools(name, tools)
                    run.client = client
                    started = True
                    self._set(name, "ready", tools=tuple(run.tools.values()))
                    await run.exited.wait()  # the process ended (stdio); HTTP servers wait for stop
                    run.client = None
                    if not run.stopping:
                        self._set(
                            name,
                            "failed",
                            error=f"The MCP server {name} stopped (its process ended).",
                            stderr=run.stderr_text(),
                        )
            except Exception as err:
                if not run.stopping and self._states[name].state != "failed":
                    await self._failed_to_start(run, err)
        if scope.cancelled_caught and not started and not run.stopping:
            await self._failed_to_start(run, None)

    async def _failed_to_start(self, run: _Running, err: BaseException | None) -> None:
        name = run.config.name
        if run.stderr is not None:  # a server that exits at start says why on stderr: wait for it
            with anyio.move_on_after(_STDERR_SETTLE_S):
                await run.exited.wait()
        err = _leaf(err) if err is not None else None
        if err is None:
            error = f"The MCP server {name} did not answer within {self._start_timeout_s:g} s of starting."
        elif isinstance(err, OSError) and run.config.transport == "stdio":
            error = f"The MCP server {name} could not be started ({run.config.command}: {_describe(err)})."
        elif isinstance(err, MCPError) and err.code == mcp_types.CONNECTION_CLOSED:
            error = f"The MCP server {name} ended before it answered."
        elif run.http_error is not None:
            hint = " (check the token or key in its headers)" if run.http_error.split()[1] in ("401", "403") else ""
            error = f"The MCP server {name} answered {run.http_error}{hint}."
        else:
            error = f"The MCP server {name} could not be connected: {_describe(err)}"
        self._set(name, "failed", error=error, stderr=run.stderr_text())

    def _transport(self, config: McpServer, run: _Running) -> AbstractAsyncContextManager[TransportStreams]:
        if config.transport == "stdio":
            return self._stdio(config, run)
        if config.transport == "sse":
            assert config.url is not None
            return sse_client(config.url, headers=config.headers or None)
        return _streamable_http(config, run)

    @asynccontextmanager
    async def _stdio(self, config: McpServer, run: _Running) -> AsyncIterator[TransportStreams]:
        assert config.command is not None
        loop = asyncio.get_running_loop()
        read_fd, write_fd = os.pipe()

        def ended() -> None:  # on the reader's thread
            with contextlib.suppress(RuntimeError):  # the host stopped and closed its loop first
                loop.call_soon_threadsafe(run.exited.set)

        run.stderr = _StderrTail(read_fd, ended)
        errlog = os.fdopen(write_fd, "w")
        params = StdioServerParameters(command=config.command, args=config.args, env=config.env, cwd=config.cwd)
        try:
            async with stdio_client(params, errlog=errlog) as streams:
                errlog.close()  # the child holds its own copy: the pipe now ends when the server does
                yield streams
        finally:
            errlog.close()

    async def _end_calls(self) -> None:
        calls = list(self._calls)
        for task in calls:
            task.cancel()
        if calls:
            await asyncio.wait(calls, timeout=_STDERR_SETTLE_S)

    def _name_tools(self, server: str, tools: list[mcp_types.Tool]) -> dict[str, ToolInfo]:
        """The tools by the names the model sees: `<server>__<tool>` as ^[a-zA-Z0-9_-]{1,64}$, unique
        across servers. The names depend on the configuration alone, never on which server became
        ready first: an "Always allow" and the model's history must mean the same tool after a
        restart (see `qualified_names`)."""
        with self._lock:
            prefixes = dict(self._prefixes)
            taken = {q for name, run in self._running.items() if name != server for q in run.tools}
        named = qualified_names(server, [tool.name for tool in tools], prefixes)
        infos: dict[str, ToolInfo] = {}
        for tool in tools:
            qualified, number = named[tool.name], 1
            while qualified in taken or qualified in infos:  # a hash collision only: names stay unique
                number += 1
                suffix = f"_{number}"
                qualified = named[tool.name][: _MAX_NAME - len(suffix)] + suffix
            infos[qualified] = ToolInfo(server, tool.name, tool.description or "", dict(tool.input_schema), qualified)
        return infos

    def _set(
        self,
        name: str,
        state: State,
        *,
        tools: tuple[ToolInfo, ...] = (),
        error: str | None = None,
        stderr: str = "",
    ) -> None:
        new = ServerState(name, state, tools, error, stderr)
        with self._changed:
            if name not in self._states:
                return
            self._states[name] = new
            self._changed.notify_all()
            callbacks = list(self._callbacks)
        for callback in callbacks:
            try:
                callback(new)
            except Exception:  # a listener's bug must not stop the host
                log.exception("an MCP state listener failed")


_CLIENT_INFO = mcp_types.Implementation(name="launcher-chat", version="1")
_MAX_NAME = 64  # OpenAI's limit for a function name
_MAX_PREFIX = 40  # leaves the tool's own name room within the 64


def server_prefixes(servers: Mapping[str, McpServer]) -> dict[str, str]:
    """Each configured server's sanitized name, unique in configuration order: "fs.write" then
    "fs_write" give "fs_write" and "fs_write_2" whichever starts first."""
    prefixes: dict[str, str] = {}
    for name in servers:
        base = _QUALIFIED.sub("_", name)[:_MAX_PREFIX] or "server"
        prefix, number = base, 1
        while prefix in prefixes.values():
            number += 1
            prefix = f"{base[: _MAX_PREFIX - len(str(number)) - 1]}_{number}"
        prefixes[name] = prefix
    return prefixes


def qualified_names(server: str, tool_names: list[str], prefixes: Mapping[str, str]) -> dict[str, str]:
    """The names the model sees for one server's tools, from the configuration alone: its unique
    prefix, "__", the tool's sanitized name. A name that is cut to 64 characters, or that another
    server's names could also spell (a prefix that is this name's start, as "a" + "b__c" and "a__b" +
    "c"), ends with a hash of the server and tool instead; two tools of one server that sanitize
    alike are told apart in the server's own listing order."""
    own = prefixes[server]
    others = [prefix for name, prefix in prefixes.items() if name != server]
    names: dict[str, str] = {}
    for tool in tool_names:
        full = f"{own}__{_QUALIFIED.sub('_', tool)}"
        if len(full) > _MAX_NAME or any(full.startswith(f"{prefix}__") for prefix in others):
            digest = hashlib.sha256(f"{server}\0{tool}".encode()).hexdigest()[:8]
            full = f"{full[: _MAX_NAME - 9]}_{digest}"
        qualified, number = full, 1
        while qualified in names.values():
            number += 1
            suffix = f"_{number}"
            qualified = full[: _MAX_NAME - len(suffix)] + suffix
        names[tool] = qualified
    return names


def _cancel(run: _Running) -> None:
    """On the host's loop: end one server's task (the SDK's exit then stops its process)."""
    run.stopping = True
    run.client = None
    if run.scope is not None:
        run.scope.cancel()


@asynccontextmanager
async def _streamable_http(config: McpServer, run: _Running) -> AsyncIterator[TransportStreams]:
    assert config.url is not None

    async def note_error(response: httpx2.Response) -> None:
        # the SDK turns a 401 into "Server returned an error response": keep the status to say why
        if response.status_code >= 400:
            run.http_error = f"HTTP {response.status_code} {response.reason_phrase}".strip()

    # the SDK's default timeouts (30 s, 300 s for a held-open stream), plus the config's headers
    timeout = httpx2.Timeout(30.0, read=300.0)
    hooks = {"response": [note_error]}
    async with (
        httpx2.AsyncClient(headers=config.headers, timeout=timeout, event_hooks=hooks) as http,
        streamable_http_client(config.url, http_client=http) as streams,
    ):
        yield streams


async def _list_tools(client: Client) -> list[mcp_types.Tool]:
    """Every page of the server's tool list (bounded, so a server that pages forever cannot hang it)."""
    tools: list[mcp_types.Tool] = []
    cursor: str | None = None
    for _ in range(100):
        page = await client.list_tools(cursor=cursor)
        tools.extend(page.tools)
        cursor = page.next_cursor
        if cursor is None:
            break
    return tools


def result_text(result: mcp_types.CallToolResult) -> str:
    """A tool result as text for the model: text parts as they are, other parts described."""
    parts: list[str] = []
    for block in result.content:
        if isinstance(block, mcp_types.TextContent):
            parts.append(block.text)
        elif isinstance(block, mcp_types.ImageContent | mcp_types.AudioContent):
            parts.append(f"[{block.type}: {block.mime_type}, {len(block.data) * 3 // 4} bytes]")
        elif isinstance(block, mcp_types.EmbeddedResource):
            resource = block.resource
            if isinstance(resource, mcp_types.TextResourceContents):
                parts.append(resource.text)
            else:
                parts.append(f"[resource {resource.uri}: {resource.mime_type or 'binary'}]")
        elif isinstance(block, mcp_types.ResourceLink):
            parts.append(f"[resource link: {block.uri}]")
    if not parts and result.structured_content is not None:
        parts.append(json.dumps(result.structured_content, ensure_ascii=False))
    return "\n".join(parts)


def _wait(future: concurrent.futures.Future[ToolResult], timeout: float, cancel: threading.Event | None) -> ToolResult:
    """The call's result; TimeoutError at `timeout`, or as soon as `cancel` is set."""
    if cancel is None:
        return future.result(timeout=timeout)
    deadline = time.monotonic() + timeout
    while not cancel.is_set():
        remaining = deadline - time.monotonic()
        if remaining <= 0:
            break
        done, _ = concurrent.futures.wait([future], timeout=min(_CANCEL_POLL_S, remaining))
        if done:
            return future.result()
    raise concurrent.futures.TimeoutError


def _cancelled(tool: ToolInfo) -> str:
    return f"Stopped: the user stopped the turn while {tool.name} of MCP server {tool.server} ran."


def _timed_out(tool: ToolInfo, limit: float) -> str:
    return (
        f"The tool {tool.name} of MCP server {tool.server} did not finish within {limit:g} s, so the call was "
        "given up (Settings > MCP servers sets a server's timeout)."
    )


def _stopped_during(tool: ToolInfo) -> str:
    return f"The MCP servers were stopped while {tool.name} of {tool.server} ran."


def _with_tail(message: str, stderr: str) -> str:
    tail = "\n".join(stderr.strip().splitlines()[-10:])
    return f"{message}\nIts last output:\n{tail}" if tail else message


def _with_stderr(state: ServerState, stderr: str) -> ServerState:
    return ServerState(state.name, state.state, state.tools, state.error, stderr or state.stderr)


def _leaf(err: BaseException) -> BaseException:
    """The first exception inside exception groups (anyio's task groups wrap what their tasks raise)."""
    while isinstance(err, BaseExceptionGroup) and err.exceptions:
        err = err.exceptions[0]
    return err


def _describe(err: BaseException) -> str:
    """An exception as one readable line."""
    err = _leaf(err)
    if isinstance(err, MCPError):
        return err.message
    text = str(err).strip()
    return f"{type(err).__name__}: {text}" if text else type(err).__name__


def _stop_at_exit(host: McpHost) -> Callable[[], None]:
    """An atexit hook that stops the host if the app ends without doing so (stdio children must not
    outlive it), without keeping a forgotten host alive."""
    ref = weakref.ref(host)

    def stop() -> None:
        alive = ref()
        if alive is not None:
            with contextlib.suppress(Exception):
                alive.stop()

    return stop
