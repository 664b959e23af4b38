"""Qt-free reading of the server's /metrics (contract 2) and the numbers the gauges show.

`parse_metrics` turns one Prometheus text scrape into a `MetricsSnapshot`; `LiveSample.between`
derives rates from two snapshots (tokens/s from counters, the mean TTFT of the requests that
finished in between). `MeasuredTotals` keeps the running averages the app compares with the
advisor's prediction.
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass, field


@dataclass(frozen=True)
class MetricsSnapshot:
    """One scrape of /metrics, summed over labels where the gauges need one number."""

    time: float
    prompt_tokens_total: float = 0.0
    generation_tokens_total: float = 0.0
    requests_total: float = 0.0
    requests_failed_total: float = 0.0
    requests_running: float = 0.0
    requests_waiting: float = 0.0
    kv_used_tokens: float = 0.0
    kv_total_tokens: float = 0.0
    kv_usage_ratio: float = 0.0
    prefill_tokens_per_second: float = 0.0
    decode_tokens_per_second: float = 0.0
    ttft_sum: float = 0.0
    ttft_count: float = 0.0
    prefix_cache_hits_total: float = 0.0
    prefix_cache_misses_total: float = 0.0
    engine_memory: dict[str, float] = field(default_factory=dict)
    process_resident_bytes: float | None = None


HOUSEKEEPING_ENDPOINTS = ("/metrics", "/health", "/healthz", "/v1/models", "/")

_SIMPLE = {
    "launcher_prompt_tokens_total": "prompt_tokens_total",
    "launcher_generation_tokens_total": "generation_tokens_total",
    "launcher_requests_running": "requests_running",
    "launcher_requests_waiting": "requests_waiting",
    "launcher_kv_cache_used_tokens": "kv_used_tokens",
    "launcher_kv_cache_total_tokens": "kv_total_tokens",
    "launcher_kv_cache_usage_ratio": "kv_usage_ratio",
    "launcher_prefill_tokens_per_second": "prefill_tokens_per_second",
    "launcher_decode_tokens_per_second": "decode_tokens_per_second",
    "launcher_time_to_first_token_seconds_sum": "ttft_sum",
    "launcher_time_to_first_token_seconds_count": "ttft_count",
    "launcher_prefix_cache_hits_total": "prefix_cache_hits_total",
    "launcher_prefix_cache_misses_total": "prefix_cache_misses_total",
    "process_resident_memory_bytes": "process_resident_bytes",
}


def parse_metrics(text: str, now: float) -> MetricsSnapshot:
    """Read the contract-2 metric names out of one Prometheus text scrape."""
    from prometheus_client.parser import text_string_to_metric_families  # only once a server runs

    values: dict[str, float] = defaultdict(float)
    engine_memory: dict[str, float] = {}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            name, labels, value = sample.name, sample.labels, float(sample.value)
            if name in _SIMPLE:
                values[_SIMPLE[name]] += value
            elif name == "launcher_requests_total":
                if labels.get("endpoint", "") in HOUSEKEEPING_ENDPOINTS:
                    continue  # our own polling is not traffic
                values["requests_total"] += value
                if str(labels.get("status", "200"))[:1] in ("4", "5"):
                    values["requests_failed_total"] += value
            elif name == "launcher_engine_memory_bytes":
                engine_memory[labels.get("kind", "")] = value
    fields = dict(values)
    resident = fields.pop("process_resident_bytes", None)
    return MetricsSnapshot(time=now, engine_memory=engine_memory, process_resident_bytes=resident, **fields)


@dataclass(frozen=True)
class ProcessMemory:
    """Memory of the server process and of the device the model lives on."""

    rss_bytes: int | None = None
    device_used_bytes: int | None = None  # VRAM used by the server (NVML) or unified memory in use
    device_total_bytes: int | None = None
    device_label: str = "RAM"  # "VRAM" | "unified memory" | "RAM"


@dataclass(frozen=True)
class LiveSample:
    """What the gauges show for one poll."""

    time: float
    decode_tps: float
    prefill_tps: float
    generated_tps: float  # from the generation-token counter; catches bursts shorter than the gauge window
    ttft_recent: float | None  # mean TTFT (s) of requests that started streaming since the last poll
    requests_total: int
    requests_failed: int
    requests_running: int
    requests_waiting: int
    kv_used_tokens: int
    kv_total_tokens: int
    kv_usage_ratio: float
    memory: ProcessMemory
    snapshot: MetricsSnapshot

    @classmethod
    def between(cls, previous: MetricsSnapshot | None, current: MetricsSnapshot, memory: ProcessMemory) -> LiveSample:
        """Derive rates from two scrapes (the first poll has no rates from counters)."""
        generated_tps = 0.0
        ttft_recent = None
        if previous is not None and current.time > previous.time:
            elapsed = current.time - previous.time
            generated_tps = max(0.0, current.generation_tokens_total - previous.generation_tokens_total) / elapsed
            new_count = current.ttft_count - previous.ttft_count
            if new_count > 0:
                ttft_recent = (current.ttft_sum - previous.ttft_sum) / new_count
        kv_ratio = current.kv_usage_ratio
        if not kv_ratio and current.kv_total_tokens:
            kv_ratio = current.kv_used_tokens / current.kv_total_tokens
        return cls(
            time=current.time,
            decode_tps=current.decode_tokens_per_second,
            prefill_tps=current.prefill_tokens_per_second,
            generated_tps=generated_tps,
            ttft_recent=ttft_recent,
            requests_total=int(current.requests_total),
            requests_failed=int(current.requests_failed_total),
            requests_running=int(current.requests_running),
            requests_waiting=int(current.requests_waiting),
            kv_used_tokens=int(current.kv_used_tokens),
            kv_total_tokens=int(current.kv_total_tokens),
            kv_usage_ratio=kv_ratio,
            memory=memory,
            snapshot=current,
        )


@dataclass
class MeasuredTotals:
    """Running measurements to set against the advisor's prediction."""

    decode_samples: list[float] = field(default_factory=list)
    peak_rss_bytes: int = 0
    peak_device_bytes: int = 0

    def add(self, sample: LiveSample) -> None:
        """Fold one poll in; only busy polls count towards the decode average."""
        if sample.decode_tps > 0:
            self.decode_samples.append(sample.decode_tps)
            del self.decode_samples[:-120]
        self.peak_rss_bytes = max(self.peak_rss_bytes, sample.memory.rss_bytes or 0)
        self.peak_device_bytes = max(self.peak_device_bytes, sample.memory.device_used_bytes or 0)

    @property
    def decode_tps(self) -> float | None:
        """Mean decode tokens/s while busy, or None before any traffic."""
        if not self.decode_samples:
            return None
        return sum(self.decode_samples) / len(self.decode_samples)


@dataclass(frozen=True)
class Prediction:
    """What the advisor predicted for the model being served."""

    memory_bytes: int | None
    decode_low: float | None
    decode_high: float | None
    where: str = ""  # "CPU only", "full GPU", ...
