"""The benchmark HTTP client: streams chat completions from any OpenAI-compatible server and times them.

Times are `time.perf_counter()` offsets from the moment the request is handed to the HTTP
client, so TTFT includes connection, queueing and prefill, as a user sees it. Token counts
come from the final `usage` chunk (`stream_options.include_usage`); a server that sends no
usage gets its content chunks counted instead (one chunk ~ one token on llama.cpp-style
servers) and the result says so.
"""

from __future__ import annotations

import asyncio
import functools
import json
import time
from collections.abc import AsyncIterator, Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import httpx

from launcher.bench.workloads import BenchRequest, Phase

_WORDS_FOR_CALIBRATION = (20, 220)


@dataclass
class RequestResult:
    """What one streamed request measured. Times are seconds since it was sent."""

    ok: bool
    e2e: float
    ttft: float | None = None
    token_times: list[float] = field(default_factory=list)  # arrival of each content chunk
    completion_tokens: int = 0
    prompt_tokens: int | None = None
    cached_prompt_tokens: int | None = None  # usage.prompt_tokens_details.cached_tokens, if sent
    usage_reported: bool = False
    text: str = ""
    finish_reason: str | None = None
    error: str | None = None
    sent_at: float = 0.0  # perf_counter at send, to place requests on the phase's timeline

    @property
    def decode_time(self) -> float | None:
        """Seconds from the first to the last content token."""
        if self.ttft is None or not self.token_times:
            return None
        return self.token_times[-1] - self.ttft


@dataclass
class PhaseResult:
    """All requests of one phase and the phase's wall-clock span."""

    label: str
    concurrency: int
    results: list[RequestResult]
    wall_time: float


class ServerUnreachable(Exception):
    """The base URL did not answer at all (connection refused, DNS, TLS)."""


def _auth_headers(api_key: str | None) -> dict[str, str]:
    return {"Authorization": f"Bearer {api_key}"} if api_key else {}


def make_client(base_url: str, api_key: str | None, timeout: float) -> httpx.AsyncClient:
    """An AsyncClient rooted at the OpenAI base URL (e.g. http://127.0.0.1:8420/v1)."""
    limits = httpx.Limits(max_connections=64, max_keepalive_connections=64)
    return httpx.AsyncClient(
        base_url=base_url.rstrip("/") + "/",
        headers=_auth_headers(api_key),
        timeout=httpx.Timeout(timeout, connect=10.0),
        limits=limits,
    )


async def stream_chat(
    client: httpx.AsyncClient,
    request: BenchRequest,
    *,
    model: str | None,
    seed: int,
    on_first_token: Callable[[], None] | None = None,
) -> RequestResult:
    """Send one streaming chat completion and time every content chunk.

    `on_first_token` is called as soon as the first content chunk has arrived (and been timed).
    """
    body = request.body(model, seed=seed)
    sent = time.perf_counter()
    result = RequestResult(ok=False, e2e=0.0, sent_at=sent)
    chunks = 0
    parts: list[str] = []
    try:
        async with client.stream("POST", "chat/completions", json=body) as response:
            if response.status_code != 200:
                detail = (await response.aread()).decode("utf-8", "replace")[:300]
                result.error = f"HTTP {response.status_code}: {detail}"
                result.e2e = time.perf_counter() - sent
                return result
            async for line in response.aiter_lines():
                if not line.startswith("data:"):
                    continue
                payload = line[5:].strip()
                if payload == "[DONE]":
                    break
                now = time.perf_counter() - sent
                chunk = json.loads(payload)
                if "error" in chunk:
                    result.error = str(chunk["error"])[:300]
                    break
                text = _chunk_text(chunk)
                if text:
                    chunks += 1
                    parts.append(text)
                    result.token_times.append(now)
                    if result.ttft is None:
                        result.ttft = now
                        if on_first_token is not None:
                            on_first_token()
                _read_finish_and_usage(chunk, result)
    except httpx.ConnectError as err:
        raise ServerUnreachable(str(err)) from err
    except (httpx.HTTPError, json.JSONDecodeError) as err:
        result.error = f"{type(err).__name__}: {err}"
    result.e2e = time.perf_counter() - sent
    result.text = "".join(parts)
    if not result.usage_reported:
        result.completion_tokens = chunks
    result.ok = result.error is None
    return result


async def sse_events(response: httpx.Response) -> AsyncIterator[dict[str, Any]]:
    """The JSON events of a streamed OpenAI-style response, up to `data: [DONE]`."""
    async for line in response.aiter_lines():
        if not line.startswith("data:"):
            continue
        payload = line[5:].strip()
        if payload == "[DONE]":
            return
        yield json.loads(payload)


def _chunk_text(chunk: dict[str, Any]) -> str:
    choices = chunk.get("choices") or []
    if not choices:
        return ""
    delta = choices[0].get("delta") or {}
    # Reasoning models stream thoughts separately; they are generated tokens all the same.
    return str(delta.get("content") or "") + str(delta.get("reasoning_content") or "")


def _read_finish_and_usage(chunk: dict[str, Any], result: RequestResult) -> None:
    choices = chunk.get("choices") or []
    if choices and choices[0].get("finish_reason"):
        result.finish_reason = str(choices[0]["finish_reason"])
    usage = chunk.get("usage")
    if isinstance(usage, dict) and usage.get("completion_tokens") is not None:
        result.usage_reported = True
        result.completion_tokens = int(usage["completion_tokens"])
        result.prompt_tokens = int(usage.get("prompt_tokens") or 0)
        details = usage.get("prompt_tokens_details")
        if isinstance(details, dict) and details.get("cached_tokens") is not None:
            result.cached_prompt_tokens = int(details["cached_tokens"])


async def run_phase(
    client: httpx.AsyncClient,
    phase: Phase,
    *,
    model: str | None,
    seed: int,
    all_streaming: asyncio.Event | None = None,
) -> PhaseResult:
    """Send the phase's requests with `phase.concurrency` workers, each starting the next as one ends.

    `all_streaming`, when given, is set once every request has its first token or has ended
    (a failed request must not keep a waiting phase from starting).
    """
    queue: asyncio.Queue[tuple[int, BenchRequest]] = asyncio.Queue()
    for index, request in enumerate(phase.requests):
        queue.put_nowait((index, request))
    results: list[RequestResult | None] = [None] * len(phase.requests)
    streaming: set[int] = set()
    if all_streaming is not None and not phase.requests:
        all_streaming.set()  # nothing to wait for; a joining phase must not hang

    def mark_streaming(index: int) -> None:
        streaming.add(index)
        if all_streaming is not None and len(streaming) == len(phase.requests):
            all_streaming.set()

    async def worker() -> None:
        while True:
            try:
                index, request = queue.get_nowait()
            except asyncio.QueueEmpty:
                return
            first_token = functools.partial(mark_streaming, index)
            results[index] = await stream_chat(
                client, request, model=model, seed=seed + index, on_first_token=first_token
            )
            mark_streaming(index)

    workers = 1 if phase.sequential else phase.concurrency
    started = time.perf_counter()
    await asyncio.gather(*(worker() for _ in range(workers)))
    wall = time.perf_counter() - started
    return PhaseResult(phase.label, workers, [r for r in results if r is not None], wall)


async def run_alongside(
    client: httpx.AsyncClient, running: Phase, joining: Phase, *, model: str | None, seed: int
) -> tuple[PhaseResult, PhaseResult]:
    """Run `running`, and send `joining` once every one of its streams has its first token."""
    all_streaming = asyncio.Event()

    async def join() -> PhaseResult:
        await all_streaming.wait()
        # Seeds continue after the running phase's, so no two requests of the workload share one.
        return await run_phase(client, joining, model=model, seed=seed + len(running.requests))

    running_result, joining_result = await asyncio.gather(
        run_phase(client, running, model=model, seed=seed, all_streaming=all_streaming), join()
    )
    return running_result, joining_result


async def run_phases(
    client: httpx.AsyncClient, phases: Sequence[Phase], *, model: str | None, seed: int
) -> list[PhaseResult]:
    """Run a workload's phases in order; a phase that joins running streams runs alongside the one before."""
    results: list[PhaseResult] = []
    index = 0
    while index < len(phases):
        phase = phases[index]
        following = phases[index + 1] if index + 1 < len(phases) else None
        if following is not None and following.joins_running_streams:
            results.extend(await run_alongside(client, phase, following, model=model, seed=seed))
            index += 2
        else:
            results.append(await run_phase(client, phase, model=model, seed=seed))
            index += 1
    return results


async def fetch_models(client: httpx.AsyncClient) -> list[dict[str, Any]]:
    """The server's /v1/models entries (empty when the endpoint is missing)."""
    try:
        response = await client.get("models")
    except httpx.ConnectError as err:
        raise ServerUnreachable(str(err)) from err
    if response.status_code != 200:
        return []
    data = response.json().get("data")
    return [m for m in data if isinstance(m, dict)] if isinstance(data, list) else []


async def fetch_metrics(client: httpx.AsyncClient, base_url: str) -> dict[str, float] | None:
    """Prometheus samples from the server root's /metrics, summed over labels; None when absent."""
    from prometheus_client.parser import text_string_to_metric_families

    url = metrics_url(base_url)
    try:
        response = await client.get(url)
    except httpx.HTTPError:
        return None
    if response.status_code != 200:
        return None
    samples: dict[str, float] = {}
    try:
        for family in text_string_to_metric_families(response.text):
            for sample in family.samples:
                samples[sample.name] = samples.get(sample.name, 0.0) + float(sample.value)
    except ValueError:
        return None
    return samples


def metrics_url(base_url: str) -> str:
    """/metrics lives at the server root, next to /v1."""
    root = base_url.rstrip("/")
    if root.endswith("/v1"):
        root = root[: -len("/v1")]
    return root + "/metrics"


async def calibrate_tokens_per_word(
    client: httpx.AsyncClient, *, model: str | None, fallback: float
) -> tuple[float, bool]:
    """Measure the server tokenizer's tokens per filler word from two prompts' usage counts.

    Returns (tokens_per_word, measured). The difference of two prompt lengths cancels the
    chat template's fixed overhead.
    """
    import random

    from launcher.bench.workloads import filler_text

    counts: list[int] = []
    for words in _WORDS_FOR_CALIBRATION:
        text = filler_text(random.Random(f"calibrate:{words}"), words, 1.0)
        request = BenchRequest(({"role": "user", "content": text},), max_tokens=1)
        result = await stream_chat(client, request, model=model, seed=0)
        if not result.ok or result.prompt_tokens is None:
            return fallback, False
        counts.append(result.prompt_tokens)
    slope = (counts[1] - counts[0]) / (_WORDS_FOR_CALIBRATION[1] - _WORDS_FOR_CALIBRATION[0])
    return (slope, True) if slope > 0 else (fallback, False)
