"""Qt-free reading of the server's /metrics and the numbers the gauges show.

`parse_metrics` turns one Prometheus text scrape into a `MetricsSnapshot`; `LiveSample.between`
derives rates from two snapshots (tokens/s from counters, the mean TTFT of the requests that
finished in between). `Measured` reads the server's cumulative figures (per-stream decode,
uncached prefill, aggregate while busy, the engine's memory), and `compare` sets them beside the
advisor's `Prediction` for the same settings, with the error in %.
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass, field

from launcher.core import metric_names as names
from launcher.core.units import format_bytes


@dataclass(frozen=True)
class MetricsSnapshot:
    """One scrape of /metrics, summed over labels where the gauges need one number; `models` holds
    each model's own series (the `model` label), for what is about one model."""

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
    stream_decode_tokens_total: float = 0.0
    stream_decode_seconds_total: float = 0.0
    prefill_uncached_tokens_total: float = 0.0
    prefill_seconds_total: float = 0.0
    busy_seconds_total: float = 0.0
    prompt_cache_disk_hits_total: float = 0.0
    prompt_cache_disk_misses_total: float = 0.0
    prompt_cache_disk_bytes: float = 0.0
    prompt_cache_disk_budget_bytes: float = 0.0  # the folder's, shared by the models: the largest, not a sum
    speculative_draft_tokens_total: float = 0.0
    speculative_accepted_tokens_total: float = 0.0
    engine_memory: dict[str, float] = field(default_factory=dict)  # by kind, summed over the loaded models
    process_resident_bytes: float | None = None
    models: dict[str, MetricsSnapshot] = field(default_factory=dict)

    @property
    def decode_tps_by_model(self) -> dict[str, float]:
        """Each model's live decode tok/s."""
        return {name: model.decode_tokens_per_second for name, model in self.models.items()}

    def for_model(self, name: str | None) -> MetricsSnapshot:
        """`name`'s own series; the whole server's when no model is named or the scrape has no such label."""
        return self.models.get(name, self) if name else self


HOUSEKEEPING_ENDPOINTS = ("/metrics", "/health", "/healthz", "/v1/models", "/launcher/models", "/")

_SIMPLE = {
    names.total(names.PROMPT_TOKENS): "prompt_tokens_total",
    names.total(names.GENERATION_TOKENS): "generation_tokens_total",
    names.REQUESTS_RUNNING: "requests_running",
    names.REQUESTS_WAITING: "requests_waiting",
    names.KV_CACHE_USED_TOKENS: "kv_used_tokens",
    names.KV_CACHE_TOTAL_TOKENS: "kv_total_tokens",
    names.PREFILL_TOKENS_PER_SECOND: "prefill_tokens_per_second",
    names.DECODE_TOKENS_PER_SECOND: "decode_tokens_per_second",
    names.sum_of(names.TIME_TO_FIRST_TOKEN_SECONDS): "ttft_sum",
    names.count_of(names.TIME_TO_FIRST_TOKEN_SECONDS): "ttft_count",
    names.total(names.PREFIX_CACHE_HITS): "prefix_cache_hits_total",
    names.total(names.PREFIX_CACHE_MISSES): "prefix_cache_misses_total",
    names.total(names.STREAM_DECODE_TOKENS): "stream_decode_tokens_total",
    names.total(names.STREAM_DECODE_SECONDS): "stream_decode_seconds_total",
    names.total(names.PREFILL_UNCACHED_TOKENS): "prefill_uncached_tokens_total",
    names.total(names.PREFILL_SECONDS): "prefill_seconds_total",
    names.total(names.BUSY_SECONDS): "busy_seconds_total",
    names.total(names.PROMPT_CACHE_DISK_HITS): "prompt_cache_disk_hits_total",
    names.total(names.PROMPT_CACHE_DISK_MISSES): "prompt_cache_disk_misses_total",
    names.PROMPT_CACHE_DISK_BYTES: "prompt_cache_disk_bytes",
    names.total(names.SPECULATIVE_DRAFT_TOKENS): "speculative_draft_tokens_total",
    names.total(names.SPECULATIVE_ACCEPTED_TOKENS): "speculative_accepted_tokens_total",
    "process_resident_memory_bytes": "process_resident_bytes",
}


@dataclass
class _Tally:
    """The sums of one scrape, for the whole server or for one model."""

    values: dict[str, float] = field(default_factory=lambda: defaultdict(float))
    engine_memory: dict[str, float] = field(default_factory=lambda: defaultdict(float))
    usage_ratios: list[float] = field(default_factory=list)

    def snapshot(self, now: float, models: dict[str, MetricsSnapshot] | None = None) -> MetricsSnapshot:
        fields = dict(self.values)
        resident = fields.pop("process_resident_bytes", None)
        # Two models' ratios do not add up: the server's fill is its used cells over all its cells.
        total = fields.get("kv_total_tokens", 0.0)
        used = fields.get("kv_used_tokens", 0.0)
        fields["kv_usage_ratio"] = used / total if total else max(self.usage_ratios, default=0.0)
        return MetricsSnapshot(
            time=now,
            engine_memory=dict(self.engine_memory),
            process_resident_bytes=resident,
            models=models or {},
            **fields,
        )


def parse_metrics(text: str, now: float) -> MetricsSnapshot:
    """Read the series launcher/server/metrics.py exports (core/metric_names.py) out of one Prometheus text scrape."""
    from prometheus_client.parser import text_string_to_metric_families  # only once a server runs

    server = _Tally()
    models: dict[str, _Tally] = defaultdict(_Tally)
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            name, labels, value = sample.name, sample.labels, float(sample.value)
            tallies = [server, models[labels["model"]]] if "model" in labels else [server]
            if name in _SIMPLE:
                for tally in tallies:
                    tally.values[_SIMPLE[name]] += value
            elif name == names.PROMPT_CACHE_DISK_BUDGET_BYTES:  # one folder's budget under each label
                for tally in tallies:
                    tally.values["prompt_cache_disk_budget_bytes"] = max(
                        tally.values["prompt_cache_disk_budget_bytes"], value
                    )
            elif name == names.KV_CACHE_USAGE_RATIO:
                for tally in tallies:
                    tally.usage_ratios.append(value)
            elif name == names.total(names.REQUESTS):
                if labels.get("endpoint", "") in HOUSEKEEPING_ENDPOINTS:
                    continue  # our own polling is not traffic
                server.values["requests_total"] += value
                if str(labels.get("status", "200"))[:1] in ("4", "5"):
                    server.values["requests_failed_total"] += value
            elif name == names.ENGINE_MEMORY_BYTES:  # one sample per model and kind: the server holds all
                for tally in tallies:
                    tally.engine_memory[labels.get("kind", "")] += value
    return server.snapshot(now, {name: tally.snapshot(now) for name, tally in models.items()})


def prompt_cache_summary(snap: MetricsSnapshot) -> tuple[str, str]:
    """The prompt cache on disk as the gauges show it: (size / budget or "off", hit rate).

    The hit rate counts the prompts that missed in memory and looked on disk: restored / looked."""
    budget = snap.prompt_cache_disk_budget_bytes
    if budget <= 0:
        return "off", ""
    size = f"{format_bytes(snap.prompt_cache_disk_bytes)} / {format_bytes(budget)}"
    hits, misses = int(snap.prompt_cache_disk_hits_total), int(snap.prompt_cache_disk_misses_total)
    if hits + misses == 0:
        return size, "no lookups yet"
    return size, f"hit rate {hits / (hits + misses):.0%} ({hits:,} of {hits + misses:,})"


def speculation_summary(snap: MetricsSnapshot, mode: str | None = None) -> tuple[str, str]:
    """Speculative decoding as the gauges show it: (acceptance rate, "accepted of drafted"); once nothing
    was drafted, "off" when the server was started with `--speculative off` (`mode`), else "idle"."""
    drafted, accepted = int(snap.speculative_draft_tokens_total), int(snap.speculative_accepted_tokens_total)
    if drafted <= 0:
        return ("off", "") if mode == "off" else ("idle", "nothing drafted yet")
    return f"{accepted / drafted:.0%} accepted", f"{accepted:,} of {drafted:,} draft tokens"


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


MEMORY_TOLERANCE = 0.15  # within this, a memory prediction holds
DECODE_TOLERANCE = 0.20  # a calibrated decode prediction is expected this close (uncalibrated: its range)


@dataclass(frozen=True)
class Measured:
    """The server's own figures since it started, each meaning one thing (see the server's metrics)."""

    decode_tps: float | None = None  # per stream: tokens after its first over first -> last token
    prefill_tps: float | None = None  # prompt tokens not from cache over time to first token
    aggregate_tps: float | None = None  # all streams' tokens over the time any stream was generating
    concurrency: float | None = None  # streams generating at once, on average, while busy
    engine_memory_bytes: int | None = None  # weights + KV cache + compute buffers, as the engine allocated
    checkpoint_bytes: int = 0  # sliding-window checkpoints held now
    rss_bytes: int | None = None
    device_bytes: int | None = None

    @classmethod
    def from_sample(cls, sample: LiveSample, model: str | None = None) -> Measured:
        """Read the cumulative counters of the latest scrape: `model`'s own series when named (a
        prediction is for one model; another model loaded beside it must not count)."""
        from launcher.bench.calibrate_measure import memory_total

        snap = sample.snapshot.for_model(model)

        def ratio(part: float, whole: float) -> float | None:
            return part / whole if part > 0 and whole > 0 else None

        return cls(
            decode_tps=ratio(snap.stream_decode_tokens_total, snap.stream_decode_seconds_total),
            prefill_tps=ratio(snap.prefill_uncached_tokens_total, snap.prefill_seconds_total),
            aggregate_tps=ratio(snap.generation_tokens_total, snap.busy_seconds_total),
            concurrency=ratio(snap.stream_decode_seconds_total, snap.busy_seconds_total),
            # the same sum `launcher bench --calibrate` compares with the prediction
            engine_memory_bytes=memory_total({kind: int(value) for kind, value in snap.engine_memory.items()}),
            checkpoint_bytes=int(snap.engine_memory.get("swa_checkpoints", 0)),
            rss_bytes=sample.memory.rss_bytes,
            device_bytes=sample.memory.device_used_bytes,
        )


@dataclass(frozen=True)
class Prediction:
    """What the advisor predicted for the server as it runs (its engine, context, parallel, KV type)."""

    memory_bytes: int | None  # weights + KV + overhead: comparable with the engine's own figures
    decode_low: float | None
    decode_high: float | None
    where: str = ""  # "CPU only", "full GPU", ...
    prefill_low: float | None = None
    prefill_high: float | None = None
    checkpoint_bound_bytes: int = 0  # sliding-window checkpoints may take up to this, in host RAM
    calibrated_runs: int = 0  # 0: the advisor's model alone


@dataclass(frozen=True)
class Comparison:
    """One line of predicted beside measured, and whether the prediction held."""

    text: str
    error: float | None = None  # measured vs predicted (centre), signed
    off: bool = False  # outside the tolerance: the app marks it


def _percent(error: float) -> str:
    return f"{error:+.0%}"


def compare(prediction: Prediction | None, measured: Measured | None) -> list[Comparison]:
    """Memory, decode and prefill, predicted beside measured, with the error in % (Qt-free)."""
    lines: list[Comparison] = []
    if prediction is None:
        lines.append(Comparison("No prediction for this model: the advisor has no numbers for it."))
        prediction = Prediction(None, None, None)
    elif prediction.memory_bytes:
        predicted = format_bytes(prediction.memory_bytes)
        if measured is None or measured.engine_memory_bytes is None:
            lines.append(Comparison(f"Memory: predicted {predicted} ({prediction.where}); measured once loaded."))
        else:
            error = (measured.engine_memory_bytes - prediction.memory_bytes) / prediction.memory_bytes
            extra = f"; process RSS {format_bytes(measured.rss_bytes)}" if measured.rss_bytes else ""
            if prediction.checkpoint_bound_bytes:
                extra += (
                    f"; checkpoints {format_bytes(measured.checkpoint_bytes)} "
                    f"of up to {format_bytes(prediction.checkpoint_bound_bytes)}"
                )
            lines.append(
                Comparison(
                    f"Memory (weights + KV + buffers): predicted {predicted}, measured "
                    f"{format_bytes(measured.engine_memory_bytes)} ({_percent(error)}){extra}.",
                    error,
                    abs(error) > MEMORY_TOLERANCE,
                )
            )
    lines.append(_speed("Decode per stream", prediction.decode_low, prediction.decode_high, measured, prediction))
    if prediction.prefill_low is not None or (measured is not None and measured.prefill_tps is not None):
        lines.append(_speed("Prefill", prediction.prefill_low, prediction.prefill_high, measured, prediction))
    if measured is not None and measured.aggregate_tps is not None and measured.concurrency is not None:
        lines.append(
            Comparison(
                f"All streams: {_tps(measured.aggregate_tps)} tok/s at {measured.concurrency:.1f} streams on average "
                "while busy."
            )
        )
    return lines


def _speed(
    label: str, low: float | None, high: float | None, measured: Measured | None, prediction: Prediction
) -> Comparison:
    value = None
    if measured is not None:
        value = measured.decode_tps if label.startswith("Decode") else measured.prefill_tps
    if low is None or high is None:
        predicted = "no prediction"
    else:
        how = f", calibrated from {prediction.calibrated_runs} run{'s' * (prediction.calibrated_runs != 1)}"
        predicted = f"predicted {_tps(low)}–{_tps(high)} tok/s{how if prediction.calibrated_runs else ''}"
    if value is None:
        return Comparison(f"{label}: {predicted}; send a few requests to measure.")
    if low is None or high is None:
        return Comparison(f"{label}: {predicted}, measured {_tps(value)} tok/s.")
    centre = (low + high) / 2
    error = (value - centre) / centre
    # Calibrated, the centre should be this close; uncalibrated, the range is the claim.
    off = abs(error) > DECODE_TOLERANCE if prediction.calibrated_runs else not low <= value <= high
    return Comparison(f"{label}: {predicted}, measured {_tps(value)} tok/s ({_percent(error)}).", error, off)


def _tps(value: float) -> str:
    return f"{value:.1f}" if value < 100 else f"{value:.0f}"
