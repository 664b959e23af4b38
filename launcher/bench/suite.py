"""Running a whole benchmark: discover the model, calibrate prompt lengths, run each workload,
sample the server's memory, and read its /metrics counters around each workload."""

from __future__ import annotations

import datetime as dt
import time
from dataclasses import dataclass, field
from typing import Any

from launcher.bench.memory import (
    HostLoad,
    MemorySampler,
    PeakMemory,
    discover_listening_pid,
    load_average,
    process_tree_cpu_seconds,
)
from launcher.bench.metrics import PhaseSummary, summarize_phase
from launcher.bench.runner import (
    PhaseResult,
    calibrate_tokens_per_word,
    fetch_metrics,
    fetch_models,
    make_client,
    run_phases,
    stream_chat,
)
from launcher.bench.workloads import (
    DEFAULT_WORKLOADS,
    BenchRequest,
    Workload,
    WorkloadSettings,
    build_workloads,
    with_tokens_per_word,
)
from launcher.core import metric_names as names

# Counters whose change over a workload the report shows (names from launcher/core/metric_names.py).
_COUNTERS = (
    names.total(names.PROMPT_TOKENS),
    names.total(names.GENERATION_TOKENS),
    names.total(names.PREFIX_CACHE_HITS),
    names.total(names.PREFIX_CACHE_MISSES),
    names.total(names.PREFIX_CACHE_HIT_TOKENS),
)


@dataclass(frozen=True)
class BenchConfig:
    """What to benchmark and how."""

    base_url: str
    api_key: str | None = None
    model: str | None = None
    workloads: tuple[str, ...] = DEFAULT_WORKLOADS
    settings: WorkloadSettings = field(default_factory=WorkloadSettings)
    timeout: float = 600.0
    server_pid: int | None = None
    calibrate: bool = True
    warmup: bool = True


@dataclass
class WorkloadResult:
    """Raw phases and their summaries for one workload, plus the server's counter deltas."""

    workload: Workload
    phases: list[PhaseResult]
    summaries: list[PhaseSummary]
    counters: dict[str, float] | None


@dataclass
class SuiteResult:
    """Everything one `launcher bench` run measured."""

    config: BenchConfig
    started_at: str
    model_id: str | None
    model_entries: list[dict[str, Any]]
    tokens_per_word: float
    tokens_per_word_measured: bool
    workloads: list[WorkloadResult]
    peak_memory: PeakMemory
    metrics_available: bool
    host_load: HostLoad


def _counter_delta(before: dict[str, float] | None, after: dict[str, float] | None) -> dict[str, float] | None:
    if before is None or after is None:
        return None
    return {name: after.get(name, 0.0) - before.get(name, 0.0) for name in _COUNTERS if name in after}


async def run_suite(config: BenchConfig) -> SuiteResult:
    """Run every requested workload against `config.base_url` and collect the raw results.

    Raises runner.ServerUnreachable when nothing answers at the base URL.
    """
    started_at = dt.datetime.now(dt.UTC).isoformat(timespec="seconds")
    async with make_client(config.base_url, config.api_key, config.timeout) as client:
        entries = await fetch_models(client)
        model_id = config.model or (str(entries[0].get("id")) if entries else None)

        async def read_metrics() -> dict[str, float] | None:
            return await fetch_metrics(client, config.base_url)

        metrics_available = (await read_metrics()) is not None
        pid = config.server_pid or discover_listening_pid(config.base_url)
        if pid is not None:
            sampler = MemorySampler.for_pid(pid)
        elif metrics_available:
            sampler = MemorySampler.for_metrics(read_metrics)
        else:
            sampler = None

        settings = config.settings
        if config.warmup:
            # One small request so model load, graph building and page faults are not in the numbers.
            warm = BenchRequest(({"role": "user", "content": "Say hello."},), max_tokens=8)
            await stream_chat(client, warm, model=model_id, seed=0)
        measured = False
        if config.calibrate:
            tokens_per_word, measured = await calibrate_tokens_per_word(
                client, model=model_id, fallback=settings.tokens_per_word
            )
            settings = with_tokens_per_word(settings, tokens_per_word)

        if sampler is not None:
            sampler.start()
        load_start, wall_start = load_average(), time.perf_counter()
        cpu_start = process_tree_cpu_seconds(pid) if pid is not None else None
        results: list[WorkloadResult] = []
        try:
            for workload in build_workloads(config.workloads, settings):
                before = await read_metrics() if metrics_available else None
                phases = await run_phases(client, workload.phases, model=model_id, seed=settings.seed)
                after = await read_metrics() if metrics_available else None
                summaries = [summarize_phase(p) for p in phases]
                results.append(WorkloadResult(workload, phases, summaries, _counter_delta(before, after)))
        finally:
            peak = await sampler.stop() if sampler is not None else PeakMemory(None, "unavailable")
            cpu_end = process_tree_cpu_seconds(pid) if pid is not None else None
            host_load = HostLoad(
                wall_seconds=time.perf_counter() - wall_start,
                load_average_start=load_start,
                load_average_end=load_average(),
                server_cpu_seconds=cpu_end - cpu_start if cpu_start is not None and cpu_end is not None else None,
            )
    return SuiteResult(
        config=config,
        started_at=started_at,
        model_id=model_id,
        model_entries=entries,
        tokens_per_word=settings.tokens_per_word,
        tokens_per_word_measured=measured,
        workloads=results,
        peak_memory=peak,
        metrics_available=metrics_available,
        host_load=host_load,
    )
