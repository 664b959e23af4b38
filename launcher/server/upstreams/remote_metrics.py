"""The live numbers of remote models, read from their servers' Prometheus /metrics.

The app's gauges read this server's `launcher_*` series (server/metrics.py); for a remote model
those come from the remote itself, read in the background when this server's /metrics is scraped
(which serves the last good figures and never waits: a few seconds' cache so the app's polling does
not multiply into the remote's). A reading is bounded: the whole answer within SCRAPE_TIMEOUT_S
and MAX_SCRAPE_BYTES, parsed on a thread (a big text must not stall the event loop), only the
series below kept, at most MAX_SERIES of them, for at most MAX_MODELS models of each remote.
Three kinds of servers are read, by their own metric names (vLLM's in
vllm/v1/metrics/loggers.py, SGLang's in sglang/srt/metrics/collector.py):

- requests running: `vllm:num_requests_running`, `sglang:num_running_reqs`, `launcher_requests_running`
- requests waiting: `vllm:num_requests_waiting`, `sglang:num_queue_reqs`, `launcher_requests_waiting`
- KV cache fill, 0..1: `vllm:kv_cache_usage_perc` (before 0.10 `vllm:gpu_cache_usage_perc`), `sglang:token_usage`,
  `launcher_kv_cache_usage_ratio`; in tokens: `sglang:num_used_tokens` of `sglang:max_total_num_tokens`,
  `launcher_kv_cache_used_tokens` of `launcher_kv_cache_total_tokens` (vLLM says only its fill)
- decode tokens/s: `sglang:gen_throughput`, `launcher_decode_tokens_per_second`, else the rate of
  `vllm:generation_tokens_total` / `sglang:generation_tokens_total` between two scrapes
- prefill tokens/s: `launcher_prefill_tokens_per_second`, else the rate of `vllm:prompt_tokens_total` /
  `sglang:prompt_tokens_total`

Each sample's model is its `model_name` label (vLLM, SGLang) or `model` (the launcher); a series
without one belongs to the remote's only model, when it has only one. SGLang exports its metrics
only when started with `--enable-metrics`; a remote without /metrics simply has no gauges.
"""

from __future__ import annotations

import asyncio
import functools
import logging
import time
from collections.abc import Coroutine
from dataclasses import dataclass, field
from typing import Any

import anyio
import httpx

from launcher.core import metric_names as names
from launcher.engine_specs import specs
from launcher.server.metrics import RemoteModelStats
from launcher.server.upstreams.upstream import AnswerTooLarge, AnswerUnreadable, Upstream, get_small

log = logging.getLogger(__name__)

SCRAPE_TIMEOUT_S = 1.0
"""A remote whose /metrics is not all there this fast has no new gauges this time (the app polls every second)."""
MAX_SCRAPE_BYTES = 8 * 1024 * 1024
"""A remote's /metrics, inflated (vLLM's is ~100 kB); a bigger one is not read."""
MAX_SERIES = 5000
"""The series of the names below read from one remote's /metrics; the rest are left out."""
MAX_MODELS = 64
"""The models of one remote whose gauges this server relays (a label's every value would make a series)."""
CACHE_S = 2.0
"""A remote's /metrics is read at most this often, however often this server's is."""
RETRY_AFTER_FAILURE_S = 30.0
"""A remote whose /metrics did not answer is not asked again for this long (each try may cost the timeout)."""
MAX_RATE_GAP_S = 30.0
"""Counters further apart than this make no rate (a token count over minutes is not a speed now)."""

_OWN_SERIES = {  # this launcher's own series, as another launcher exports them
    names.REQUESTS_RUNNING: "running",
    names.REQUESTS_WAITING: "waiting",
    names.KV_CACHE_USED_TOKENS: "kv_used",
    names.KV_CACHE_TOTAL_TOKENS: "kv_total",
    names.DECODE_TOKENS_PER_SECOND: "decode_tps",
    names.PREFILL_TOKENS_PER_SECOND: "prefill_tps",
    names.KV_CACHE_USAGE_RATIO: "kv_ratio",
}
HIGHEST_FIGURES = frozenset({"kv_ratio"})
"""Figures taken as the highest over a remote's models, not summed: data-parallel engines' ratios do not add up."""


@functools.cache
def _series() -> tuple[dict[str, str], dict[str, str]]:
    """(summed, highest): series name -> the figure it feeds, this launcher's and every child engine's
    spec's (`ChildLaunch.metric_series`): a remote may be any of those servers."""
    every = dict(_OWN_SERIES)
    for spec in specs():
        if spec.child is not None:
            every |= spec.child.metric_series
    summed = {name: figure for name, figure in every.items() if figure not in HIGHEST_FIGURES}
    highest = {name: figure for name, figure in every.items() if figure in HIGHEST_FIGURES}
    return summed, highest


_MODEL_LABELS = ("model_name", "model", "name")


def _wanted_lines(text: str) -> str:
    """The sample lines of the series above, at most MAX_SERIES of them (the rest of a big text unparsed)."""
    summed, highest = _series()
    kept = []
    for line in text.splitlines():
        name = line.split("{", 1)[0].split(" ", 1)[0]
        if name in summed or name in highest:
            kept.append(line)
            if len(kept) >= MAX_SERIES:
                break
    return "\n".join(kept) + "\n"


def read_samples(text: str, models: list[str]) -> dict[str, dict[str, float]]:
    """The figures above for each model id (the remote's own ids) in one scrape of a remote's /metrics:
    of the models the remote listed when it listed any, and of at most MAX_MODELS."""
    from prometheus_client.parser import text_string_to_metric_families

    only = models[0] if len(models) == 1 else None
    listed = set(models)
    figures: dict[str, dict[str, float]] = {}
    summed, highest = _series()
    for family in text_string_to_metric_families(_wanted_lines(text)):
        for sample in family.samples:
            figure = summed.get(sample.name) or highest.get(sample.name)
            if figure is None:
                continue
            model = next((sample.labels[label] for label in _MODEL_LABELS if sample.labels.get(label)), only)
            if model is None or (listed and model not in listed):
                continue
            if model not in figures and len(figures) >= MAX_MODELS:
                continue
            values = figures.setdefault(model, {})
            value = float(sample.value)
            if sample.name in highest:
                values[figure] = max(values.get(figure, 0.0), value)
            else:
                values[figure] = values.get(figure, 0.0) + value
    return figures


@dataclass
class _Scrape:
    """One remote's last reading."""

    at: float = 0.0
    wait_s: float = CACHE_S  # until the next reading: longer after a failure
    stats: list[RemoteModelStats] = field(default_factory=list)
    counters: dict[str, tuple[float, float, float]] = field(default_factory=dict)  # model -> (time, prompt, gen)


def _rate(now: float, then: tuple[float, float, float] | None, current: float | None, index: int) -> float:
    """Tokens per second from a counter's previous reading to this one (0 without one, or after a reset)."""
    if then is None or current is None or not 0 < now - then[0] <= MAX_RATE_GAP_S:
        return 0.0
    return max(0.0, current - then[index]) / (now - then[0])


class RemoteGauges:
    """The remote models' live numbers, as of the last scrape of each remote (`RemoteModelStats`)."""

    def __init__(self) -> None:
        self._scrapes: dict[str, _Scrape] = {}

    def latest(self) -> list[RemoteModelStats]:
        """Every remote model's numbers from its server's last answer."""
        return [stats for scrape in self._scrapes.values() for stats in scrape.stats]

    async def refresh(self, client: httpx.AsyncClient, upstreams: dict[Upstream, list[str]]) -> None:
        """Read the /metrics of every upstream not read in the last CACHE_S (`upstreams`: each with its
        model ids), at once, each within SCRAPE_TIMEOUT_S."""
        reading = self.start_refresh(client, upstreams)
        if reading is not None:
            await reading

    def start_refresh(
        self, client: httpx.AsyncClient, upstreams: dict[Upstream, list[str]]
    ) -> Coroutine[Any, Any, None] | None:
        """The reading `refresh` does, to run in the background; None when no upstream is due. The
        upstreams it covers are marked as being read, so a scrape meanwhile starts no second one."""
        now = time.monotonic()
        due = {u: models for u, models in upstreams.items() if now - self._scrape(u).at >= self._scrape(u).wait_s}
        if not due:
            return None
        for upstream in due:
            scrape = self._scrape(upstream)
            scrape.at, scrape.wait_s = now, SCRAPE_TIMEOUT_S + CACHE_S  # until this reading ends

        async def reading() -> None:
            await asyncio.gather(*(self._read(client, u, models) for u, models in due.items()))

        return reading()

    def _scrape(self, upstream: Upstream) -> _Scrape:
        return self._scrapes.setdefault(upstream.name, _Scrape())

    async def _read(self, client: httpx.AsyncClient, upstream: Upstream, models: list[str]) -> None:
        scrape = self._scrape(upstream)
        scrape.at = time.monotonic()
        try:
            status, content = await get_small(
                client, upstream.root_url + "/metrics", upstream.headers(), MAX_SCRAPE_BYTES, SCRAPE_TIMEOUT_S
            )
            if status != 200:
                raise ValueError(f"HTTP {status}")
            text = content.decode("utf-8", "replace")
            figures = await anyio.to_thread.run_sync(read_samples, text, models)
        except (httpx.HTTPError, ValueError, TimeoutError, AnswerTooLarge, AnswerUnreadable) as err:
            log.debug("no metrics from %s: %s", upstream.name, err or type(err).__name__)
            scrape.stats, scrape.wait_s = [], RETRY_AFTER_FAILURE_S
            scrape.at = time.monotonic()
            return
        scrape.wait_s = CACHE_S
        now = time.monotonic()
        stats = []
        for model, values in figures.items():
            then = scrape.counters.get(model)
            prompt, generated = values.get("prompt_total"), values.get("generation_total")
            if prompt is not None or generated is not None:
                scrape.counters[model] = (now, prompt or 0.0, generated or 0.0)
            decode = values.get("decode_tps")
            prefill = values.get("prefill_tps")
            stats.append(
                RemoteModelStats(
                    model=upstream.local_name(model),
                    requests_running=values.get("running", 0.0),
                    requests_waiting=values.get("waiting", 0.0),
                    kv_cache_usage_ratio=values.get("kv_ratio"),
                    kv_cache_used_tokens=values.get("kv_used"),
                    kv_cache_total_tokens=values.get("kv_total"),
                    decode_tokens_per_second=decode if decode is not None else _rate(now, then, generated, 2),
                    prefill_tokens_per_second=prefill if prefill is not None else _rate(now, then, prompt, 1),
                )
            )
        scrape.stats = stats
