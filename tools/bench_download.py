"""Download throughput: `launcher pull` code vs a bare `hf_hub_download`, same file, same fake Hub.

Usage: scripts/bench-download [--size-mb 200] [--runs 5]

The fake Hub (tests/fixtures/fake_hub.py) runs in its own process on 127.0.0.1 and serves one
random GGUF-named file through the Hub's redirect to a "CDN" port. Each run downloads it into a
fresh, empty Hugging Face cache, alternating ours / bare so drift in machine load hits both
equally. Ours includes what a pull does on top: the HEAD pre-flight, the disk check, sha256
verification of every byte and progress events. Prints per-run times and the median ratio.
Not a test: numbers depend on the machine and on what else runs on it.
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent

SERVER = """
import os, sys, time
from tests.fixtures.fake_hub import FakeHub
hub = FakeHub()
hub.add_repo("bench/Big-GGUF", {"big-Q4_K_M.gguf": os.urandom(int(sys.argv[1]) * 1024 * 1024)})
print(hub.url, flush=True)
sys.stdin.read()  # serve until the parent closes our stdin
hub.close()
"""


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--size-mb", type=int, default=200)
    parser.add_argument("--runs", type=int, default=5)
    args = parser.parse_args()

    server = subprocess.Popen(
        [sys.executable, "-c", SERVER, str(args.size_mb)],
        cwd=ROOT,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    assert server.stdout is not None and server.stdin is not None
    endpoint = server.stdout.readline().strip()
    work = Path(tempfile.mkdtemp(prefix="bench-download-"))
    os.environ.update(
        {
            "HF_ENDPOINT": endpoint,
            "LAUNCHER_HOME": str(work / "launcher"),
            "HF_HUB_DISABLE_PROGRESS_BARS": "1",
            "HF_HUB_DISABLE_TELEMETRY": "1",
        }
    )
    from huggingface_hub import hf_hub_download

    from launcher.catalog.download import pull
    from launcher.catalog.hub_client import HubContext
    from launcher.catalog.pull_plan import plan_pull

    def fresh_cache() -> Path:
        cache = work / "hub"
        shutil.rmtree(cache, ignore_errors=True)
        cache.mkdir(parents=True)
        os.environ["HF_HUB_CACHE"] = str(cache)
        return cache

    def ours() -> float:
        cache = fresh_cache()
        start = time.perf_counter()
        ctx = HubContext(endpoint=endpoint, token=None, cache_dir=cache)
        model = pull(plan_pull("bench/Big-GGUF", ctx=ctx), ctx=ctx, progress=lambda event: None)
        elapsed = time.perf_counter() - start
        assert model.path.stat().st_size == args.size_mb * 1024 * 1024
        return elapsed

    def bare() -> float:
        cache = fresh_cache()
        start = time.perf_counter()
        path = hf_hub_download("bench/Big-GGUF", "big-Q4_K_M.gguf", cache_dir=cache, endpoint=endpoint)
        elapsed = time.perf_counter() - start
        assert Path(path).stat().st_size == args.size_mb * 1024 * 1024
        return elapsed

    try:
        ours()  # warm-up: imports, page cache, server threads
        bare()
        times: dict[str, list[float]] = {"ours": [], "bare": []}
        for run in range(args.runs):
            order = [("ours", ours), ("bare", bare)] if run % 2 == 0 else [("bare", bare), ("ours", ours)]
            for name, fn in order:
                times[name].append(fn())
            print(f"run {run + 1}: ours {times['ours'][-1]:.3f} s, bare {times['bare'][-1]:.3f} s", flush=True)
    finally:
        server.stdin.close()
        server.wait(timeout=30)
        shutil.rmtree(work, ignore_errors=True)

    size = args.size_mb * 1024 * 1024
    med_ours, med_bare = statistics.median(times["ours"]), statistics.median(times["bare"])
    print(f"file: {args.size_mb} MiB, {args.runs} runs each, fresh cache per run, alternating order")
    print(f"ours (launcher pull, sha256 verified): median {med_ours:.3f} s = {size / med_ours / 1e6:.0f} MB/s")
    print(f"bare hf_hub_download:                  median {med_bare:.3f} s = {size / med_bare / 1e6:.0f} MB/s")
    print(f"ratio ours/bare time: {med_ours / med_bare:.3f} (throughput {med_bare / med_ours * 100:.1f}% of bare)")
    return 0
