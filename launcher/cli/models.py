"""`launcher models [list|add PATH|rm NAME]`: the models on disk.

`list` (the default) shows every model in the Hugging Face cache (any repo, pulled by any tool),
imported files (linked in place) and the starter, with format, quant, size, architecture
numbers and the engine that can run it here. `add` registers a file or folder without copying
it; `rm` deletes a cached model with huggingface_hub's delete strategy, or forgets an import
(the user's own file is never deleted).
"""

from __future__ import annotations

import argparse
import json
import sys
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from launcher.catalog.library import LibraryEntry


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """Subcommands and flags of `launcher models`."""
    parser.add_argument("--json", action="store_true", help="print the list as JSON")
    parser.add_argument("--catalog", action="store_true", help="list the curated catalog's ids instead")
    parser.add_argument("--no-engines", action="store_true", help="skip checking which engine can run each model")
    actions = parser.add_subparsers(dest="action", metavar="ACTION")
    actions.add_parser("list", help="list local models (the default)")
    add = actions.add_parser("add", help="import a GGUF file or model folder in place (never copied)")
    add.add_argument("path", help="a .gguf file (first shard of a split) or a model folder")
    add.add_argument("--name", help="the name to serve it under (default: the file or folder name)")
    remove = actions.add_parser("rm", help="delete a downloaded model, or forget an imported one")
    remove.add_argument("name", nargs="?", help="the name shown by `launcher models`")
    remove.add_argument("--partial", action="store_true", help="delete interrupted downloads (of NAME's repo, or all)")
    remove.add_argument("--yes", "-y", action="store_true", help="do not ask for confirmation")


def run(args: argparse.Namespace) -> int:
    """Dispatch to list / add / rm."""
    if args.catalog:
        return _list_catalog(args.json)
    if args.action == "add":
        return _add(args.path, args.name)
    if args.action == "rm" and args.partial:
        return _remove_partial(args.name, args.yes)
    if args.action == "rm":
        if not args.name:
            from launcher.core.errors import ConfigError

            raise ConfigError("Say which model to remove: launcher models rm NAME (or --partial).")
        return _remove(args.name, args.yes)
    return _list(args.json, engines=not args.no_engines)


def _list_catalog(as_json: bool) -> int:
    from launcher.catalog.catalog import default_catalog

    catalog = default_catalog()
    if as_json:
        print(json.dumps([{"id": m.id, "name": m.name, "formats": m.formats()} for m in catalog.models], indent=2))
        return 0
    for model in catalog.models:
        print(f"{model.id:<28} {model.name}  ({', '.join(model.formats())})")
    return 0


def _list(as_json: bool, *, engines: bool) -> int:
    from launcher.catalog.library import scan_library

    entries = scan_library()
    status = _engine_status() if engines else None
    rows = [entry_json(entry, status) for entry in entries]
    if as_json:
        print(json.dumps(rows, indent=2))
        return 0
    for row in rows:
        print(format_row(row))
    _print_partials()
    return 0


def _print_partials() -> None:
    from launcher.catalog.download import partial_downloads
    from launcher.core.units import format_bytes

    partials = partial_downloads()
    if partials:
        print("\nInterrupted downloads (the same `launcher pull` resumes them; `models rm --partial` drops them):")
        for partial in partials:
            print(f"  {partial.repo_id}: {format_bytes(partial.size_bytes)} in {partial.path.name}")


def _engine_status() -> dict[str, str | None] | None:
    from launcher.core.errors import LauncherError
    from launcher.engine_specs import engine_status
    from launcher.hardware.probe import probe_machine

    try:
        return engine_status(probe_machine())
    except LauncherError:
        return None


def entry_json(entry: LibraryEntry, status: dict[str, str | None] | None) -> dict[str, Any]:
    """One library entry as plain data (what --json prints and the text view formats)."""
    from launcher.engine_specs import engines_for_format

    arch = entry.architecture
    engine, why = None, "not checked"
    if status is not None:
        runnable = engines_for_format(entry.model.format, status=status, in_process=True)
        engine = runnable.first.name if runnable.first else None
        why = engine or runnable.why_none()
    return {
        "name": entry.name,
        "source": entry.source,
        "format": entry.model.format,
        "quant": entry.model.quant,
        "size_bytes": entry.size_bytes,
        "path": str(entry.model.path),
        "repo_id": entry.repo_id,
        "catalog_id": entry.model.catalog_id,
        "architecture": arch.model_dump() if arch else None,
        "gguf_architecture": entry.gguf.architecture if entry.gguf else None,
        "chat_template": entry.gguf.has_chat_template if entry.gguf else None,
        "engine": engine,
        "engine_note": why,
        "problem": entry.problem,
    }


def format_row(row: dict[str, Any]) -> str:
    """Two lines per model: name, format, quant, size, engine; then architecture numbers or the problem."""
    from launcher.core.units import format_bytes

    size = format_bytes(row["size_bytes"]) if row["size_bytes"] else "-"
    if row["engine"]:
        engine = row["engine"]
    else:
        engine = "-" if row["engine_note"] == "not checked" else f"none here ({row['engine_note']})"
    head = f"{row['name']}  [{row['source']}] {row['format']} {row['quant'] or ''}  {size}  engine: {engine}"
    if row["catalog_id"] and row["catalog_id"] != row["name"]:
        head += f"  (catalog: {row['catalog_id']})"
    arch = row["architecture"]
    if row["source"] == "starter" and row["problem"]:
        detail = f"    ({row['problem']} from its PyPI package)"
    elif row["problem"]:
        detail = f"    ! {row['problem']}"
    elif arch:
        extra = f", sliding window {arch['sliding_window']}" if arch.get("sliding_window") else ""
        moe = f", {arch['experts_active']}/{arch['experts']} experts" if arch.get("experts") else ""
        template = {True: ", chat template", False: ", no chat template", None: ""}[row["chat_template"]]
        detail = (
            f"    {_params(arch['params_total_b'])} params, {arch['layers']} layers, {arch['attention_heads']} heads "
            f"({arch['kv_heads']} KV), head dim {arch['head_dim']}, context {arch['max_context']}{extra}{moe}{template}"
        )
    else:
        detail = f"    {row['path']}"
    return f"{head}\n{detail}"


def _params(billions: float) -> str:
    """4.02B, 268M, 0.3M: a readable parameter count."""
    if billions >= 1:
        return f"{billions:.2f}B"
    millions = billions * 1000
    return f"{millions:.0f}M" if millions >= 10 else f"{millions:.1f}M"


def _add(path: str, name: str | None) -> int:
    from launcher.catalog.library import add_imported
    from launcher.core.units import format_bytes

    entry = add_imported(path, name)
    what = f"{entry.model.format}, {format_bytes(entry.size_bytes)}"
    print(f"Added {entry.name}: {entry.model.path} ({what}), linked in place, not copied")
    if entry.problem:
        print(f"  note: {entry.problem}")
    print(f"Serve it: launcher serve {entry.name}")
    return 0


def _remove(name: str, yes: bool) -> int:
    from launcher.catalog.library import delete_hf_entry, find_entry, remove_imported, scan_library
    from launcher.core.errors import ModelNotFoundError
    from launcher.core.units import format_bytes

    entries = scan_library(include_starter=False)
    entry = find_entry(name, entries)
    if entry is None:
        if remove_imported(name):
            print(f"Forgot {name} (its file was not touched).")
            return 0
        known = ", ".join(e.name for e in entries) or "none"
        raise ModelNotFoundError(f"No local model {name!r}. Local models: {known}.")
    if entry.source == "imported":
        if not yes and not _confirm(f"Forget imported model {entry.name}? Its file stays at {entry.model.path}."):
            return 1
        remove_imported(entry.name)
        print(f"Forgot {entry.name} (its file was not touched).")
        return 0
    question = f"Delete {entry.name} ({format_bytes(entry.size_bytes)}) from the Hugging Face cache?"
    if not yes and not _confirm(question):
        print("Nothing deleted.")
        return 1
    freed = delete_hf_entry(entry)
    print(f"Deleted {entry.name}; freed {format_bytes(freed)}.")
    return 0


def _remove_partial(repo_id: str | None, yes: bool) -> int:
    from launcher.catalog.download import discard_partial_downloads, partial_downloads
    from launcher.core.units import format_bytes

    partials = [p for p in partial_downloads() if repo_id is None or p.repo_id == repo_id]
    if not partials:
        print("No interrupted downloads.")
        return 0
    total = sum(p.size_bytes for p in partials)
    if not yes and not _confirm(f"Delete {len(partials)} partial download(s), {format_bytes(total)}?"):
        return 1
    freed = discard_partial_downloads(repo_id)
    print(f"Deleted partial downloads; freed {format_bytes(freed)}.")
    return 0


def _confirm(question: str) -> bool:
    if not sys.stdin.isatty():
        print(f"{question} Pass --yes to confirm when not running in a terminal.", file=sys.stderr)
        return False
    return input(f"{question} [y/N] ").strip().lower() in ("y", "yes")
