"""Prometheus metrics for /metrics (the app's gauges and `launcher bench` read these names: renaming one breaks them).

One `CollectorRegistry` per app, so several servers in one process (tests) never share
counters. Engine-side numbers (running/waiting, KV cache, prefix cache, memory) are read from
`LoadedModel.stats()` at scrape time; throughput gauges are rates over the last few seconds.
"""

from __future__ import annotations

import threading
import time
from collections import deque
from collections.abc import Callable, Iterator

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, generate_latest
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.gc_collector import GCCollector
from prometheus_client.platform_collector import PlatformCollector
from prometheus_client.process_collector import ProcessCollector
from prometheus_client.registry import Collector

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


class _BusyCollector(Collector):
    """`launcher_busy_seconds_total`, read from the clock at scrape time."""

    def __init__(self, clock: BusyClock) -> None:
        self._clock = clock

    def collect(self) -> Iterator[Metric]:
        yield CounterMetricFamily(
            "launcher_busy_seconds", "time with at least one stream generating", value=self._clock.seconds()
        )


class _EngineCollector(Collector):
    """Reads the engine's live stats at scrape time."""

    def __init__(self, stats: Callable[[], EngineStats | None]) -> None:
        self._stats = stats

    def collect(self) -> Iterator[Metric]:
        stats = self._stats() or EngineStats()
        gauges = {
            "launcher_requests_running": ("requests generating now", stats.requests_running),
            "launcher_requests_waiting": ("requests queued for a free sequence", stats.requests_waiting),
            "launcher_kv_cache_used_tokens": ("KV cache cells in use", stats.kv_cache_used_tokens),
            "launcher_kv_cache_total_tokens": ("KV cache cells in total", stats.kv_cache_total_tokens),
            "launcher_swa_checkpoints": ("sliding-window checkpoints held for prefix reuse", stats.swa_checkpoints),
            "launcher_swa_checkpoints_max": ("the most checkpoints all slots may hold", stats.swa_checkpoints_max),
            "launcher_swa_checkpoint_budget_bytes": (
                "the most memory checkpoints may hold (bytes held: launcher_engine_memory_bytes{kind=swa_checkpoints})",
                stats.swa_checkpoint_budget_bytes,
            ),
        }
        for name, (doc, value) in gauges.items():
            yield GaugeMetricFamily(name, doc, value=value)
        ratio = stats.kv_cache_used_tokens / stats.kv_cache_total_tokens if stats.kv_cache_total_tokens else 0.0
        yield GaugeMetricFamily("launcher_kv_cache_usage_ratio", "KV cache fill, 0..1", value=ratio)
        counters = {
            "launcher_prefix_cache_hits": ("requests that reused cached prompt tokens", stats.prefix_cache_hits),
            "launcher_prefix_cache_misses": ("requests that reused nothing", stats.prefix_cache_misses),
            "launcher_prefix_cache_hit_tokens": ("prompt tokens served from cache", stats.prefix_cache_hit_tokens),
            "launcher_swa_checkpoint_restores": (
                "prefixes reused by restoring a sliding-window checkpoint",
                stats.swa_checkpoint_restores,
            ),
        }
        for name, (doc, value) in counters.items():
            yield CounterMetricFamily(name, doc, value=value)
        memory = GaugeMetricFamily("launcher_engine_memory_bytes", "engine-specific memory", labels=["kind"])
        for kind, value in sorted(stats.memory.items()):
            memory.add_metric([kind], value)
        yield memory


class ServerMetrics:
    """All metrics of one server."""

    def __init__(self, stats: Callable[[], EngineStats | None]) -> None:
        self.registry = CollectorRegistry()
        ProcessCollector(registry=self.registry)
        PlatformCollector(registry=self.registry)
        GCCollector(registry=self.registry)
        reg = self.registry
        self.prompt_tokens = Counter("launcher_prompt_tokens", "prompt tokens processed", registry=reg)
        self.generation_tokens = Counter("launcher_generation_tokens", "tokens generated", registry=reg)
        self.requests = Counter(
            "launcher_requests", "requests by endpoint and status", ["endpoint", "status"], registry=reg
        )
        self.ttft = Histogram(
            "launcher_time_to_first_token_seconds", "time to first token", buckets=_LATENCY_BUCKETS, registry=reg
        )
        self.inter_token = Histogram(
            "launcher_inter_token_latency_seconds", "time between tokens", buckets=_LATENCY_BUCKETS, registry=reg
        )
        self.duration = Histogram(
            "launcher_request_duration_seconds", "whole request", buckets=_LATENCY_BUCKETS, registry=reg
        )
        # Per-stream figures that mean one thing each (the app and `launcher bench --calibrate` divide
        # the deltas of these counters): decode = tokens after a stream's first over the time from its
        # first to its last token; prefill = prompt tokens not served from cache over time to first token.
        self.stream_decode_tokens = Counter(
            "launcher_stream_decode_tokens", "tokens after each stream's first", registry=reg
        )
        self.stream_decode_seconds = Counter(
            "launcher_stream_decode_seconds", "each stream's time from its first to its last token", registry=reg
        )
        self.prefill_uncached_tokens = Counter(
            "launcher_prefill_uncached_tokens", "prompt tokens read (not from the prefix cache)", registry=reg
        )
        self.prefill_seconds = Counter(
            "launcher_prefill_seconds", "time to first token of the requests that read prompt tokens", registry=reg
        )
        self.busy = BusyClock()
        reg.register(_BusyCollector(self.busy))
        self.prefill_rate = RateWindow()
        self.decode_rate = RateWindow()
        prefill = Gauge("launcher_prefill_tokens_per_second", "prompt tokens/s, last few seconds", registry=reg)
        prefill.set_function(self.prefill_rate.rate)
        decode = Gauge("launcher_decode_tokens_per_second", "generated tokens/s, last few seconds", registry=reg)
        decode.set_function(self.decode_rate.rate)
        reg.register(_EngineCollector(stats))

    def render(self) -> bytes:
        """The Prometheus text exposition."""
        data: bytes = generate_latest(self.registry)
        return data
