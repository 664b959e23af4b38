"""The benchmark report: one JSON document and a Markdown rendering of it.

A number alone is worthless (docs/benchmarks.md), so the report records the model, quant,
engine and version (from /v1/models), the bench flags, the machine and the workload shapes
next to every metric.
"""

from __future__ import annotations

import dataclasses
import platform
import re
import sys
from importlib import metadata
from typing import Any

from launcher import __version__
from launcher.bench.metrics import json_validity, prefill_interference, prefix_pairs
from launcher.bench.suite import SuiteResult, WorkloadResult
from launcher.bench.workloads import JSON_SCHEMA
from launcher.core import metric_names as names
from launcher.core.units import format_bytes

# Quant names as they appear in file names and ids: Q4_K_M, IQ3_XXS, BF16, 4.0bpw, 4bit.
_QUANT_PATTERN = re.compile(r"(?i)(?<![a-z0-9])(I?Q\d(?:_[A-Z0-9]+)*|F16|BF16|F32|\d(?:\.\d+)?bpw|\dbit)(?![a-z0-9])")


def machine_summary() -> dict[str, Any]:
    """CPU, cores, RAM, GPUs and OS of this machine (the hardware probe when it is available)."""
    try:
        from launcher.hardware.probe import probe_machine
    except ImportError:
        return _basic_machine_summary()
    machine = probe_machine()
    return {
        "cpu": machine.cpu.brand,
        "arch": machine.cpu.arch,
        "physical_cores": machine.cpu.physical_cores,
        "logical_cores": machine.cpu.logical_cores,
        "cpu_features": sorted(f for f in machine.cpu.features if f.startswith(("avx", "amx", "neon", "fma"))),
        "ram_bytes": machine.memory.total,
        "gpus": [f"{g.name} ({format_bytes(g.memory_total)})" for g in machine.gpus],
        "apple": machine.apple.chip if machine.apple else None,
        "os": f"{machine.os} {machine.os_version}",
    }


def _basic_machine_summary() -> dict[str, Any]:
    import psutil

    brand = platform.processor() or platform.machine()
    try:
        with open("/proc/cpuinfo", encoding="utf-8") as cpuinfo:
            for line in cpuinfo:
                if line.startswith("model name"):
                    brand = line.split(":", 1)[1].strip()
                    break
    except OSError:
        pass
    return {
        "cpu": brand,
        "arch": platform.machine(),
        "physical_cores": psutil.cpu_count(logical=False),
        "logical_cores": psutil.cpu_count(logical=True),
        "ram_bytes": psutil.virtual_memory().total,
        "gpus": [],
        "os": f"{platform.system()} {platform.release()}",
    }


def software_versions() -> dict[str, str | None]:
    """Versions that change benchmark numbers (read from package metadata, nothing imported)."""
    versions: dict[str, str | None] = {"python": sys.version.split()[0], "launcher": __version__}
    for package in ("llama-cpp-python", "httpx", "uvicorn", "fastapi"):
        try:
            versions[package] = metadata.version(package)
        except metadata.PackageNotFoundError:
            versions[package] = None
    return versions


def describe_target(suite: SuiteResult) -> dict[str, Any]:
    """Model id, engine, engine version and quant as the server reports them in /v1/models."""
    entry: dict[str, Any] = next((e for e in suite.model_entries if e.get("id") == suite.model_id), {})
    entry = entry or (suite.model_entries[0] if suite.model_entries else {})
    extra: dict[str, Any] = entry["extra"] if isinstance(entry.get("extra"), dict) else {}
    engine = entry.get("engine") or extra.get("engine") or entry.get("owned_by")
    engine_version = entry.get("engine_version") or extra.get("engine_version")
    quant = entry.get("quant") or extra.get("quant")
    if not quant:
        match = _QUANT_PATTERN.search(f"{suite.model_id or ''} {entry.get('path', '')}")
        quant = match.group(1).upper() if match else None
    return {
        "base_url": suite.config.base_url,
        "model": suite.model_id,
        "engine": engine,
        "engine_version": engine_version,
        "quant": quant,
        "models_entry": entry,
    }


def _workload_json(result: WorkloadResult) -> dict[str, Any]:
    data: dict[str, Any] = {
        "name": result.workload.name,
        "description": result.workload.description,
        "phases": [dataclasses.asdict(s) for s in result.summaries],
        "server_counters": result.counters,
    }
    if result.workload.name == "prefix":
        pairs = prefix_pairs(result.phases)
        data["prefix_pairs"] = [
            {
                "prompt_tokens": p.prompt_tokens,
                "cold_ttft": p.cold_ttft,
                "warm_ttft": p.warm_ttft,
                "ratio": p.ratio,
            }
            for p in pairs
        ]
        data["prefix_ttft_ratio_max"] = max((p.ratio for p in pairs), default=None)
    if result.workload.name == "json":
        valid, checked = json_validity([r for p in result.phases for r in p.results], JSON_SCHEMA["required"])
        data["json_valid"] = {"valid": valid, "checked": checked}
    if result.workload.name == "mixed":
        data["mixed"] = _mixed_json(result)
    counters = result.counters or {}
    prompt = counters.get(names.total(names.PROMPT_TOKENS))
    hit = counters.get(names.total(names.PREFIX_CACHE_HIT_TOKENS))
    if prompt and hit is not None:
        data["kv_cache_hit_rate"] = hit / prompt
    return data


def _mixed_json(result: WorkloadResult) -> dict[str, Any] | None:
    """The mixed workload's interference numbers; None when the long request got no token."""
    background, arriving = result.phases
    interference = prefill_interference(background.results, arriving.results[0]) if arriving.results else None
    return dataclasses.asdict(interference) if interference is not None else None


def build_report(suite: SuiteResult, *, flags: dict[str, Any], label: str = "") -> dict[str, Any]:
    """The JSON report of one run."""
    return {
        "label": label,
        "started_at": suite.started_at,
        "target": describe_target(suite),
        "flags": flags,
        "machine": machine_summary(),
        "software": software_versions(),
        "settings": dataclasses.asdict(suite.config.settings),
        "tokens_per_word": {"value": suite.tokens_per_word, "measured": suite.tokens_per_word_measured},
        "peak_memory": {"bytes": suite.peak_memory.peak_bytes, "source": suite.peak_memory.source},
        "metrics_endpoint": suite.metrics_available,
        "host_load": {
            **dataclasses.asdict(suite.host_load),
            "server_cores_busy": suite.host_load.server_cores_busy,
        },
        "workloads": [_workload_json(w) for w in suite.workloads],
    }


def _ms(value: float | None) -> str:
    return "-" if value is None else f"{value * 1000:.0f}"


def _num(value: float | None, digits: int = 1) -> str:
    return "-" if value is None else f"{value:.{digits}f}"


def _dist_ms(dist: dict[str, Any]) -> str:
    return " / ".join(_ms(dist[k]) for k in ("p50", "p95", "p99"))


def _header_lines(report: dict[str, Any]) -> list[str]:
    target, machine, software = report["target"], report["machine"], report["software"]
    gpus = f"GPUs: {', '.join(machine['gpus'])}" if machine.get("gpus") else "no GPU"
    cores = f"{machine['physical_cores']} cores / {machine['logical_cores']} threads"
    ram = format_bytes(machine["ram_bytes"])
    flags = " ".join(f"--{k.replace('_', '-')} {v}" for k, v in report["flags"].items() if v is not None)
    tokens_per_word = report["tokens_per_word"]
    peak = report["peak_memory"]
    return [
        f"# launcher bench{': ' + report['label'] if report['label'] else ''}",
        "",
        f"- started: {report['started_at']}",
        f"- target: {target['base_url']}",
        f"- model: `{target['model']}` (quant {target['quant'] or 'unknown'})",
        f"- engine: {target['engine'] or 'unknown'} {target['engine_version'] or ''}".rstrip(),
        f"- machine: {machine['cpu']}, {cores}, {ram} RAM, {machine['os']}, {gpus}",
        "- software: " + ", ".join(f"{k} {v}" for k, v in software.items() if v),
        f"- flags: {flags}",
        f"- tokens per filler word: {tokens_per_word['value']:.3f}"
        f" ({'measured via usage' if tokens_per_word['measured'] else 'assumed'})",
        f"- peak server memory: {format_bytes(peak['bytes'])} ({peak['source']})",
        f"- {_load_line(report['host_load'])}",
    ]


def _load_line(load: dict[str, Any]) -> str:
    start, end = load["load_average_start"], load["load_average_end"]
    text = f"host load average (1 min) {_num(start, 2)} at start, {_num(end, 2)} at end"
    if load["server_cores_busy"] is not None:
        text += (
            f"; the server used {load['server_cpu_seconds']:.1f} CPU s in {load['wall_seconds']:.1f} s"
            f" ({load['server_cores_busy']:.2f} cores busy on average)"
        )
    return text


def _phase_row(name: str, phase: dict[str, Any]) -> str:
    e2e = " / ".join(_num(phase["e2e"][k], 2) for k in ("p50", "p95", "p99"))
    cells = [
        name,
        phase["label"],
        str(phase["concurrency"]),
        f"{phase['requests'] - phase['errors']}/{phase['errors']}",
        _num(phase["prompt_tokens"]["mean"], 0),
        _num(phase["completion_tokens"]["mean"], 0),
        _dist_ms(phase["ttft"]),
        _dist_ms(phase["tpot"]),
        _dist_ms(phase["itl"]),
        e2e,
        _num(phase["decode_tps_per_stream"]["p50"]),
        _num(phase["prefill_tps"]["p50"], 0),
        _num(phase["aggregate_tps"]),
        _num(phase["requests_per_s"], 2),
    ]
    return "| " + " | ".join(cells) + " |"


def render_markdown(report: dict[str, Any]) -> str:
    """A human-readable Markdown rendering of `build_report`'s output."""
    lines = [
        *_header_lines(report),
        "",
        "TTFT, TPOT, ITL in ms and E2E in s as p50 / p95 / p99; tok/s per stream is the median of 1/TPOT.",
        "",
        "| workload | phase | conc | ok/err | prompt tok | out tok | TTFT ms | TPOT ms | ITL ms | E2E s "
        "| decode tok/s/stream | prefill tok/s | agg tok/s | req/s |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    notes: list[str] = []
    for workload in report["workloads"]:
        for phase in workload["phases"]:
            lines.append(_phase_row(workload["name"], phase))
            if not phase["usage_reported"] and phase["requests"] > phase["errors"]:
                notes.append(f"{workload['name']} {phase['label']}: no usage from the server, chunks counted")
            for error in phase["error_samples"]:
                notes.append(f"{workload['name']} {phase['label']} error: {error}")
        notes.extend(_workload_notes(workload))
    if notes:
        lines += ["", *[f"- {note}" for note in notes]]
    return "\n".join(lines) + "\n"


def _workload_notes(workload: dict[str, Any]) -> list[str]:
    notes: list[str] = []
    for i, pair in enumerate(workload.get("prefix_pairs", []), start=1):
        notes.append(
            f"prefix pair {i}: {pair['prompt_tokens']} prompt tokens, cold TTFT {_ms(pair['cold_ttft'])} ms, "
            f"warm TTFT {_ms(pair['warm_ttft'])} ms, warm/cold {pair['ratio']:.1%}"
        )
    if "mixed" in workload:
        notes.extend(_mixed_notes(workload["mixed"]))
    if "json_valid" in workload:
        valid = workload["json_valid"]
        notes.append(f"json: {valid['valid']}/{valid['checked']} outputs parse with every required key")
    if "kv_cache_hit_rate" in workload:
        notes.append(
            f"{workload['name']}: KV prefix-cache hit rate {workload['kv_cache_hit_rate']:.1%} of prompt tokens"
        )
    return notes


def _mixed_notes(mixed: dict[str, Any] | None) -> list[str]:
    if mixed is None:
        return ["mixed: the long prompt got no first token, so there is no window to measure"]
    if mixed["gaps_in_window"]:
        gaps = f"with gaps of max {_ms(mixed['gap_in_window_max'])} ms and p95 {_ms(mixed['gap_in_window_p95'])} ms"
    else:
        gaps = "and none of their gaps fell in that window"
    notes = [
        f"mixed: the long prompt ({mixed['long_prompt_tokens'] or '?'} tokens) took {_ms(mixed['long_ttft'])} ms"
        f" to its first token; meanwhile the {mixed['background_streams']} background streams got"
        f" {mixed['tokens_in_window']} tokens, {gaps} (ITL p50 outside that window:"
        f" {_ms(mixed['itl_outside_window_p50'])} ms)"
    ]
    if mixed["streams_through_window"] < mixed["background_streams"]:
        notes.append(
            f"mixed: only {mixed['streams_through_window']} of {mixed['background_streams']} background streams"
            " were still generating when the long prompt's first token came; raise --max-tokens"
        )
    return notes
