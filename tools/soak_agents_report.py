"""The figures and the verdict of `scripts/soak agents` (tools/soak_agents.py runs the soak).

"Nothing grows without bound" is judged on the main server: the last window's samples (RSS, open
fds, threads) against the first window's after the warm-up, each window `--window` seconds (or a
third of what is left after the warm-up, on a short run). RSS is compared peak to peak, because it
rises and falls as models load and unload; fds and threads by their peaks too.
"""

from __future__ import annotations

import re
from collections import defaultdict
from pathlib import Path
from typing import Any, Protocol

RSS_GROWTH_LIMIT_MB = 100.0
RSS_GROWTH_LIMIT_SHARE = 0.2  # or this share of the first window's peak, whichever is larger
FD_GROWTH_LIMIT = 16
THREAD_GROWTH_LIMIT = 8


class ObservedLike(Protocol):
    """What the soak recorded (scripts/soak_agents.Observed)."""

    samples: list[dict[str, Any]]
    agent_runs: list[dict[str, Any]]
    http_calls: list[dict[str, Any]]
    server_requests: list[dict[str, Any]]


def percentile(values: list[float], share: float) -> float:
    """The `share` quantile of `values` (nearest rank); 0 when empty."""
    if not values:
        return 0.0
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(share * len(ordered)))]


def latency_row(seconds: list[float], statuses: list[Any]) -> dict[str, Any]:
    """n, p50, p99, max and the status counts of one group."""
    counts: dict[str, int] = defaultdict(int)
    for status in statuses:
        counts[str(status)] += 1
    return {
        "n": len(statuses),
        "p50_s": round(percentile(seconds, 0.5), 2),
        "p99_s": round(percentile(seconds, 0.99), 2),
        "max_s": round(max(seconds, default=0.0), 2),
        "statuses": dict(sorted(counts.items())),
    }


def windows(samples: list[dict[str, Any]], window: float, warm_up: float) -> tuple[list[Any], list[Any]]:
    """The main server's samples in the first window after the warm-up and in the last window."""
    alive = [s for s in samples if s.get("main")]
    if not alive:
        return [], []
    end = alive[-1]["t"]
    span = min(window, max(0.0, end - warm_up) / 3)
    first = [s["main"] for s in alive if warm_up <= s["t"] < warm_up + span]
    last = [s["main"] for s in alive if s["t"] > end - span]
    return first, last


def growth(samples: list[dict[str, Any]], window: float, warm_up: float) -> dict[str, Any]:
    """First- and last-window peaks of RSS (MB), fds and threads, and which grew past their limits."""
    first, last = windows(samples, window, warm_up)
    if not first or not last:
        return {"judged": False, "grew": []}
    result: dict[str, Any] = {"judged": True, "first_window_samples": len(first), "last_window_samples": len(last)}
    grew = []
    for key, limit_of in (
        ("rss_kb", lambda peak: max(RSS_GROWTH_LIMIT_MB * 1024, peak * RSS_GROWTH_LIMIT_SHARE)),
        ("fds", lambda _: FD_GROWTH_LIMIT),
        ("threads", lambda _: THREAD_GROWTH_LIMIT),
    ):
        before, after = max(s[key] for s in first), max(s[key] for s in last)
        scale = 1024 if key == "rss_kb" else 1
        name = "rss_mb" if key == "rss_kb" else key
        result[name] = {"first_peak": round(before / scale, 1), "last_peak": round(after / scale, 1)}
        if after - before > limit_of(before):
            grew.append(f"{name} {before / scale:.0f} -> {after / scale:.0f} (limit +{limit_of(before) / scale:.0f})")
    result["grew"] = grew
    return result


def series(samples: list[dict[str, Any]], server: str) -> dict[str, Any]:
    """Min, max and last of each figure of one server over the whole run."""
    alive = [s[server] for s in samples if s.get(server)]
    if not alive:
        return {}
    out: dict[str, Any] = {}
    for key in ("rss_kb", "fds", "threads"):
        values = [s[key] for s in alive]
        scale = 1024 if key == "rss_kb" else 1
        out["rss_mb" if key == "rss_kb" else key] = {
            "min": round(min(values) / scale, 1), "max": round(max(values) / scale, 1),
            "last": round(values[-1] / scale, 1),
        }  # fmt: skip
    return out


def log_events(path: str) -> dict[str, int]:
    """Tracebacks, ERROR/WARNING lines and swaps given up after --swap-wait in a server log (loads are
    logged at INFO, below the servers' level: the pool's own counts, `model_loads`, say those)."""
    log = Path(path)
    if not log.exists():
        return {}
    text = log.read_text(errors="replace")
    lines = text.splitlines()
    return {
        "tracebacks": text.count("Traceback (most recent call last)"),
        "error_lines": sum(1 for line in lines if re.search(r"\bERROR\b", line)),
        "warning_lines": sum(1 for line in lines if re.search(r"\bWARNING\b", line)),
        "swap_waits_given_up": sum(1 for line in lines if "gave up loading" in line),
    }


def swap_busy(call: dict[str, Any]) -> bool:
    """A request that waited --swap-wait for a busy model and was told to retry: expected with
    --max-models 1 while an agent's long prompt holds the other model (a 503, or in a stream an error
    event after the 200), so reported, not judged."""
    return call["status"] != 200 and "--swap-wait" in str(call.get("body", ""))


def build_report(observed: ObservedLike, meta: dict[str, Any], *, window: float, warm_up: float) -> dict[str, Any]:
    """The JSON report, its `problems` empty when the soak passed."""
    by_agent: dict[str, list[dict[str, Any]]] = defaultdict(list)
    for run in observed.agent_runs:
        by_agent[f"{run['agent']} @ {run['model']}"].append(run)
        by_agent[run["agent"]].append(run)
    agents = {
        name: latency_row([r["seconds"] for r in runs], [f"exit {r['exit']}" for r in runs])
        for name, runs in sorted(by_agent.items())
    }
    by_http: dict[str, list[dict[str, Any]]] = defaultdict(list)
    for call in observed.http_calls:
        by_http[f"{call['kind']} @ {call['model']}"].append(call)
    http = {k: latency_row([c["seconds"] for c in v], [c["status"] for c in v]) for k, v in sorted(by_http.items())}
    by_route: dict[str, list[dict[str, Any]]] = defaultdict(list)
    for entry in observed.server_requests:
        by_route[f"{entry['client'] or '?'} {entry['path']}"].append(entry)
    server = {
        k: latency_row([e["seconds"] for e in v if e["seconds"] is not None], [e["status"] for e in v])
        for k, v in sorted(by_route.items())
    }
    report: dict[str, Any] = {
        **meta,
        "agent_runs": agents,
        "sdk_requests": http,
        "server_requests": server,
        "non_200": {
            "server_log": [e["line"] for e in observed.server_requests if e["status"] != 200],
            "sdk": [c for c in observed.http_calls if c["status"] != 200 and not swap_busy(c)],
            "sdk_swap_busy": [c for c in observed.http_calls if swap_busy(c)],
        },
        "failed_agent_runs": [r for r in observed.agent_runs if r["exit"] != 0],
        "growth": growth(observed.samples, window, warm_up),
        "main_server": series(observed.samples, "main"),
        "remote_server": series(observed.samples, "remote"),
        "samples": len(observed.samples),
        "main_log_events": log_events(meta["main_log"]),
        "remote_log_events": log_events(meta["remote_log"]),
    }
    report["problems"] = verdict(report, observed)
    return report


def verdict(report: dict[str, Any], observed: ObservedLike) -> list[str]:
    """Why the soak failed (empty: it passed)."""
    problems = []
    if not observed.agent_runs:
        problems.append("no agent run finished")
    for run in report["failed_agent_runs"]:
        problems.append(f"{run['agent']} @ {run['model']} ({run['task']}) exited {run['exit']} at +{run['t']:.0f} s")
    for line in report["non_200"]["server_log"]:
        problems.append(f"server answered non-200: {line}")
    for call in report["non_200"]["sdk"]:
        problems.append(f"{call['kind']} @ {call['model']} got {call['status']}: {call.get('body', '')[:300]}")
    if not report["growth"]["judged"]:
        problems.append("too few samples to judge growth (run longer than the warm-up)")
    problems += [f"grew: {what}" for what in report["growth"]["grew"]]
    if report["main_log_events"].get("tracebacks"):
        problems.append(f"{report['main_log_events']['tracebacks']} tracebacks in {report['main_log']}")
    samples = [s for s in observed.samples if s.get("main") is None]
    if samples:
        problems.append(f"the main server was gone at +{samples[0]['t']:.0f} s")
    return problems


def print_table(report: dict[str, Any]) -> None:
    """The human summary."""

    def rows(title: str, table: dict[str, Any]) -> None:
        print(f"\n{title:<58}{'n':>5}  {'p50 s':>7}{'p99 s':>7}{'max s':>7}  outcomes")
        for name, row in table.items():
            outcomes = " ".join(f"{k}:{v}" for k, v in row["statuses"].items())
            figures = f"{row['p50_s']:>7.2f}{row['p99_s']:>7.2f}{row['max_s']:>7.2f}"
            print(f"{name[:58]:<58}{row['n']:>5}  {figures}  {outcomes}")

    rows("agent run (wall time)", report["agent_runs"])
    rows("SDK request", report["sdk_requests"])
    rows("main server request log (client, path)", report["server_requests"])
    for server in ("main_server", "remote_server"):
        figures = report[server]
        ranges = "; ".join(f"{k} {v['min']}..{v['max']} (last {v['last']})" for k, v in figures.items())
        print(f"\n{server.replace('_', ' ')}: {ranges}")
    grown = report["growth"]
    if grown["judged"]:
        peaks = "; ".join(
            f"{k} {grown[k]['first_peak']} -> {grown[k]['last_peak']}" for k in ("rss_mb", "fds", "threads")
        )
        print(f"first vs last window peaks: {peaks}")
    print(f"SDK requests told to retry after --swap-wait (not judged): {len(report['non_200']['sdk_swap_busy'])}")
    print(f"main log: {report['main_log_events']}\nremote log: {report['remote_log_events']}")
    print(f"model loads (main server): {report.get('model_loads', {})}")
    print("\n" + ("PASS" if not report["problems"] else "FAIL:\n  " + "\n  ".join(report["problems"][:40])))
