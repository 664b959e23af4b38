"""Memory and agent-turn prefix reuse: `launcher serve` next to the native llama.cpp server.

For each context x slots configuration both servers run at once, on the same model (the
starter, gemma-3-270m Q4_K_M, unless --model), threads and per-slot context, and take turns:
an agent-shaped conversation (a ~2,100-token system prompt of tool instructions, a question),
then its second turn (turn 1 + the model's reply + a new question), --reps times with a fresh
system prompt each time. It reports:

- RSS of each server after its first request, and the peak over the run (psutil, every 50 ms);
- turn 2: prompt tokens served from cache (ours: usage.prompt_tokens_details; native: timings.cache_n)
  and time to first token, medians over the reps, with the ratios ours / native.

Not a test: it prints a Markdown table and writes --json. Every server it starts is stopped.

    scripts/bench-memory --llama-server PATH [--model PATH] [--configs 4096x1,32768x1,32768x4]
        [--threads 2] [--reps 3] [--prompt-tokens 2100] [--json bench-memory.json]

Build the native server from the llama.cpp that llama-cpp-python vendors (docs/benchmarks.md).
It runs with `--kv-unified` (one KV cache for all slots, as ours): its smallest layout.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import random
import statistics
import sys
import tempfile
import threading
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import httpx
import psutil  # type: ignore[import-untyped]

from launcher.bench.servers import ServerProcess, command_server, launcher_serve
from launcher.bench.workloads import filler_text
from launcher.core.net import free_port

MIB = 1024 * 1024
_TOOLS_PREAMBLE = (
    "You are a coding agent working in the user's repository. You can call these tools: read_file(path), "
    "write_file(path, text), run(command), search(pattern). Answer with one tool call or a short reply.\n\n"
)


@dataclass
class Turns:
    """One server's numbers for one configuration."""

    rss_after_first_mib: float = 0.0
    breakdown_mib: dict[str, float] = field(default_factory=dict)  # the same RSS by kind of mapping
    peak_rss_mib: float = 0.0
    turn1_ttft_s: list[float] = field(default_factory=list)
    turn2_ttft_s: list[float] = field(default_factory=list)
    turn2_prompt_tokens: list[int] = field(default_factory=list)
    turn2_cached_tokens: list[int] = field(default_factory=list)


class RssSampler:
    """Peak RSS of a process and its children, sampled every 50 ms on a thread."""

    def __init__(self, pid: int) -> None:
        self.process = psutil.Process(pid)
        self.peak = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def now(self) -> int:
        with contextlib.suppress(psutil.Error):
            total = self.process.memory_info().rss
            for child in self.process.children(recursive=True):
                with contextlib.suppress(psutil.Error):
                    total += child.memory_info().rss
            self.peak = max(self.peak, total)
            return int(total)
        return 0

    def _run(self) -> None:
        while not self._stop.wait(0.05):
            self.now()

    def stop(self) -> None:
        self._stop.set()
        self._thread.join()


def rss_breakdown(pid: int) -> dict[str, float]:
    """Resident MiB by what is mapped (Linux /proc/PID/smaps; empty elsewhere): the model file,
    llama.cpp's libraries, other shared libraries (Python, numpy, extension modules), and
    anonymous memory (KV cache, compute buffers, checkpoints, the Python heap)."""
    totals: dict[str, float] = {}
    kind = "anonymous"
    try:
        lines = Path(f"/proc/{pid}/smaps").read_text().splitlines()
    except OSError:
        return totals
    for line in lines:
        first = line.split(maxsplit=5)
        if len(first) >= 5 and "-" in first[0] and ":" in first[3]:  # a mapping's header line
            path = first[5] if len(first) > 5 else ""
            if path.endswith(".gguf"):
                kind = "model file"
            elif "libllama" in path or "libggml" in path:
                kind = "llama.cpp libraries"
            elif ".so" in path or "/bin/" in path:
                kind = "other libraries"
            else:
                kind = "anonymous"
        elif line.startswith("Rss:"):
            totals[kind] = totals.get(kind, 0.0) + int(line.split()[1]) / 1024
    return {name: round(value, 1) for name, value in sorted(totals.items())}


def chat_turn(base_url: str, messages: list[dict[str, str]], max_tokens: int) -> tuple[str, float, int, int]:
    """Stream one greedy chat request: (reply, seconds to first content, prompt tokens, cached tokens)."""
    body = {
        "model": "bench",
        "messages": messages,
        "max_tokens": max_tokens,
        "temperature": 0,
        "stream": True,
        "stream_options": {"include_usage": True},
    }
    started = time.perf_counter()
    first: float | None = None
    reply: list[str] = []
    prompt_tokens = cached = 0
    with httpx.stream("POST", base_url + "/chat/completions", json=body, timeout=600) as response:
        response.raise_for_status()
        for line in response.iter_lines():
            if not line.startswith("data: ") or line == "data: [DONE]":
                continue
            chunk = json.loads(line[6:])
            for choice in chunk.get("choices") or []:
                text = (choice.get("delta") or {}).get("content") or ""
                if text:
                    first = first if first is not None else time.perf_counter() - started
                    reply.append(text)
            usage = chunk.get("usage") or {}
            if usage:
                prompt_tokens = int(usage.get("prompt_tokens") or 0)
                cached = int((usage.get("prompt_tokens_details") or {}).get("cached_tokens") or 0)
            timings = chunk.get("timings") or {}
            if "cache_n" in timings:  # llama-server: the prompt tokens it did not evaluate
                cached = int(timings["cache_n"])
                prompt_tokens = int(timings.get("prompt_n", 0)) + cached
    ended = time.perf_counter() - started
    return "".join(reply), first if first is not None else ended, prompt_tokens, cached


def conversation(rep: int, prompt_tokens: int) -> tuple[list[dict[str, str]], str]:
    """Turn 1's messages (a fresh system prompt per rep) and turn 2's new question."""
    rng = random.Random(f"bench-memory:{rep}")
    system = _TOOLS_PREAMBLE + filler_text(rng, prompt_tokens, 1.3)
    first = [{"role": "system", "content": system}, {"role": "user", "content": "Which file defines the parser?"}]
    return first, "Open it and tell me what the first function does."


def run_pair(server: ServerProcess, turns: Turns, rep: int, args: argparse.Namespace, sampler: RssSampler) -> None:
    messages, question = conversation(rep, args.prompt_tokens)
    reply, ttft, _, _ = chat_turn(server.base_url, messages, args.max_tokens)
    turns.turn1_ttft_s.append(ttft)
    if rep == 0:
        turns.rss_after_first_mib = sampler.now() / MIB  # the table: RSS after one request
        turns.breakdown_mib = rss_breakdown(server.pid)
    follow = [*messages, {"role": "assistant", "content": reply}, {"role": "user", "content": question}]
    _, ttft, prompt, cached = chat_turn(server.base_url, follow, args.max_tokens)
    turns.turn2_ttft_s.append(ttft)
    turns.turn2_prompt_tokens.append(prompt)
    turns.turn2_cached_tokens.append(cached)


def native_command(model: Path, port: int, context: int, slots: int, args: argparse.Namespace) -> list[str]:
    command = [str(args.llama_server), "-m", str(model), "--host", "127.0.0.1", "--port", str(port)]
    command += ["-t", str(args.threads), "-tb", str(args.threads), "-c", str(context * slots), "-np", str(slots)]
    command += ["--kv-unified", "--no-webui"]
    if not extra_buffers_usable(model):
        command.append("--no-repack")  # the same weight buffers as our engine on this machine
    return command


def extra_buffers_usable(model: Path) -> bool:
    """Our engine's own probe: whether llama.cpp's AMX/repacked weight buffers work here."""
    from launcher.engines.llamacpp._cpu_probe import extra_buffer_types_usable

    return bool(extra_buffer_types_usable(model.resolve()))


def measure(context: int, slots: int, model: Path, args: argparse.Namespace, logs: Path) -> dict[str, Turns]:
    # No --engine: the app starts `launcher serve` with the advisor's choice, as a user gets it.
    serve_args = [str(model), "--port", "0", "--threads", str(args.threads)]
    serve_args += ["--context", str(context), "--parallel", str(slots), "--log-requests", "off"]
    port = free_port()
    native = native_command(model, port, context, slots, args)
    results = {"launcher serve": Turns(), "llama-server": Turns()}
    tag = f"{context}x{slots}"
    with (
        launcher_serve(serve_args, log_path=logs / f"launcher-{tag}.log") as ours,
        command_server(native, f"http://127.0.0.1:{port}/v1", log_path=logs / f"native-{tag}.log") as theirs,
    ):
        servers = {"launcher serve": ours, "llama-server": theirs}
        samplers = {name: RssSampler(server.pid) for name, server in servers.items()}
        try:
            for rep in range(args.reps):
                for name, server in servers.items():
                    run_pair(server, results[name], rep, args, samplers[name])
        finally:
            for name, sampler in samplers.items():
                sampler.stop()
                results[name].peak_rss_mib = sampler.peak / MIB
    return results


def summary(context: int, slots: int, results: dict[str, Turns]) -> dict[str, Any]:
    ours, native = results["launcher serve"], results["llama-server"]

    def cached_share(turns: Turns) -> float:
        pairs = zip(turns.turn2_cached_tokens, turns.turn2_prompt_tokens, strict=True)
        return statistics.median(cached / prompt for cached, prompt in pairs if prompt)

    return {
        "config": f"{context} x {slots}",
        "rss_ours_mib": round(ours.rss_after_first_mib),
        "rss_native_mib": round(native.rss_after_first_mib),
        "rss_ratio": round(ours.rss_after_first_mib / native.rss_after_first_mib, 2),
        "peak_ours_mib": round(ours.peak_rss_mib),
        "peak_native_mib": round(native.peak_rss_mib),
        "turn2_cached_ours": round(cached_share(ours), 3),
        "turn2_cached_native": round(cached_share(native), 3),
        "turn2_ttft_ours_s": round(statistics.median(ours.turn2_ttft_s), 3),
        "turn2_ttft_native_s": round(statistics.median(native.turn2_ttft_s), 3),
        "turn2_ttft_ratio": round(statistics.median(ours.turn2_ttft_s) / statistics.median(native.turn2_ttft_s), 2),
        "turn1_ttft_ours_s": round(statistics.median(ours.turn1_ttft_s), 2),
        "turn1_ttft_native_s": round(statistics.median(native.turn1_ttft_s), 2),
        "raw": {name: asdict(turns) for name, turns in results.items()},
    }


def print_table(rows: list[dict[str, Any]]) -> None:
    print(
        "| context x slots | launcher serve RSS | llama-server RSS | ratio | peak (ours / native) "
        "| turn 2 cached (ours / native) | turn 2 TTFT (ours / native) | TTFT ratio |"
    )
    print("|---|---|---|---|---|---|---|---|")
    for row in rows:
        print(
            f"| {row['config']} | {row['rss_ours_mib']} MiB | {row['rss_native_mib']} MiB | {row['rss_ratio']}x "
            f"| {row['peak_ours_mib']} / {row['peak_native_mib']} MiB "
            f"| {row['turn2_cached_ours']:.0%} / {row['turn2_cached_native']:.0%} "
            f"| {row['turn2_ttft_ours_s']} / {row['turn2_ttft_native_s']} s | {row['turn2_ttft_ratio']}x |"
        )


def print_breakdown(rows: list[dict[str, Any]]) -> None:
    print("\nRSS after one request, by mapping (MiB, ours / native):\n")
    kinds = ("model file", "llama.cpp libraries", "other libraries", "anonymous")
    print("| context x slots | " + " | ".join(kinds) + " |")
    print("|---|" + "---|" * len(kinds))
    for row in rows:
        ours, native = (row["raw"][name]["breakdown_mib"] for name in ("launcher serve", "llama-server"))
        cells = [f"{ours.get(kind, 0):.0f} / {native.get(kind, 0):.0f}" for kind in kinds]
        print(f"| {row['config']} | " + " | ".join(cells) + " |")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--llama-server", type=Path, required=True, help="the native llama.cpp server binary")
    parser.add_argument("--model", default="", help="GGUF path (default: the starter model)")
    parser.add_argument("--configs", default="4096x1,32768x1,32768x4", help="CONTEXTxSLOTS, comma-separated")
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--reps", type=int, default=3, help="conversations per configuration")
    parser.add_argument("--prompt-tokens", type=int, default=2100, help="system prompt length, about")
    parser.add_argument("--max-tokens", type=int, default=32, help="reply length cap per turn")
    parser.add_argument("--json", type=Path, default=Path("bench-memory.json"))
    args = parser.parse_args()

    from launcher.catalog.resolve import resolve_model

    model = Path(args.model) if args.model else Path(resolve_model("").path)
    logs = Path(tempfile.mkdtemp(prefix="bench-memory-logs-"))
    rows = []
    for spec in args.configs.split(","):
        context, slots = (int(part) for part in spec.lower().split("x"))
        print(f"measuring {context} x {slots} ...", file=sys.stderr, flush=True)
        rows.append(summary(context, slots, measure(context, slots, model, args, logs)))
    print(f"\nmodel: {model.name}, threads {args.threads}, {args.reps} conversations per row, server logs in {logs}\n")
    print_table(rows)
    print_breakdown(rows)
    args.json.write_text(json.dumps({"model": str(model), "rows": rows}, indent=2))
    return 0
