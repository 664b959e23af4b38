#!/usr/bin/env python3
"""Check a llama.cpp engine build through the launcher's engine: which CPU backend it runs, and how fast.

    engine_check.py smoke MODEL [--tokens 8]       load, generate, print what ran (one JSON line)
    engine_check.py compare MODEL --python NAME=PYTHON --python NAME=PYTHON [--reps 7] [--tokens 128]

`compare` starts one worker per interpreter (each a venv with its own llama-cpp-python build),
loads the model once in each, then asks them in turn for one greedy generation of --tokens
tokens, alternating (and swapping who goes first) so that both see the same background load,
and prints each rep, the medians of decode tok/s (first to last token), the ratio of each to the
first, and the median of the per-rep ratios.
`smoke` is what runs under `qemu-x86_64 -cpu Haswell`: slow, so keep the model tiny.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent.parent
PROMPT = "Write a long story about a robot who learns to paint. Once upon a time,"


def _load(model_path: Path, threads: int) -> Any:
    sys.path.insert(0, str(ROOT))
    from launcher.core.config import ServeConfig
    from launcher.core.model_types import LocalModel
    from launcher.engines.llamacpp.engine import LlamaCppEngine

    config = ServeConfig(context=2048, parallel=1, threads=threads)
    return LlamaCppEngine().load(LocalModel(path=model_path, format="gguf", name=model_path.stem), config)


def _what_ran() -> dict[str, Any]:
    from launcher.engines.llamacpp import _native
    from launcher.engines.llamacpp.engine import LlamaCppEngine
    from launcher.hardware.machine import CpuInfo, Machine, MemoryInfo

    # The llama.cpp engine's answer depends on its build only; a stand-in machine spares probing
    # the real one (slow under qemu).
    machine = Machine(
        os=sys.platform,
        os_version="",
        cpu=CpuInfo(brand="", arch="", physical_cores=1, logical_cores=1),
        memory=MemoryInfo(total=1, available=1),
    )
    return {
        "reason": LlamaCppEngine().availability(machine).reason,
        "cpu_variant": _native.cpu_variant(),
        "backends": [str(b.path) for b in _native.loaded_backends()],
    }


def _generate(model: Any, tokens: int) -> dict[str, Any]:
    from launcher.engines.base import GenerationRequest, SamplingParams

    async def run() -> dict[str, Any]:
        request = GenerationRequest(
            model.tokenize(PROMPT, add_special=True),
            max_tokens=tokens,
            sampling=SamplingParams(temperature=0.0),
            ignore_eos=True,
        )
        ids: list[int] = []
        first = last = 0.0
        async for event in model.generate(request):
            if event.token_ids:
                last = time.perf_counter()
                first = first or last
                ids.extend(event.token_ids)
        decode = (len(ids) - 1) / (last - first) if len(ids) > 1 and last > first else 0.0
        return {"tokens": len(ids), "decode_tps": round(decode, 2), "text": model.detokenize(ids)}

    result: dict[str, Any] = asyncio.run(run())
    return result


def smoke(options: argparse.Namespace) -> int:
    model = _load(options.model, options.threads)
    try:
        print(json.dumps({**_what_ran(), **_generate(model, options.tokens)}), flush=True)
    finally:
        model.close()
    return 0


def worker(options: argparse.Namespace) -> int:
    """One generation per line on stdin, one JSON line per generation on stdout."""
    model = _load(options.model, options.threads)
    try:
        _generate(model, 8)  # warm-up: first-use allocations and page faults stay out of the numbers
        print(json.dumps(_what_ran()), flush=True)
        for _line in sys.stdin:
            result = _generate(model, options.tokens)
            print(json.dumps({k: v for k, v in result.items() if k != "text"}), flush=True)
    finally:
        model.close()
    return 0


def compare(options: argparse.Namespace) -> int:
    pythons = [entry.split("=", 1) for entry in options.python]
    workers: dict[str, subprocess.Popen[str]] = {}
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    argv = [str(options.model), "--threads", str(options.threads), "--tokens", str(options.tokens)]
    try:
        for name, python in pythons:
            workers[name] = subprocess.Popen(
                [python, __file__, "worker", *argv], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, env=env
            )
        for name, process in workers.items():
            assert process.stdout is not None
            print(f"{name}: {process.stdout.readline().strip()}", flush=True)
        speeds: dict[str, list[float]] = {name: [] for name in workers}
        for rep in range(options.reps):
            order = list(workers) if rep % 2 == 0 else list(reversed(workers))  # neither always goes first
            for name in order:
                process = workers[name]
                assert process.stdin is not None and process.stdout is not None
                process.stdin.write("go\n")
                process.stdin.flush()
                speeds[name].append(json.loads(process.stdout.readline())["decode_tps"])
            load = os.getloadavg()[0] if hasattr(os, "getloadavg") else float("nan")
            line = ", ".join(f"{n} {speeds[n][-1]:.1f}" for n in workers)
            print(f"rep {rep + 1}: {line} tok/s (load average {load:.1f})", flush=True)
    finally:
        for process in workers.values():
            if process.stdin:
                process.stdin.close()
            process.wait(timeout=60)
    first = pythons[0][0]
    baseline = statistics.median(speeds[first])
    for name, values in speeds.items():
        median = statistics.median(values)
        # Back-to-back reps share the machine's load of that moment: their ratio is steadier than
        # the ratio of medians when other work comes and goes.
        pairs = statistics.median(v / b for v, b in zip(values, speeds[first], strict=True) if b > 0)
        print(
            f"{name}: median {median:.1f} tok/s, {median / baseline:.3f}x {first}; "
            f"median of per-rep ratios {pairs:.3f}x (reps {values})"
        )
    return 0


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("mode", choices=["smoke", "compare", "worker"])
    parser.add_argument("model", type=Path)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--tokens", type=int, default=None, help="tokens per generation (smoke 8, compare 128)")
    parser.add_argument("--reps", type=int, default=7)
    parser.add_argument("--python", action="append", default=[], help="NAME=PYTHON, one per build (compare)")
    options = parser.parse_args()
    options.tokens = options.tokens or (8 if options.mode == "smoke" else 128)
    return {"smoke": smoke, "compare": compare, "worker": worker}[options.mode](options)


if __name__ == "__main__":
    sys.exit(main())
