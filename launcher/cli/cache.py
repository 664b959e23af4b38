"""`launcher cache`: the prompt cache on disk, the prompt prefixes `launcher serve` keeps across restarts.

launcher cache list                    # one line per stored prefix: model, engine, tokens, size, last used
launcher cache list --json
launcher cache clear                   # remove every entry
launcher cache clear qwen3-8b          # remove one model's entries
launcher cache list --dir /fast/disk   # a folder given to `launcher serve --prompt-cache-dir`

Clearing while a server runs is safe: an entry it no longer finds is a miss, and it writes new ones.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from launcher.engines.prompt_cache import EntryInfo


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """Subcommands of `launcher cache`."""
    sub = parser.add_subparsers(dest="action", metavar="ACTION", required=True)
    listing = sub.add_parser("list", help="the stored prompt prefixes, most recently used first")
    listing.add_argument("--json", action="store_true", help="print JSON")
    clear = sub.add_parser("clear", help="remove the stored prefixes of MODEL (of every model when none is named)")
    clear.add_argument("models", nargs="*", metavar="MODEL", help="a model as `cache list` names it")
    for action in (listing, clear):
        action.add_argument(
            "--dir", type=Path, help="the prompt cache's folder (default: the one `launcher serve` uses by default)"
        )


def _folder(args: argparse.Namespace) -> Path:
    from launcher.engines.prompt_cache import default_folder

    folder: Path = args.dir.expanduser() if args.dir else default_folder()
    return folder


def _age(seconds: float) -> str:
    """How long ago, in the largest whole unit."""
    if seconds < 60:
        return "just now"
    for unit, size in (("day", 86400), ("h", 3600), ("min", 60)):
        if seconds >= size:
            count = int(seconds // size)
            return f"{count} {unit}{'s' if unit == 'day' and count != 1 else ''} ago"
    raise AssertionError("unreachable")


def _table(entries: list[EntryInfo], now: float) -> list[str]:
    from launcher.core.units import format_bytes

    rows = [("MODEL", "ENGINE", "TOKENS", "SIZE", "LAST USED")]
    rows += [
        (info.model, info.engine, f"{info.tokens:,}", format_bytes(info.size), _age(now - info.last_used))
        for info in entries
    ]
    widths = [max(len(row[i]) for row in rows) for i in range(len(rows[0]))]
    right = {2, 3}  # numbers line up on the right
    return [
        "  ".join(
            cell.rjust(width) if i in right else cell.ljust(width)
            for i, (cell, width) in enumerate(zip(row, widths, strict=True))
        ).rstrip()
        for row in rows
    ]


def _list(folder: Path, as_json: bool) -> int:
    from launcher.core.units import format_bytes
    from launcher.engines.prompt_cache import list_entries

    entries = list_entries(folder)
    total = sum(info.size for info in entries)
    if as_json:
        rows = [
            {
                "model": info.model,
                "engine": info.engine,
                "tokens": info.tokens,
                "bytes": info.size,
                "last_used": info.last_used,
                "path": str(info.path),
            }
            for info in entries
        ]
        print(json.dumps({"folder": str(folder), "entries": rows, "total_bytes": total}, indent=2))
        return 0
    if not entries:
        print(f"No prompts are cached in {folder}.")
        return 0
    print("\n".join(_table(entries, time.time())))
    count = f"{len(entries)} entr{'y' if len(entries) == 1 else 'ies'}"
    print(f"{count}, {format_bytes(total)} in {folder}")
    return 0


def _clear(folder: Path, models: list[str]) -> int:
    from launcher.core.units import format_bytes
    from launcher.engines.prompt_cache import clear, list_entries

    if models:
        cached = {info.model for info in list_entries(folder)}
        unknown = [model for model in models if model not in cached]
        if unknown:
            known = f" (cached: {', '.join(sorted(cached))})" if cached else ""
            print(f"No prompts of {', '.join(unknown)} are cached in {folder}{known}.", file=sys.stderr)
            if len(unknown) == len(models):
                return 1
    files, freed = clear(folder, models)
    whose = f" of {', '.join(models)}" if models else ""
    print(f"Removed {files} entr{'y' if files == 1 else 'ies'}{whose}, freed {format_bytes(freed)} in {folder}.")
    return 0


def run(args: argparse.Namespace) -> int:
    """List or clear the prompt cache's folder."""
    folder = _folder(args)
    if args.action == "list":
        return _list(folder, args.json)
    return _clear(folder, list(args.models))
