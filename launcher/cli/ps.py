"""`launcher ps`: the models a running server has loaded, with their memory and activity.

launcher ps                         # every running server (their run files), else the default port
launcher ps --url http://host:8420  # that one
launcher ps --unload qwen3-8b       # free a model now (refused while it answers requests)
launcher ps --load qwen3-8b         # load one before the first request needs it
"""

from __future__ import annotations

import argparse
import json
import os
from typing import Any


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """Flags for `launcher ps`."""
    from launcher.core.config import DEFAULT_PORT

    parser.add_argument(
        "--url",
        help=f"the server (default: every `launcher serve` running here, else port {DEFAULT_PORT}; "
        "--load/--unload: the one serving MODEL)",
    )
    parser.add_argument("--api-key", help="the server's API key (default: $LAUNCHER_API_KEY)")
    action = parser.add_mutually_exclusive_group()
    action.add_argument("--unload", metavar="MODEL", help="unload MODEL now")
    action.add_argument("--load", metavar="MODEL", help="load MODEL now")
    parser.add_argument("--json", action="store_true", help="print the server's answer as JSON")


def _table(listing: dict[str, Any]) -> str:
    from launcher.core.units import format_bytes

    rows = [("MODEL", "ENGINE", "MEMORY", "CONTEXT", "BUSY", "IDLE", "UNLOAD AFTER")]
    for model in listing["models"]:
        ttl = model.get("ttl_seconds")
        idle = "-" if model["busy"] else f"{model['idle_seconds']:.0f} s"
        rows.append(
            (
                model["id"],
                model["engine"],
                format_bytes(model["memory_bytes"]),
                str(model["context_length"]),
                f"{model['requests_running']} running, {model['requests_waiting']} waiting" if model["busy"] else "no",
                idle,
                f"{ttl - model['idle_seconds']:.0f} s" if ttl and not model["busy"] else ("never" if not ttl else "-"),
            )
        )
    widths = [max(len(row[i]) for row in rows) for i in range(len(rows[0]))]
    lines = ["  ".join(cell.ljust(width) for cell, width in zip(row, widths, strict=True)).rstrip() for row in rows]
    if len(rows) == 1:
        lines = ["No model is loaded."]
    budget = listing.get("memory_budget_bytes")
    used = format_bytes(listing.get("memory_used_bytes") or 0)
    lines.append(f"Memory: {used} of {format_bytes(budget)} budget" if budget else f"Memory: {used} estimated")
    remote = listing.get("remote_models", {})
    others = sorted(set(listing.get("available", [])) - {m["id"] for m in listing["models"]} - set(remote))
    if others:
        lines.append(f"Loads on request: {', '.join(others)}")
    for name, where in remote.items():  # served by another server: nothing of theirs is loaded here
        lines.append(f"Remote: {name} -> {where['model']} at {where['url']}")
    return "\n".join(lines)


def run(args: argparse.Namespace) -> int:
    """Ask the server(s) and print the answers."""
    from launcher.core.config import API_KEY_ENV
    from launcher.core.errors import ServerError

    key = args.api_key or os.environ.get(API_KEY_ENV)
    model = args.unload or args.load
    urls = [args.url] if args.url else _running_urls(model)
    if model is not None:  # the first server that can: the model may be loaded in any of them
        failure: ServerError | None = None
        for url in urls:
            try:
                return _ask(args, url.rstrip("/").removesuffix("/v1"), key)
            except ServerError as err:
                failure = failure or err
        assert failure is not None
        raise failure
    code = 0
    for index, url in enumerate(urls):
        if len(urls) > 1:
            print(("\n" if index else "") + f"# {url}")
        code = max(code, _ask(args, url.rstrip("/").removesuffix("/v1"), key))
    return code


def _running_urls(model: str | None) -> list[str]:
    """The servers to ask: every one the run files name (for --load/--unload, those naming MODEL
    first), else the default port, where a server from before run files may still listen."""
    from launcher.core.config import DEFAULT_PORT
    from launcher.core.server_records import running_servers

    servers = running_servers()
    if model is not None:
        servers.sort(key=lambda s: not s.serves(model))  # stable: newest first within each group
    return [s.url for s in servers] or [f"http://127.0.0.1:{DEFAULT_PORT}"]


def _ask(args: argparse.Namespace, base: str, key: str | None) -> int:
    """One server's answer, printed."""
    import httpx

    from launcher.core.errors import ServerError

    headers = {"Authorization": f"Bearer {key}"} if key else {}
    try:
        with httpx.Client(base_url=base, headers=headers, timeout=None if args.load else 30) as client:
            if args.unload or args.load:
                verb = "unload" if args.unload else "load"
                reply = client.post(f"/launcher/models/{verb}", json={"model": args.unload or args.load})
            else:
                reply = client.get("/launcher/models")
    except httpx.HTTPError as err:
        raise ServerError(f"No launcher server answers at {base} ({err}). Start one with `launcher serve`.") from err
    if reply.status_code >= 400:
        try:
            message = reply.json()["error"]["message"]
        except (ValueError, KeyError, TypeError):
            message = reply.text[:300]
        raise ServerError(f"{base} answered {reply.status_code}: {message}")
    data = reply.json()
    if args.json:
        print(json.dumps(data, indent=2))
    elif args.unload:
        print(f"Unloaded {data['unloaded']}.")
    elif args.load:
        print(f"Loaded {data['id']} with {data['engine']} in {data['load_seconds']:.1f} s.")
    else:
        print(_table(data))
    return 0
