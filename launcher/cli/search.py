"""`launcher search TEXT [--format gguf|mlx|exl3]`: Hub repos, their quants and sizes, and a fit verdict."""

from __future__ import annotations

import argparse
import json
from dataclasses import asdict
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from launcher.catalog.hub_search import HubResult

VERDICT_WORDS = {
    "full_gpu": "fits on the GPU",
    "unified": "fits (unified memory)",
    "partial": "partly on the GPU",
    "cpu": "runs on the CPU",
    "wont_fit": "does not fit",
}


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """Flags of `launcher search`."""
    parser.add_argument("text", help="what to look for, e.g. 'qwen3 4b'")
    parser.add_argument("--format", default="gguf", choices=("gguf", "mlx", "exl3", "exl2"), help="default: gguf")
    parser.add_argument("--limit", type=int, default=15, help="repos to list (default 15)")
    parser.add_argument("--details", type=int, default=6, help="repos whose quants are listed (default 6)")
    parser.add_argument("--json", action="store_true", help="print the results as JSON")


def run(args: argparse.Namespace) -> int:
    """Search and print."""
    from launcher.advisor.download_advice import judge_hub_result
    from launcher.catalog.hub_search import search_hub

    results = search_hub(
        args.text, fmt=args.format, limit=args.limit, detail_limit=args.details, judge=judge_hub_result
    )
    if args.json:
        print(json.dumps([asdict(r) for r in results], indent=2))
        return 0
    if not results:
        print(f"No {args.format} repos on the Hub match {args.text!r}.")
        return 0
    for result in results:
        print(format_result(result))
    return 0


def format_result(result: HubResult) -> str:
    """A repo and its variants as text."""
    from launcher.core.units import format_bytes

    tags = [f"{result.downloads:,} downloads" if result.downloads is not None else ""]
    if result.catalog_id:
        tags.append(f"catalog: {result.catalog_id}")
    if result.gated:
        tags.append("gated")
    lines = [f"{result.repo_id}  " + ", ".join(t for t in tags if t)]
    best = result.best
    for variant in result.variants:
        verdict = VERDICT_WORDS.get(variant.verdict or "", "fit unknown")
        if variant.verdict and variant.context:
            verdict += f" at {variant.context // 1024}k context"
        if result.estimated and variant.verdict:
            verdict += " (estimated from size)"
        if variant.engine_note:
            verdict += f"; but no engine here: {variant.engine_note}"
        mark = "*" if variant is best else " "
        lines.append(f"  {mark} {variant.quant:<12} {format_bytes(variant.size_bytes):>10}  {verdict}")
    if result.note:
        lines.append(f"    {result.note}")
    if best is not None:
        spec = f"{result.repo_id} --quant {best.quant}" if result.format != "mlx" else result.repo_id
        flag = f" --format {result.format}" if result.format != "gguf" else ""
        lines.append(f"    pull: launcher pull {spec}{flag}")
    return "\n".join(lines)
