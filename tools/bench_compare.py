"""Side-by-side benchmark: llama-cpp-python in-process vs `launcher serve` vs `python -m llama_cpp.server`.

Same model (the starter, gemma-3-270m Q4_K_M, unless --model), same threads, same prompts.
With --llama-server PATH the native llama.cpp server (C++) joins as a fourth contender.
The servers run for the whole script and the contenders take turns in rounds (in-process,
ours, theirs, native, again), so drifting background load hits all of them alike; each target
is judged on the median of its per-round values. Not a test: it prints the numbers and the
targets of the issue with PASS/FAIL, and writes a JSON report (and Markdown with --markdown).
Every server it starts is stopped at the end, also on error or Ctrl-C.

    scripts/bench-compare [--model PATH] [--threads 2] [--rounds 3] [--requests 4] [--max-tokens 64]
        [--prompt-tokens 64] [--llama-server PATH]
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import dataclasses
import json
import os
import random
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import httpx

from launcher.bench.compare import Baseline, Round, load_line, measures_table, targets, targets_table
from launcher.bench.report import build_report
from launcher.bench.servers import (
    ServerProcess,
    command_server,
    launcher_serve,
    stop_process,
)
from launcher.bench.suite import BenchConfig, run_suite
from launcher.bench.workloads import (
    WorkloadSettings,
    build_workloads,
    filler_text,
)
from launcher.core.net import free_port


def resolve_starter(spec: str) -> Path:
    """The model file: --model, else the starter model (assembled once into the launcher data dir)."""
    from launcher.catalog.resolve import resolve_model

    path: Path = resolve_model(spec).path
    return path


# Some x86 VMs report AMX in cpuinfo, and the kernel grants the tile permission, yet the first
# AMX tile instruction traps (SIGILL): llama.cpp built with -march=native then dies on Q4_K/Q8_0
# weights. `use_extra_bufts = False` keeps llama.cpp off its AMX (and CPU_REPACK) weight buffers.
# Our engine decides this itself (launcher.engines.llamacpp._cpu_probe); the script makes the
# same decision once and applies it to all three contenders alike.
NO_EXTRA_BUFFERS = """
import llama_cpp, llama_cpp.llama_cpp
_default_model_params = llama_cpp.llama_model_default_params
def _model_params():
    params = _default_model_params()
    params.use_extra_bufts = False
    return params
llama_cpp.llama_model_default_params = _model_params
llama_cpp.llama_cpp.llama_model_default_params = _model_params
"""


def extra_buffers_crash(model: Path, threads: int) -> bool:
    """True when llama.cpp's default weight buffers crash this machine (probed in a child process)."""
    code = (
        "from llama_cpp import Llama\n"
        f"llm = Llama(model_path={str(model)!r}, n_ctx=512, n_threads={threads}, verbose=False)\n"
        "llm.create_completion('Once upon a time, in a village by the sea,', max_tokens=4)\n"
    )
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, timeout=600, check=False)
    return result.returncode == -signal.SIGILL


def native_server_command(
    binary: Path, model: Path, port: int, args: argparse.Namespace, *, no_repack: bool
) -> list[str]:
    """The native llama.cpp server with the same model, threads, per-slot context, slots and chat format as ours."""
    # Checked against `llama-server --help` and the source of the llama.cpp that llama-cpp-python
    # 0.3.36 vendors: `-c` is the KV size of all slots together; with an explicit `-np` the KV
    # cache is not unified and each slot gets c / np (padded to 256; the log's `n_ctx_slot`
    # shows it), so c = context x parallel gives each slot our per-sequence context.
    # `--no-kv-unified` keeps it that way should the default change.
    command = [str(binary), "-m", str(model), "--host", "127.0.0.1", "--port", str(port)]
    command += ["-t", str(args.threads), "-tb", str(args.threads)]
    command += ["-c", str(args.context * args.parallel), "-np", str(args.parallel), "--no-kv-unified", "--no-webui"]
    if args.chat_format:
        # Jinja is on by default and would take "gemma" as the text of a template; with --no-jinja
        # --chat-template names one of the built-in templates (the same turns as llama-cpp-python's
        # chat format). Without --chat-format both use the model's own template.
        command += ["--no-jinja", "--chat-template", args.chat_format]
    if no_repack:
        command.append("--no-repack")  # use_extra_bufts = false, as NO_EXTRA_BUFFERS does for the others
    # Prompt caching (per-slot reuse, --cache-ram, slot choice by prompt similarity) stays on:
    # it is part of what native does, and ours reuses shared prefixes too.
    return command


def native_extra_buffers_crash(command: list[str], base_url: str) -> bool:
    """True when the native server dies of SIGILL while it loads and warms up with its default weight buffers.

    Probed separately because the binary may be built with AMX where llama-cpp-python is not.
    """
    process = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, text=True)
    try:
        deadline = time.monotonic() + 300
        while process.poll() is None and time.monotonic() < deadline:
            # /health answers 200 only after the model is loaded and warmed up (a decode with its weights).
            with contextlib.suppress(httpx.HTTPError):
                if httpx.get(base_url + "/health", timeout=2).status_code == 200:
                    return False
            time.sleep(0.3)
        return process.returncode == -signal.SIGILL
    finally:
        stop_process(process)


def tokens_per_word(llm: Any) -> float:
    """Tokens per filler word from the model's own tokenizer (the slope cancels BOS and such)."""
    counts = []
    for words in (40, 440):
        text = filler_text(random.Random(f"calibrate:{words}"), words, 1.0)
        counts.append(len(llm.tokenize(text.encode(), add_bos=False)))
    return (counts[1] - counts[0]) / 400


def load_in_process(model: Path, args: argparse.Namespace, *, no_extra_buffers: bool) -> Any:
    """llama_cpp.Llama with the same threads, context and chat format as the servers."""
    if no_extra_buffers:
        exec(NO_EXTRA_BUFFERS, {})
    from llama_cpp import Llama

    llm = Llama(
        model_path=str(model),
        n_ctx=args.context,
        n_threads=args.threads,
        n_threads_batch=args.threads,
        chat_format=args.chat_format or None,
        verbose=False,
    )
    llm.create_chat_completion([{"role": "user", "content": "Say hello."}], max_tokens=8)  # warm-up
    return llm


def in_process_round(llm: Any, settings: WorkloadSettings, per_word: float) -> Baseline:
    """Single-stream decode tok/s and TTFT of the sweep's 1-stream requests, driven in-process."""
    (sweep,) = build_workloads(("sweep",), settings)
    rates: list[float] = []
    ttfts: list[float] = []
    counts: list[int] = []
    for request in sweep.phases[0].requests:
        started = time.perf_counter()
        times: list[float] = []
        messages: Any = [dict(m) for m in request.messages]
        stream: Any = llm.create_chat_completion(messages, max_tokens=request.max_tokens, temperature=0.0, stream=True)
        for chunk in stream:
            if chunk["choices"] and chunk["choices"][0]["delta"].get("content"):
                times.append(time.perf_counter() - started)
        if len(times) >= 2:
            rates.append((len(times) - 1) / (times[-1] - times[0]))
            ttfts.append(times[0])
            counts.append(len(times))
    return Baseline(statistics.median(rates), statistics.median(ttfts), statistics.fmean(counts), per_word)


def bench(server: ServerProcess, settings: WorkloadSettings, label: str, flags: dict[str, Any]) -> dict[str, Any]:
    """One `launcher bench` suite (prefix pairs, then 1 and 4 streams) against a server; its report."""
    # Prompt lengths were calibrated once on the model's tokenizer, so both servers get the same prompts.
    config = BenchConfig(
        base_url=server.base_url,
        workloads=("prefix", "sweep"),
        settings=settings,
        server_pid=server.pid,
        calibrate=False,
    )
    return build_report(asyncio.run(run_suite(config)), flags=flags, label=label)


def main() -> int:
    """Start both servers, run the rounds, print the comparison, write the reports."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default="", help="GGUF path (default: the starter model)")
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--parallel", type=int, default=4)
    parser.add_argument("--context", type=int, default=4096, help="context per sequence")
    parser.add_argument("--rounds", type=int, default=3, help="interleaved rounds (default 3)")
    parser.add_argument("--requests", type=int, default=4, help="requests per phase and round (default 4)")
    parser.add_argument("--max-tokens", type=int, default=64, help="answer length (default 64)")
    parser.add_argument(
        "--prompt-tokens",
        type=int,
        default=WorkloadSettings.short_prompt_tokens,
        help=f"prompt length of the sweep in tokens (default {WorkloadSettings.short_prompt_tokens})",
    )
    parser.add_argument("--llama-server", help="also run this native llama.cpp llama-server binary (default: not run)")
    parser.add_argument("--chat-format", default="gemma", help="llama-cpp-python chat format (the starter has none)")
    parser.add_argument("--json", default="bench-compare.json", help="write all reports here")
    parser.add_argument("--markdown", help="write the tables here")
    parser.add_argument("--logs", default=tempfile.gettempdir(), help="directory for the servers' logs")
    args = parser.parse_args()
    if args.prompt_tokens < 1:
        parser.error("--prompt-tokens must be at least 1")
    native_binary = Path(args.llama_server).expanduser().resolve() if args.llama_server else None
    if native_binary is not None and not (native_binary.is_file() and os.access(native_binary, os.X_OK)):
        parser.error(f"--llama-server {args.llama_server}: no executable file there; build llama-server first")
    # SIGTERM (and SIGINT, which shells ignore in background jobs) must unwind through the `with`
    # blocks below so both servers are stopped.
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))

    model = resolve_starter(args.model)
    print(f"model: {model} ({model.stat().st_size / 2**20:.0f} MiB), threads {args.threads}", file=sys.stderr)
    no_extra = extra_buffers_crash(model, args.threads)
    if no_extra:
        print("llama.cpp's AMX weight buffers crash here (SIGILL): all three run without them", file=sys.stderr)
    os.environ["LAUNCHER_LLAMACPP_EXTRA_BUFFERS"] = "0" if no_extra else "1"  # our engine: same decision

    llm = load_in_process(model, args, no_extra_buffers=no_extra)
    per_word = tokens_per_word(llm)
    base_settings = WorkloadSettings(
        requests=args.requests,
        max_tokens=args.max_tokens,
        concurrency=(1, 4),
        tokens_per_word=per_word,
        short_prompt_tokens=args.prompt_tokens,
    )
    serve_args = [str(model), "--port", "0", "--parallel", str(args.parallel), "--threads", str(args.threads)]
    serve_args += ["--context", str(args.context)]  # per sequence, like llama_cpp.server's --n_ctx
    port = free_port()
    # interrupt_requests off: by default a new request cuts the one being streamed short, so
    # concurrent clients would get truncated answers instead of waiting their turn.
    their_args = ["--model", str(model), "--n_threads", str(args.threads), "--n_threads_batch", str(args.threads)]
    their_args += ["--n_ctx", str(args.context), "--port", str(port), "--interrupt_requests", "false"]
    if args.chat_format:
        their_args += ["--chat_format", args.chat_format]
    run_module = (
        "import runpy, sys\nsys.argv[0] = 'llama_cpp.server'\nrunpy.run_module('llama_cpp.server', run_name='__main__')"
    )
    their_command = [sys.executable, "-c", (NO_EXTRA_BUFFERS if no_extra else "") + run_module, *their_args]
    native_command: list[str] = []
    native_no_repack = no_extra
    native_port = 0
    if native_binary is not None:
        native_port = free_port()
        if not no_extra:
            probe = native_server_command(native_binary, model, native_port, args, no_repack=False)
            native_no_repack = native_extra_buffers_crash(probe, f"http://127.0.0.1:{native_port}")
            if native_no_repack:
                print(
                    "llama-server's AMX weight buffers crash here (SIGILL): it runs with --no-repack", file=sys.stderr
                )
        native_command = native_server_command(native_binary, model, native_port, args, no_repack=native_no_repack)
    flags: dict[str, Any] = {"no_extra_buffers": no_extra, "native_no_repack": native_no_repack, **vars(args)}
    logs = Path(args.logs)
    rounds: list[Round] = []
    names = "in-process, launcher serve, llama_cpp.server" + (", llama-server" if native_command else "")
    try:
        # ExitStack stops every server it started, last first, also when a later one fails to start.
        with contextlib.ExitStack() as servers:
            ours = servers.enter_context(launcher_serve(serve_args, log_path=logs / "bench-launcher-serve.log"))
            theirs = servers.enter_context(
                command_server(
                    their_command, f"http://127.0.0.1:{port}/v1", log_path=logs / "bench-llama-cpp-server.log"
                )
            )
            native = None
            if native_command:
                native = servers.enter_context(
                    command_server(
                        native_command,
                        f"http://127.0.0.1:{native_port}/v1",
                        log_path=logs / "bench-llama-server-native.log",
                    )
                )
            for number in range(args.rounds):
                # A new seed per round: fresh prompts, so the prefix pairs start cold every round.
                settings = dataclasses.replace(base_settings, seed=number)
                print(f"round {number + 1}/{args.rounds}: {names}", file=sys.stderr)
                baseline = in_process_round(llm, settings, per_word)
                ours_report = bench(
                    ours, settings, "launcher serve", {"server": "launcher serve " + " ".join(serve_args), **flags}
                )
                theirs_report = bench(
                    theirs,
                    settings,
                    "llama_cpp.server",
                    {"server": "python -m llama_cpp.server " + " ".join(their_args), **flags},
                )
                native_report = None
                if native is not None:
                    native_report = bench(
                        native, settings, "llama-server (native)", {"server": " ".join(native_command), **flags}
                    )
                rounds.append(Round(baseline, ours_report, theirs_report, native_report))
                print(targets_table(rounds), file=sys.stderr)
    finally:
        llm.close()

    run_lines = [
        f"- {load_line(rounds)}",
        f"- prompts ~{args.prompt_tokens} tokens, answers up to {args.max_tokens} tokens, {args.requests} requests"
        f" per phase and round, {args.rounds} rounds, {args.threads} threads",
    ]
    if native_command:
        run_lines.append(f"- native: `{' '.join(native_command)}`")
    text = "\n".join([measures_table(rounds), targets_table(rounds), *run_lines, ""])
    print(text)
    reports = []
    for r in rounds:
        report: dict[str, Any] = {
            "baseline": dataclasses.asdict(r.baseline),
            "launcher_serve": r.ours,
            "llama_cpp_server": r.theirs,
        }
        if r.native is not None:
            report["llama_server_native"] = r.native
        reports.append(report)
    Path(args.json).write_text(
        json.dumps({"flags": flags, "rounds": reports}, indent=2, default=str) + "\n", encoding="utf-8"
    )
    if args.markdown:
        Path(args.markdown).write_text(text, encoding="utf-8")
    return 0 if all(target.passed for target in targets(rounds)) else 1
