"""`launcher pull CATALOG_ID|REPO[:FILE] [--format F] [--quant Q]`: download a model from the Hub.

Without --format/--quant a catalog model gets the advisor's choice for this machine. Progress
is a tqdm-style bar on stderr (or JSON lines on stdout with --json-progress, for other programs).
Ctrl-C stops the pull; the partial file stays and the same command resumes it.
"""

from __future__ import annotations

import argparse
import json
import sys
from dataclasses import asdict

FORMATS = ("gguf", "mlx", "exl2", "exl3")


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """Flags of `launcher pull`."""
    parser.add_argument("spec", metavar="CATALOG_ID|REPO[:FILE]", help="a catalog id, or a Hub repo (and file)")
    parser.add_argument("--format", choices=FORMATS, help="weights format (default: the advisor's choice)")
    parser.add_argument("--quant", help="quant: Q4_K_M, 4bit, 4.0bpw (default: the advisor's choice)")
    parser.add_argument("--revision", help="branch, tag or commit of a Hub repo (default: main)")
    parser.add_argument("--dry-run", action="store_true", help="show what would be downloaded, then stop")
    parser.add_argument("--json-progress", action="store_true", help="progress as JSON lines on stdout")


def run(args: argparse.Namespace) -> int:
    """Plan the pull, show it, download it with a progress bar."""
    from launcher.advisor.download_advice import advised_variant
    from launcher.catalog.download import pull
    from launcher.catalog.progress import ProgressEvent, TerminalBar
    from launcher.catalog.pull_plan import plan_pull
    from launcher.core.units import format_bytes

    plan = plan_pull(args.spec, fmt=args.format, quant=args.quant, revision=args.revision, advise=advised_variant)
    where = plan.revision if plan.revision == plan.commit else f"{plan.revision} ({plan.commit[:8]})"
    print(
        f"{plan.repo_id} @ {where}: {plan.format} {plan.quant or ''}, {len(plan.files)} file(s), "
        f"{format_bytes(plan.total_bytes)}",
        file=sys.stderr,
    )
    if args.dry_run:
        for remote in plan.files:
            print(f"  {remote.path}  {format_bytes(remote.size)}")
        return 0

    def json_line(event: ProgressEvent) -> None:
        print(json.dumps({"event": "progress", **asdict(event)}), flush=True)

    model = pull(plan, progress=json_line if args.json_progress else TerminalBar())
    if args.json_progress:
        print(json.dumps({"event": "ready", "name": model.name, "path": str(model.path), "format": model.format}))
    else:
        print(f"Ready: {model.name}\n  path: {model.path}\n  serve it: launcher serve {_serve_name(model.name)}")
    return 0


def _serve_name(name: str) -> str:
    return f'"{name}"' if " " in name else name
