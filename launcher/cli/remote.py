"""`launcher remote`: OpenAI-compatible endpoints whose models `launcher serve` serves as NAME/model.

launcher remote add gpu https://gpu.example.com/v1 --api-key-stdin   # a vLLM or SGLang cluster, a provider
launcher remote add desk http://192.168.1.20:8420                     # another machine running the launcher
launcher remote list                                                  # reachable? which models?
launcher remote remove gpu

The key goes into the OS keyring; where there is no usable one (a headless machine) it goes into a
file in the config folder that only this user can read, and `add` says so. LAUNCHER_REMOTE_KEY_<NAME>
in `launcher serve`'s environment overrides either. A server reads the list when it starts: restart
it after a change. `add` and `list` ask each remote for its models within a few seconds
(`upstream.LIST_TIMEOUT_S`, all of the answer), and say in one line when it did not answer.
"""

from __future__ import annotations

import argparse
import concurrent.futures
import contextlib
import json
import sys
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from launcher.core.remotes import Remote


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """Subcommands of `launcher remote`."""
    sub = parser.add_subparsers(dest="action", metavar="ACTION", required=True)
    add = sub.add_parser("add", help="register an endpoint (replaces one of the same name)")
    add.add_argument("name", help="its name: its models are served as NAME/model")
    add.add_argument("url", help="its OpenAI base URL, e.g. https://host/v1 (a bare host gets /v1)")
    key = add.add_mutually_exclusive_group()
    key.add_argument("--api-key", help="its key (visible in the shell's history: prefer --api-key-stdin)")
    key.add_argument("--api-key-stdin", action="store_true", help="read its key from the first line of stdin")
    add.add_argument("--no-check", action="store_true", help="do not ask it for its models now")
    listing = sub.add_parser("list", help="the registered endpoints, whether they answer and their models")
    listing.add_argument("--json", action="store_true", help="print JSON")
    remove = sub.add_parser("remove", help="forget an endpoint and its key")
    remove.add_argument("name")


def _key_from(args: argparse.Namespace) -> str | None:
    from launcher.core.errors import ConfigError

    if args.api_key_stdin:
        key = sys.stdin.readline().strip()
        if not key:
            raise ConfigError("--api-key-stdin: the first line of stdin is empty.")
        return key
    key = (args.api_key or "").strip()
    return key or None


def _add(args: argparse.Namespace) -> int:
    from launcher.core.errors import ConfigError
    from launcher.core.remotes import (
        Remote,
        base_url,
        check_name,
        delete_key,
        load_remotes,
        plain_http_warning,
        save_remote,
    )

    name = check_name(args.name)
    key = _key_from(args)
    remote = Remote(name, base_url(args.url), has_key=key is not None)
    warning = plain_http_warning(remote)
    if warning:
        print(f"warning: {warning}", file=sys.stderr)
    previous = load_remotes().get(name)
    where = "no key"
    try:
        if key is not None:
            where = _store(name, key)  # before the registry: a remote is never listed without its key
        elif previous is not None and previous.has_key:
            delete_key(name)  # a remote added again without a key has none
        save_remote(remote)
    except BaseException:
        if key is not None and previous is None:
            with contextlib.suppress(ConfigError):  # the error that stopped the add is the one to show
                delete_key(name)  # the key of a remote that was not added must not stay behind
        raise
    print(f"Added {name}: {remote.url} ({where}). Its models are served as {name}/MODEL after a server (re)start.")
    if not args.no_check:
        _check(remote, key)
    return 0


def _store(name: str, key: str) -> str:
    """Keep the key and say where: the keyring, or (said on stderr, once) the file only this user reads."""
    from launcher.core.remotes import store_key

    kept = store_key(name, key)
    if kept.file is None:
        return "key in the keyring"
    print(
        f"note: {kept.why_not_keyring}: the key of {name} is kept in {kept.file}, readable by this user only "
        "(mode 0600).",
        file=sys.stderr,
    )
    return f"key in {kept.file}"


def _check(remote: Remote, key: str | None) -> str | None:
    """Ask the remote for its models and print them; returns why it did not answer (None: it did)."""
    from launcher.core.errors import ServerError
    from launcher.server.upstreams.upstream import Upstream, list_models

    try:
        models = list_models(Upstream(remote.name, remote.url, key, prefix=remote.name + "/"))
    except ServerError as err:
        print(f"  not reachable now: {err}")
        return str(err)
    names = ", ".join(f"{remote.name}/{model.model}" for model in models) or "none listed"
    print(f"  models: {names}")
    return None


def _list(args: argparse.Namespace) -> int:
    from launcher.core.remotes import find_key, load_remotes, plain_http_warning

    remotes = list(load_remotes().values())
    lookups = [find_key(remote) for remote in remotes]  # one by one: a keyring backend may not like threads
    # All remotes asked at once: one that does not answer costs its few seconds once, not once per remote.
    with concurrent.futures.ThreadPoolExecutor(max_workers=max(1, min(8, len(remotes)))) as pool:
        reached = list(pool.map(_reachability, remotes, [lookup.key for lookup in lookups]))
    rows: list[dict[str, Any]] = [
        {"name": remote.name, "url": remote.url, "key": bool(lookup.key), "key_from": lookup.source}
        | state
        | {"warnings": [w for w in (plain_http_warning(remote), lookup.problem) if w]}
        for remote, lookup, state in zip(remotes, lookups, reached, strict=True)
    ]
    if args.json:
        print(json.dumps(rows, indent=2))
        return 0
    if not rows:
        print("No remotes. Add one: launcher remote add NAME URL [--api-key-stdin]")
        return 0
    for row in rows:
        key = f"key from {row['key_from']}" if row["key"] else "no key"
        state = "reachable" if row["reachable"] else f"NOT reachable: {row['error']}"
        print(f"{row['name']}  {row['url']}  ({key}; {state})")
        for model in row["models"]:
            print(f"  {model}")
        for warning in row["warnings"]:
            print(f"  warning: {warning}")
    return 0


def _reachability(remote: Remote, key: str | None) -> dict[str, Any]:
    """Whether `remote` answers /v1/models, and what it lists."""
    from launcher.core.errors import ServerError
    from launcher.server.upstreams.upstream import Upstream, list_models

    try:
        listed = list_models(Upstream(remote.name, remote.url, key, prefix=remote.name + "/"))
    except ServerError as err:
        return {"reachable": False, "error": str(err), "models": []}
    return {"reachable": True, "models": [f"{remote.name}/{model.model}" for model in listed]}


def _remove(args: argparse.Namespace) -> int:
    from launcher.core.errors import ConfigError
    from launcher.core.remotes import remove_remote

    if not remove_remote(args.name):
        raise ConfigError(f"No remote named {args.name!r}; `launcher remote list` shows them.")
    print(f"Removed {args.name} (and its key).")
    return 0


def run(args: argparse.Namespace) -> int:
    """Do the subcommand."""
    actions = {"add": _add, "list": _list, "remove": _remove}
    return actions[args.action](args)
