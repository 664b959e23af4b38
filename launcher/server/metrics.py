"""Prometheus metrics for /metrics, named in core/metric_names.py (the app's gauges and `launcher bench` read them).

One `CollectorRegistry` per app, so several servers in one process (tests) never share
counters. Everything a model does is labelled `model="<id>"`; readers that want one number for
the server sum over the label. Engine-side numbers (running/waiting, KV cache, prefix cache,
speculative drafts, memory) are read from each loaded model's `LoadedModel.stats()` at scrape time; throughput
gauges are rates over the last few seconds.
"""

from __future__ import annotations

import threading
import time
from collections import deque
from collections.abc import Callable, Iterator
from dataclasses import dataclass

from prometheus_client import CollectorRegistry, Counter, Histogram, generate_latest
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.gc_collector import GCCollector
from prometheus_client.platform_collector import PlatformCollector
from prometheus_client.process_collector import ProcessCollector
from prometheus_client.registry import Collector

from launcher.core import metric_names as names
from launcher.engines.base import EngineStats

CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"
RATE_WINDOW_S = 5.0

_LATENCY_BUCKETS = (0.005, 0.01, 0.02, 0.05, 0.1, 0.2, 0.5, 1.0, 2.0, 5.0, 10.0, 30.0, 60.0)


class RateWindow:
    """Tokens per second over the last `window_s` seconds (0 when idle)."""

    def __init__(self, window_s: float = RATE_WINDOW_S) -> None:
        self.window_s = window_s
        self._events: deque[tuple[float, float]] = deque()
        self._lock = threading.Lock()

    def add(self, count: float, now: float | None = None) -> None:
        """Record `count` tokens done at `now`."""
        with self._lock:
            self._events.append((now if now is not None else time.monotonic(), count))

    def rate(self, now: float | None = None) -> float:
        """Tokens per second over the window."""
        now = now if now is not None else time.monotonic()
        with self._lock:
            while self._events and self._events[0][0] < now - self.window_s:
                self._events.popleft()
            total = sum(count for _, count in self._events)
        return total / self.window_s


class BusyClock:
    """Seconds during which at least one stream was generating, so aggregate tok/s is the tokens
    over that time (a server idle between bursts is not slow) and the mean concurrency is the
    streams' own generating seconds over it."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._active = 0
        self._since = 0.0
        self._total = 0.0

    def started(self, now: float) -> None:
        """A stream produced its first token."""
        with self._lock:
            if self._active == 0:
                self._since = now
            self._active += 1

    def ended(self, now: float) -> None:
        """A stream that had started ended."""
        with self._lock:
            self._active = max(0, self._active - 1)
            if self._active == 0:
                self._total += now - self._since

    def seconds(self, now: float | None = None) -> float:
        """Busy seconds so far, including a busy spell still running."""
        with self._lock:
            running = (now if now is not None else time.monotonic()) - self._since if self._active else 0.0
            return self._total + running


MODEL_LABEL = "model"
"""Every per-model series carries the served model's id in this label (vLLM's `model_name` idea):
one server may have several models loaded, and readers that want one number sum over it."""


class ModelMetrics:
    """One model's series (the children of the server's labelled metrics) and its live rates.

    The generation driver writes to these attributes; they keep their names from the days of one
    model per server, so the driver does not know how many models there are.
    """

    def __init__(self, server: ServerMetrics, name: str, stats: Callable[[], EngineStats | None]) -> None:
        self.name = name
        self.stats = stats
        self.prompt_tokens = server.prompt_tokens.labels(name)
        self.generation_tokens = server.generation_tokens.labels(name)
        self.ttft = server.ttft.labels(name)
        self.inter_token = server.inter_token.labels(name)
        self.duration = server.duration.labels(name)
        self.stream_decode_tokens = server.stream_decode_tokens.labels(name)
        self.stream_decode_seconds = server.stream_decode_seconds.labels(name)
        self.prefill_uncached_tokens = server.prefill_uncached_tokens.labels(name)
        self.prefill_seconds = server.prefill_seconds.labels(name)
        self.tool_calls = server.tool_calls
        self.busy = BusyClock()
        self.prefill_rate = RateWindow()
        self.decode_rate = RateWindow()


@dataclass(frozen=True)
class RemoteModelStats:
    """A remote model's live numbers, as its own server's /metrics said them (server/upstreams/remote_metrics.py).

    The KV cache sizes are None where the remote gives only its fill (vLLM)."""

    model: str
    requests_running: float = 0.0
    requests_waiting: float = 0.0
    kv_cache_usage_ratio: float | None = None
    kv_cache_used_tokens: float | None = None
    kv_cache_total_tokens: float | None = None
    decode_tokens_per_second: float = 0.0
    prefill_tokens_per_second: float = 0.0


class _LiveCollector(Collector):
    """What is read at scrape time, per model: busy seconds, the rates and the engine's own stats, and
    the remote models' numbers under the same names.

    A model that was unloaded drops out of the engine gauges (its memory is gone) but keeps its
    counters, which never go down.
    """

    def __init__(self, models: Callable[[], list[ModelMetrics]], remote: Callable[[], list[RemoteModelStats]]) -> None:
        self._models = models
        self._remote = remote

    def collect(self) -> Iterator[Metric]:
        models = self._models()
        remote = self._remote()
        labels = [MODEL_LABEL]
        busy = CounterMetricFamily(names.BUSY_SECONDS, "time with at least one stream generating", labels=labels)
        prefill = GaugeMetricFamily(names.PREFILL_TOKENS_PER_SECOND, "prompt tokens/s, last few seconds", labels=labels)
        decode = GaugeMetricFamily(
            names.DECODE_TOKENS_PER_SECOND, "generated tokens/s, last few seconds", labels=labels
        )
        for model in models:
            busy.add_metric([model.name], model.busy.seconds())
            prefill.add_metric([model.name], model.prefill_rate.rate())
            decode.add_metric([model.name], model.decode_rate.rate())
        for stats in remote:
            prefill.add_metric([stats.model], stats.prefill_tokens_per_second)
            decode.add_metric([stats.model], stats.decode_tokens_per_second)
        yield from (busy, prefill, decode)
        yield from _engine_families([(model.name, model.stats()) for model in models], remote)


_ENGINE_GAUGES = {  # metric -> (help, EngineStats attribute)
    names.REQUESTS_RUNNING: ("requests generating now", "requests_running"),
    names.REQUESTS_WAITING: ("requests queued for a free sequence", "requests_waiting"),
    names.KV_CACHE_USED_TOKENS: ("KV cache cells in use", "kv_cache_used_tokens"),
    names.KV_CACHE_TOTAL_TOKENS: ("KV cache cells in total", "kv_cache_total_tokens"),
    names.SWA_CHECKPOINTS: ("sliding-window checkpoints held for prefix reuse", "swa_checkpoints"),
    names.SWA_CHECKPOINTS_MAX: ("the most checkpoints all slots may hold", "swa_checkpoints_max"),
    names.SWA_CHECKPOINT_BUDGET_BYTES: (
        "the most memory checkpoints may hold (bytes held: launcher_engine_memory_bytes{kind=swa_checkpoints})",
        "swa_checkpoint_budget_bytes",
    ),
    # The prompt cache on disk (engines/prompt_cache.py). Bytes and entries are this model's; the budget
    # is the whole folder's, shared by every model and server using it (the same under each label).
    names.PROMPT_CACHE_DISK_BYTES: ("bytes of this model's prompt prefixes on disk", "prompt_cache_disk_bytes"),
    names.PROMPT_CACHE_DISK_ENTRIES: ("this model's prompt prefixes stored on disk", "prompt_cache_disk_entries"),
    names.PROMPT_CACHE_DISK_BUDGET_BYTES: (
        "the most the prompt cache's folder may hold, all models together (0: off)",
        "prompt_cache_disk_budget_bytes",
    ),
}
_ENGINE_COUNTERS = {
    names.PREFIX_CACHE_HITS: ("requests that reused cached prompt tokens", "prefix_cache_hits"),
    names.PREFIX_CACHE_MISSES: ("requests that reused nothing", "prefix_cache_misses"),
    names.PREFIX_CACHE_HIT_TOKENS: ("prompt tokens served from cache", "prefix_cache_hit_tokens"),
    names.SWA_CHECKPOINT_RESTORES: (
        "prefixes reused by restoring a sliding-window checkpoint",
        "swa_checkpoint_restores",
    ),
    names.PROMPT_CACHE_DISK_HITS: (
        "prompts that missed in memory and restored a stored prefix from disk",
        "prompt_cache_disk_hits",
    ),
    names.PROMPT_CACHE_DISK_MISSES: (
        "prompts that missed in memory and found no usable prefix on disk",
        "prompt_cache_disk_misses",
    ),
    names.PROMPT_CACHE_DISK_RESTORED_TOKENS: (
        "prompt tokens restored from disk instead of read",
        "prompt_cache_disk_restored_tokens",
    ),
    names.PROMPT_CACHE_DISK_RESTORE_SECONDS: (
        "time spent reading and restoring prefixes from disk",
        "prompt_cache_disk_restore_seconds",
    ),
    names.PROMPT_CACHE_DISK_WRITES: ("prefixes written to disk", "prompt_cache_disk_writes"),
    names.PROMPT_CACHE_DISK_WRITE_FAILURES: (
        "prefix writes that failed or were skipped (a full disk): logged, never a failed request",
        "prompt_cache_disk_write_failures",
    ),
    # Speculative decoding (engines/speculation.py): the acceptance rate is accepted / drafted.
    names.SPECULATIVE_DRAFT_TOKENS: (
        "draft tokens verified by speculative decoding",
        "speculative_draft_tokens_total",
    ),
    names.SPECULATIVE_ACCEPTED_TOKENS: (
        "draft tokens accepted (generated without a decode step of their own)",
        "speculative_accepted_tokens_total",
    ),
}


_REMOTE_GAUGES = {  # the engine gauges a remote's /metrics can fill in
    names.REQUESTS_RUNNING: "requests_running",
    names.REQUESTS_WAITING: "requests_waiting",
    names.KV_CACHE_USED_TOKENS: "kv_cache_used_tokens",
    names.KV_CACHE_TOTAL_TOKENS: "kv_cache_total_tokens",
}


def _engine_families(models: list[tuple[str, EngineStats | None]], remote: list[RemoteModelStats]) -> Iterator[Metric]:
    """The engines' live stats, one sample per loaded model, then the remote models' where they are known."""
    loaded = [(name, stats) for name, stats in models if stats is not None]
    labels = [MODEL_LABEL]
    for name, (doc, attribute) in _ENGINE_GAUGES.items():
        gauge = GaugeMetricFamily(name, doc, labels=labels)
        for model, stats in loaded:
            gauge.add_metric([model], getattr(stats, attribute))
        remote_attribute = _REMOTE_GAUGES.get(name)
        for remote_stats in remote if remote_attribute else []:
            value = getattr(remote_stats, remote_attribute or "")
            if value is not None:
                gauge.add_metric([remote_stats.model], value)
        yield gauge
    ratio = GaugeMetricFamily(names.KV_CACHE_USAGE_RATIO, "KV cache fill, 0..1", labels=labels)
    for model, stats in loaded:
        total = stats.kv_cache_total_tokens
        ratio.add_metric([model], stats.kv_cache_used_tokens / total if total else 0.0)
    for remote_stats in remote:
        if remote_stats.kv_cache_usage_ratio is not None:
            ratio.add_metric([remote_stats.model], remote_stats.kv_cache_usage_ratio)
    yield ratio
    for name, (doc, attribute) in _ENGINE_COUNTERS.items():
        counter = CounterMetricFamily(name, doc, labels=labels)
        for model, stats in loaded:
            counter.add_metric([model], getattr(stats, attribute))
        yield counter
    memory = GaugeMetricFamily(names.ENGINE_MEMORY_BYTES, "engine-specific memory", labels=[MODEL_LABEL, "kind"])
    for model, stats in loaded:
        for kind, value in sorted(stats.memory.items()):
            memory.add_metric([model, kind], value)
    yield memory


class ServerMetrics:
    """All metrics of one server: the request counts, and each model's series under its label."""

    def __init__(self) -> None:
        self.registry = CollectorRegistry()
        ProcessCollector(registry=self.registry)
        PlatformCollector(registry=self.registry)
        GCCollector(registry=self.registry)
        reg = self.registry
        labels = [MODEL_LABEL]
        self.prompt_tokens = Counter(names.PROMPT_TOKENS, "prompt tokens processed", labels, registry=reg)
        self.generation_tokens = Counter(names.GENERATION_TOKENS, "tokens generated", labels, registry=reg)
        self.requests = Counter(names.REQUESTS, "requests by endpoint and status", ["endpoint", "status"], registry=reg)
        self.ttft = Histogram(
            names.TIME_TO_FIRST_TOKEN_SECONDS,
            "time to first token",
            labels,
            buckets=_LATENCY_BUCKETS,
            registry=reg,
        )
        self.inter_token = Histogram(
            names.INTER_TOKEN_LATENCY_SECONDS,
            "time between tokens",
            labels,
            buckets=_LATENCY_BUCKETS,
            registry=reg,
        )
        self.duration = Histogram(
            names.REQUEST_DURATION_SECONDS, "whole request", labels, buckets=_LATENCY_BUCKETS, registry=reg
        )
        # Per-stream figures that mean one thing each (the app and `launcher bench --calibrate` divide
        # the deltas of these counters): decode = tokens after a stream's first over the time from its
        # first to its last token; prefill = prompt tokens not served from cache over time to first token.
        self.stream_decode_tokens = Counter(
            names.STREAM_DECODE_TOKENS, "tokens after each stream's first", labels, registry=reg
        )
        self.stream_decode_seconds = Counter(
            names.STREAM_DECODE_SECONDS,
            "each stream's time from its first to its last token",
            labels,
            registry=reg,
        )
        self.prefill_uncached_tokens = Counter(
            names.PREFILL_UNCACHED_TOKENS, "prompt tokens read (not from the prefix cache)", labels, registry=reg
        )
        self.prefill_seconds = Counter(
            names.PREFILL_SECONDS,
            "time to first token of the requests that read prompt tokens",
            labels,
            registry=reg,
        )
        # Tool calls the model started, by outcome ("parsed"; "repaired": parsed once a slip with one
        # meaning was fixed, server/core/call_repair.py; "left_as_text": did not parse and reached the client
        # as text) and by the grammar that constrained them ("lazy" on tool_choice auto, "required" for a
        # forced call, "none").
        self.tool_calls = Counter(
            names.TOOL_CALLS,
            "tool calls started, by outcome and grammar",
            [MODEL_LABEL, "outcome", "grammar"],
            registry=reg,
        )
        self._models: dict[str, ModelMetrics] = {}
        self._loaded: dict[str, ModelMetrics] = {}
        self._lock = threading.Lock()
        # The remote models' numbers (server/upstreams/remote_metrics.py sets this; read at each scrape)
        self.remote_stats: Callable[[], list[RemoteModelStats]] = list
        reg.register(_LiveCollector(self._loaded_models, lambda: self.remote_stats()))

    def for_model(self, name: str, stats: Callable[[], EngineStats | None]) -> ModelMetrics:
        """The series of a model that was just loaded (the same counters again if it was loaded before)."""
        with self._lock:
            model = self._models.get(name)
            if model is None:
                model = self._models[name] = ModelMetrics(self, name, stats)
            model.stats = stats
            self._loaded[name] = model
            return model

    def unloaded(self, name: str) -> None:
        """`name` was unloaded: its engine gauges go; its counters stay (they never go down)."""
        with self._lock:
            self._loaded.pop(name, None)

    def _loaded_models(self) -> list[ModelMetrics]:
        with self._lock:
            return list(self._loaded.values())

    def render(self) -> bytes:
        """The Prometheus text exposition."""
        data: bytes = generate_latest(self.registry)
        return data
