"""`launcher launch AGENT [MODEL] [-- AGENT ARGS...]`: run a coding agent wired to a local server, in one command.

    launcher launch claude-code                      # the running server, or one started for this run
    launcher launch codex qwen3-coder-30b            # a server that serves (or loads) that model
    launcher launch opencode -- run "fix the tests"  # everything after -- goes to the agent
    launcher launch aider --keep-server              # leave the started server running afterwards

The agent is configured for this run only (environment, its own flags, a temporary file); its
config files are left as they are unless --write is given. Its exit code is launch's; a server
launch started stops when the agent exits.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import signal
import sys
from collections.abc import Callable, Iterator
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from launcher.core.server_records import ServerRecord
    from launcher.integrations.agents.base import Agent
    from launcher.integrations.endpoint import Endpoint
    from launcher.integrations.launch import StartedServer

from launcher.cli import PASSTHROUGH_DEST as PASSTHROUGH  # the words after `--`, split off before parsing


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """Flags for `launcher launch`."""
    from launcher.integrations.agents import AGENTS

    parser.add_argument("agent", help=", ".join(a.id for a in AGENTS.values() if a.run_config is not None))
    parser.add_argument(
        "model",
        nargs="?",
        help="the model to use: a running server's model name, or what `launcher serve` takes "
        "(default: the running server's model, else the server's default)",
    )
    parser.add_argument("--url", help="use the server at this URL instead of looking for one")
    parser.add_argument("--api-key", help="the server's API key (default: $LAUNCHER_API_KEY, else the settings')")
    parser.add_argument("--api-key-file", help="read the server's API key from the first line of this file")
    parser.add_argument("--keep-server", action="store_true", help="leave a server launch started running")
    parser.add_argument(
        "--write", action="store_true", help="also write the agent's config files for good (as `connect --write`)"
    )
    parser.set_defaults(**{PASSTHROUGH: []})


def run(args: argparse.Namespace) -> int:
    """Find or start the server, run the agent, stop what we started."""
    from launcher.integrations import launch
    from launcher.integrations.agents import get_agent
    from launcher.integrations.endpoint import discover_endpoint
    from launcher.integrations.setup import context_warnings

    agent = get_agent(args.agent)
    command = launch.find_command(agent)
    api_key = _api_key(args)
    started: StartedServer | None = None
    try:
        with _ended_by_hangup_or_term():
            if args.url:
                base_url, model = args.url, args.model
            else:
                base_url, model, started = _server(args, api_key)
            endpoint = discover_endpoint(base_url, api_key, model)  # id, context, small model
            context = f"{endpoint.context_length:,}-token context" if endpoint.context_length else "context unknown"
            launch.say(f"{agent.name} -> {endpoint.model_id} at {endpoint.base_url} ({context})")
            for warning in context_warnings(agent.name, agent.min_context, endpoint.context_length):
                launch.say(f"warning: {warning}")
            if args.write:
                _write(agent, endpoint, kept=started is None or args.keep_server)
            return launch.run_agent(agent, command, endpoint, getattr(args, PASSTHROUGH))
    finally:
        if started is not None and (note := started.exit_note()):
            launch.say(f"warning: {note}")
        if started is not None and args.keep_server:
            started.detach()
            launch.say(f"The server keeps running at {started.base_url} (pid {started.process.pid}).")
        elif started is not None:
            started.stop()


@contextlib.contextmanager
def _ended_by_hangup_or_term() -> Iterator[None]:
    """A closed terminal window (SIGHUP) or a kill (SIGTERM) ends launch through its `finally`, so the
    server it started is stopped and the run folder removed; by default either signal would end the
    process on the spot. (Linux would stop the server anyway through its parent-death signal; macOS
    and a SIGTERM'd launch would not.)"""

    def end(signum: int, frame: object) -> None:
        raise SystemExit(128 + signum)

    names = [name for name in ("SIGHUP", "SIGTERM") if hasattr(signal, name)]
    previous = {name: signal.signal(getattr(signal, name), end) for name in names}
    try:
        yield
    finally:
        for name, handler in previous.items():
            signal.signal(getattr(signal, name), handler)


def _server(args: argparse.Namespace, api_key: str | None) -> tuple[str, str | None, StartedServer | None]:
    """(base URL, model, the server we started or None): a running server for the model, else a new one."""
    from launcher.integrations import launch

    found = _running_server_for(args.model, api_key)
    if found is not None:
        return found.base_url, args.model or found.model, None
    what = args.model or "the default model"
    if args.model is None:
        launch.say(
            "No model named and no server running: starting the server's default (the starter, a tiny demo "
            "model, unless your settings name one). Name a model for real work: `launcher launch AGENT MODEL`; "
            "`launcher recommend` lists what fits this machine."
        )
    started = launch.start_server(args.model, keep=args.keep_server, progress=_progress(what))
    if sys.stderr.isatty():
        sys.stderr.write("\r\033[K")  # the progress line gives way to the ready line
    launch.say(f"Server ready at {started.base_url} (log: {started.log_path}).")
    return started.base_url, str(started.ready.get("model") or "") or None, started


def _running_server_for(model: str | None, api_key: str | None) -> ServerRecord | None:
    """A running server for MODEL, with MODEL loaded (so the agent learns its real context window).

    First one whose run file names MODEL; else (no MODEL, or one its run file cannot know: pulled
    after it started) the server on the default port or the newest, if it loads MODEL: a second
    server beside a running one would compete with it for the same memory.
    """
    from launcher.core.config import DEFAULT_PORT
    from launcher.core.errors import ServerError
    from launcher.core.server_records import preferred_server, running_servers
    from launcher.integrations import launch

    record = launch.find_server(model) if model else None
    named = record is not None
    if record is None:  # no model named (any server will do), or none names it
        record = preferred_server(running_servers(), DEFAULT_PORT)
    if record is None:
        return None
    if record.api_key_required and not api_key:
        raise ServerError(
            f"the server at {record.url} needs an API key: pass --api-key or --api-key-file, or set $LAUNCHER_API_KEY"
        )
    wanted = model or record.model
    if wanted is not None:
        launch.say(f"Loading {wanted} on the server at {record.url} (pid {record.pid})...")
        try:
            launch.preload(record, wanted, api_key)  # at once when it is loaded already
        except ServerError as err:
            if named:
                raise
            launch.say(f"It cannot serve {wanted} ({err}); starting a server for it.")
            return None
    launch.say(f"Using the server at {record.url} (pid {record.pid}).")
    return record


def _progress(what: str) -> Callable[[str, float], None]:
    """The progress line while the server starts: rewritten in place on a terminal, else each new stage once."""
    from launcher.integrations import launch

    on_terminal = sys.stderr.isatty()
    last_stage: list[str] = []

    def show(stage: str, seconds: float) -> None:
        line = f"Starting a server for {what}: {stage[:80]} ({seconds:.0f} s)"
        if on_terminal:
            sys.stderr.write("\r\033[K" + line)
            sys.stderr.flush()
        elif last_stage[-1:] != [stage]:
            last_stage.append(stage)
            launch.say(line)

    return show


def _api_key(args: argparse.Namespace) -> str | None:
    """--api-key, else --api-key-file, else $LAUNCHER_API_KEY, else the key the settings give `launcher serve`."""
    from launcher.cli.serve import api_key_of
    from launcher.core import settings
    from launcher.core.config import API_KEY_ENV, ServeConfig

    if args.api_key:
        return str(args.api_key)
    if args.api_key_file:
        return api_key_of(ServeConfig(api_key_file=args.api_key_file))
    if os.environ.get(API_KEY_ENV, "").strip():
        return os.environ[API_KEY_ENV].strip()
    return api_key_of(settings.load().serve)


def _write(agent: Agent, endpoint: Endpoint, *, kept: bool) -> None:
    """`--write`: the agent's config files too, for good, as `launcher connect --write` writes them."""
    from pathlib import Path

    from launcher.integrations import launch
    from launcher.integrations.writer import apply_edit

    for edit in agent.setup_for(endpoint).config_edits:
        launch.say(str(apply_edit(edit, home=Path.home())))
    if not kept:
        launch.say(
            f"note: the config now points at {endpoint.base_url}, which stops with this run; "
            "use --keep-server, or `launcher serve` on its default port, for a lasting setup"
        )
