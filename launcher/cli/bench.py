"""`launcher bench`: benchmark any OpenAI-compatible endpoint (ours, llama.cpp's, vLLM's, ...)."""

from __future__ import annotations

import argparse
from typing import Any

from launcher.bench.workloads import DEFAULT_WORKLOADS, WORKLOAD_NAMES, WorkloadSettings
from launcher.core.errors import ConfigError, ServerError


def _int_list(text: str) -> tuple[int, ...]:
    try:
        values = tuple(int(v) for v in text.split(",") if v.strip())
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected comma-separated integers, got {text!r}") from None
    if not values or any(v < 1 for v in values):
        raise argparse.ArgumentTypeError(f"expected positive integers, got {text!r}")
    return values


def _name_list(text: str) -> tuple[str, ...]:
    names = tuple(v.strip() for v in text.split(",") if v.strip())
    unknown = [n for n in names if n not in WORKLOAD_NAMES]
    if unknown or not names:
        raise argparse.ArgumentTypeError(f"unknown workload(s) {text!r}; choose from {','.join(WORKLOAD_NAMES)}")
    return names


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """The `bench` flags."""
    parser.add_argument("--base-url", required=True, help="OpenAI-compatible base URL, e.g. http://127.0.0.1:8420/v1")
    parser.add_argument("--model", help="model id to request (default: the first one /v1/models lists)")
    parser.add_argument("--api-key", help="API key sent as a Bearer token")
    parser.add_argument(
        "--workloads",
        type=_name_list,
        default=DEFAULT_WORKLOADS,
        help=f"comma-separated subset of {','.join(WORKLOAD_NAMES)} (default: {','.join(DEFAULT_WORKLOADS)};"
        " mixed is opt-in: N streams generate, then one long prompt arrives, and the report shows their"
        " token gaps while it is read)",
    )
    parser.add_argument("--concurrency", type=_int_list, default=(1, 2, 4, 8), help="sweep levels (default 1,2,4,8)")
    parser.add_argument("--requests", type=int, default=8, help="requests per phase (default 8)")
    parser.add_argument("--max-tokens", type=int, default=128, help="output tokens for long answers (default 128)")
    parser.add_argument("--prefix-tokens", type=int, default=2000, help="shared prefix length (default 2000)")
    short_default = WorkloadSettings.short_prompt_tokens
    parser.add_argument(
        "--short-prompt-tokens",
        type=int,
        default=short_default,
        help=f"prompt length of the short, sweep and json workloads (default {short_default})",
    )
    parser.add_argument(
        "--long-prompt-tokens",
        type=int,
        default=1500,
        help="prompt length of the long and mixed workloads (default 1500)",
    )
    mixed_default = WorkloadSettings.mixed_streams
    parser.add_argument(
        "--mixed-streams",
        type=int,
        default=mixed_default,
        help=f"background streams of the mixed workload (default {mixed_default})",
    )
    parser.add_argument("--seed", type=int, default=0, help="prompt generator seed (default 0)")
    parser.add_argument("--server-pid", type=int, help="sample this process's memory (default: the port's owner)")
    parser.add_argument("--timeout", type=float, default=600.0, help="per-request timeout in seconds")
    parser.add_argument("--label", default="", help="a title for the report (e.g. the server's name)")
    parser.add_argument(
        "--calibrate",
        action="store_true",
        help="instead of the benchmark: measure a running `launcher serve` (decode, prefill, memory), compare"
        " with the advisor's prediction for what it serves, and store the run so this machine's later"
        " predictions are calibrated (a short fixed workload; the workload flags do not apply)",
    )
    parser.add_argument("--json", dest="json_out", metavar="OUT", help="write the JSON report here")
    parser.add_argument("--markdown", dest="markdown_out", metavar="OUT", help="write the Markdown report here")


def run(args: argparse.Namespace) -> int:
    """Run the benchmark, print the Markdown report, write the files asked for."""
    if args.calibrate:
        return run_calibration(args)
    import asyncio
    import json
    from pathlib import Path

    from launcher.bench.report import build_report, render_markdown
    from launcher.bench.runner import ServerUnreachable
    from launcher.bench.suite import BenchConfig, run_suite

    lengths = (
        args.requests,
        args.max_tokens,
        args.prefix_tokens,
        args.short_prompt_tokens,
        args.long_prompt_tokens,
        args.mixed_streams,
    )
    if min(lengths) < 1:
        raise ConfigError(
            "--requests, --max-tokens, --prefix-tokens, --short-prompt-tokens, --long-prompt-tokens"
            " and --mixed-streams must be at least 1"
        )
    if not args.base_url.startswith(("http://", "https://")):
        raise ConfigError(f"--base-url must start with http:// or https://, got {args.base_url!r}")
    settings = WorkloadSettings(
        requests=args.requests,
        max_tokens=args.max_tokens,
        concurrency=args.concurrency,
        seed=args.seed,
        prefix_tokens=args.prefix_tokens,
        short_prompt_tokens=args.short_prompt_tokens,
        long_prompt_tokens=args.long_prompt_tokens,
        mixed_streams=args.mixed_streams,
    )
    config = BenchConfig(
        base_url=args.base_url,
        api_key=args.api_key,
        model=args.model,
        workloads=args.workloads,
        settings=settings,
        timeout=args.timeout,
        server_pid=args.server_pid,
    )
    try:
        suite = asyncio.run(run_suite(config))
    except ServerUnreachable as err:
        raise ServerError(f"nothing answers at {args.base_url} ({err}); is the server running?") from None
    report = build_report(suite, flags=bench_flags(args), label=args.label)
    markdown = render_markdown(report)
    print(markdown, end="")
    if args.json_out:
        Path(args.json_out).write_text(json.dumps(report, indent=2) + "\n", encoding="utf-8")
    if args.markdown_out:
        Path(args.markdown_out).write_text(markdown, encoding="utf-8")
    failed = sum(p["errors"] for w in report["workloads"] for p in w["phases"])
    return 1 if failed else 0


def run_calibration(args: argparse.Namespace) -> int:
    """`--calibrate`: predict, measure, store, print (and write `--json OUT`)."""
    import asyncio
    import json
    from pathlib import Path

    from launcher.bench.calibrate import calibrate
    from launcher.bench.calibrate_report import outcome_json, render_text
    from launcher.bench.runner import ServerUnreachable
    from launcher.hardware.probe import probe_machine

    if not args.base_url.startswith(("http://", "https://")):
        raise ConfigError(f"--base-url must start with http:// or https://, got {args.base_url!r}")
    machine = probe_machine()
    try:
        outcome = asyncio.run(
            calibrate(args.base_url, machine, api_key=args.api_key, model=args.model, timeout=args.timeout)
        )
    except ServerUnreachable as err:
        raise ServerError(f"nothing answers at {args.base_url} ({err}); is `launcher serve` running?") from None
    print(render_text(outcome), end="")
    if args.json_out:
        Path(args.json_out).write_text(json.dumps(outcome_json(outcome), indent=2) + "\n", encoding="utf-8")
    return 0 if outcome.run is not None else 1


def bench_flags(args: argparse.Namespace) -> dict[str, Any]:
    """The flags this run was given, for the report (the API key is never recorded)."""
    keys = (
        "base_url",
        "model",
        "workloads",
        "concurrency",
        "requests",
        "max_tokens",
        "prefix_tokens",
        "short_prompt_tokens",
        "long_prompt_tokens",
        "seed",
        "server_pid",
    )
    flags: dict[str, Any] = {}
    for key in keys:
        value = getattr(args, key, None)
        flags[key] = ",".join(str(v) for v in value) if isinstance(value, tuple) else value
    # Only where it applies, so reports of the default set keep the flags they always had.
    if "mixed" in (getattr(args, "workloads", None) or ()):
        flags["mixed_streams"] = args.mixed_streams
    return flags
