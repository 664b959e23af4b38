"""Every upstream byte is bounded, and nothing waits on a remote it does not need.

A real `launcher serve` (its upstream timeouts shortened so each case ends in seconds) serves the
modes of tests/server/hostile_upstream.py, each registered as a remote of its own, and the default
model is `ok/m`, a well-behaved remote's. While each hostile case runs, a thread polls /health: it
must answer within 100 ms (nothing a remote sends may stall the event loop), and the server's
memory must grow by less than 100 MB.
"""

from __future__ import annotations

import json
import os
import statistics
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
import pytest

from launcher.cli import main as launcher_main
from tests.conformance.servers import REPO_ROOT, RunningServer, launch_serve, start_port_printer

MODES = ("ok", "bomb", "bomberr", "hugeerr", "drip", "hang", "endless", "metrics", "garbage", "wrongshape")
TIMEOUTS = {  # upstream.py's limits, shortened for the tests
    "HEADERS_TIMEOUT_S": 3.0,
    "READ_TIMEOUT_S": 3.0,
    "LIST_TIMEOUT_S": 2.0,
    "SMALL_CALL_DEADLINE_S": 2.0,
}
PATCH = "; ".join(
    [
        "import sys",
        "import launcher.server.upstreams.upstream as u",
        "import launcher.server.upstreams.remote_metrics as m",
        "import launcher.server.upstreams.remotes as r",
        *(f"u.{name} = {value}" for name, value in TIMEOUTS.items()),
        "m.SCRAPE_TIMEOUT_S = 2.0",
        "m.RETRY_AFTER_FAILURE_S = 2.0",
        "r.LIST_EVERY_S = 5.0",
        "from launcher.cli import main",
        "sys.exit(main(sys.argv[1:]))",
    ]
)
READY_WITHIN_S = 30.0  # the usual start of a server without a local model is a few seconds
HEALTH_LIMIT_S = 0.100
RSS_LIMIT = 100 * 1024 * 1024


def _rss(pid: int) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) * 1024
    raise AssertionError("no VmRSS")


@dataclass
class Watch:
    """/health latencies and the server's memory, sampled on a thread while a case runs."""

    url: str
    pid: int
    health_s: list[float] = field(default_factory=list)
    failures: list[str] = field(default_factory=list)
    rss_start: int = 0
    rss_peak: int = 0
    _stop: threading.Event = field(default_factory=threading.Event)

    def run(self) -> None:
        with httpx.Client(timeout=10) as client:
            while not self._stop.is_set():
                started = time.perf_counter()
                try:
                    status = client.get(self.url + "/health").status_code
                    if status != 200:
                        self.failures.append(f"/health {status}")
                except httpx.HTTPError as err:
                    self.failures.append(repr(err))
                self.health_s.append(time.perf_counter() - started)
                self.rss_peak = max(self.rss_peak, _rss(self.pid))
                time.sleep(0.02)

    @property
    def growth(self) -> int:
        return self.rss_peak - self.rss_start

    def summary(self) -> str:
        ordered = sorted(self.health_s)
        p95 = ordered[int(len(ordered) * 0.95) - 1] if ordered else 0.0
        median = statistics.median(ordered)
        return (
            f"rss +{self.growth / 1e6:.1f} MB; /health n={len(ordered)} median={median * 1000:.1f} ms "
            f"p95={p95 * 1000:.1f} ms max={max(ordered) * 1000:.1f} ms"
        )


@dataclass
class Hostile:
    """The hostile upstream, the local server that serves its modes, and where its log goes."""

    local: RunningServer
    upstream_url: str
    home: Path
    measured: dict[str, str] = field(default_factory=dict)

    def watched(self, case: str, work: Callable[[], Any], rss_start: int | None = None) -> Any:
        """Run `work` while /health and memory are watched; assert both stayed within bounds (the memory
        from `rss_start`, default now)."""
        start = rss_start if rss_start is not None else _rss(self.local.process.pid)
        watch = Watch(self.local.url, self.local.process.pid, rss_start=start)
        thread = threading.Thread(target=watch.run, daemon=True)
        thread.start()
        try:
            result = work()
            time.sleep(0.3)  # what the server does right after the answers counts too
        finally:
            watch._stop.set()
            thread.join(timeout=30)
        summary = watch.summary()
        self.measured[case] = summary
        print(f"{case}: {summary}", file=sys.stderr)
        ordered = sorted(watch.health_s)
        assert not watch.failures, watch.failures[:3]
        assert len(ordered) >= 5, summary
        assert ordered[int(len(ordered) * 0.95) - 1] < HEALTH_LIMIT_S, summary
        assert watch.growth < RSS_LIMIT, summary
        return result


def _serve(home: Path, *args: str) -> tuple[RunningServer, float]:
    """`launcher serve ARGS` with the short upstream timeouts, and how long it took to be ready."""
    started = time.monotonic()
    server = launch_serve(["--port", "0", "--no-library", *args], home, entry=("-c", PATCH))
    return server, time.monotonic() - started


@pytest.fixture(scope="module")
def hostile(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Hostile]:
    home = tmp_path_factory.mktemp("hostile") / "home"
    home.mkdir()
    upstream, url = start_port_printer("tests.server.hostile_upstream")
    local: RunningServer | None = None
    try:
        with pytest.MonkeyPatch.context() as patch:
            patch.setenv("LAUNCHER_HOME", str(home))
            for mode in MODES:
                assert launcher_main(["remote", "add", mode, f"{url}/{mode}/v1", "--no-check"]) == 0
        # drip, hang and bomb never list their models: aliases make their `NAME/m` served all the same
        aliases = [arg for mode in ("drip", "hang", "bomb") for arg in ("--alias", f"{mode}-alias={mode}/m")]
        local, ready_s = _serve(home, "ok/m", *aliases)
        assert ready_s < READY_WITHIN_S, f"ready after {ready_s:.1f} s with a dripping, a hanging and a bombing remote"
        hostile = Hostile(local, url, home)
        yield hostile
        for case, summary in hostile.measured.items():
            print(f"measured {case}: {summary}", file=sys.stderr)
    finally:
        if local is not None:
            local.stop()
        upstream.kill()
        upstream.wait(timeout=10)
        if upstream.stdout is not None:
            upstream.stdout.close()


def _chat(server: RunningServer, model: str, *, stream: bool, timeout: float = 60, **extra: Any) -> httpx.Response:
    body = {"model": model, "messages": [{"role": "user", "content": "hi"}], "stream": stream, **extra}
    with httpx.Client(timeout=timeout) as client:
        return client.post(server.base_url + "/chat/completions", json=body)


def _stream_events(server: RunningServer, model: str, timeout: float = 60, **extra: Any) -> list[dict[str, Any]]:
    """The data events of a streamed chat (a non-200 answer as one {"status", "body"} item)."""
    body = {"model": model, "messages": [{"role": "user", "content": "hi"}], "stream": True, **extra}
    events: list[dict[str, Any]] = []
    with (
        httpx.Client(timeout=timeout) as client,
        client.stream("POST", server.base_url + "/chat/completions", json=body) as reply,
    ):
        if reply.status_code != 200:
            return [{"status": reply.status_code, "body": json.loads(reply.read())}]
        for line in reply.iter_lines():
            if line.startswith("data: ") and line != "data: [DONE]":
                events.append(json.loads(line[6:]))
    return events


def _error_message(events: list[dict[str, Any]]) -> str:
    errors = [e["error"]["message"] for e in events if "error" in e]
    assert errors, events[-3:]
    return str(errors[-1])


# -- the cases --------------------------------------------------------------------------------------


def test_the_server_is_ready_and_lists_the_remotes_that_answered(hostile: Hostile) -> None:
    deadline = time.monotonic() + 30
    while True:  # the lists come in the background
        listed = httpx.get(hostile.local.base_url + "/models", timeout=10).json()["data"]
        ids = {card["id"]: card for card in listed}
        if "endless/m" in ids or time.monotonic() > deadline:
            break
        time.sleep(0.2)
    assert ids["ok/m"]["loaded"] is True and ids["endless/m"]["loaded"] is True
    for silent in ("drip/m", "hang/m", "bomb/m"):  # named by an alias, never listed: not ready
        assert ids[silent]["loaded"] is False


def test_a_gzip_bomb_chat_answer_ends_in_an_error_not_in_gigabytes(hostile: Hostile) -> None:
    def three_at_once() -> list[list[dict[str, Any]]]:
        with ThreadPoolExecutor(3) as pool:
            return list(pool.map(lambda _: _stream_events(hostile.local, "bomb/m"), range(3)))

    started = time.monotonic()
    replies = hostile.watched("gzip bomb (3 streams)", three_at_once)
    assert time.monotonic() - started < 30
    for events in replies:
        assert "longer than" in _error_message(events)
    # not streamed, the same bomb failing mid-reply is the remote's failure: a 502, like one before any output
    plain = _chat(hostile.local, "bomb/m", stream=False)
    assert plain.status_code == 502 and "longer than" in plain.json()["error"]["message"], plain.text[:300]


def test_a_gzip_bomb_or_a_50_mb_error_body_is_a_short_502(hostile: Hostile) -> None:
    def both() -> list[httpx.Response]:
        return [_chat(hostile.local, "bomberr/m", stream=False), _chat(hostile.local, "hugeerr/m", stream=False)]

    for reply in hostile.watched("bomb and 50 MB error bodies", both):
        assert reply.status_code == 502, reply.text[:300]
        assert len(reply.content) < 4096
        assert reply.json()["error"]["message"].startswith("The remote ")


def test_a_remote_that_never_answers_is_a_504_within_the_timeout(hostile: Hostile) -> None:
    def both() -> tuple[httpx.Response, list[dict[str, Any]], float]:
        started = time.monotonic()
        plain = _chat(hostile.local, "hang/m", stream=False)
        streamed = _stream_events(hostile.local, "hang/m")
        return plain, streamed, time.monotonic() - started

    plain, streamed, took = hostile.watched("hang", both)
    assert plain.status_code == 504 and "did not start answering within 3 s" in plain.json()["error"]["message"]
    assert streamed[0]["status"] == 504
    assert took < 2 * TIMEOUTS["HEADERS_TIMEOUT_S"] + 10


def test_a_remote_that_drips_ends_the_reply_with_an_error(hostile: Hostile) -> None:
    started = time.monotonic()
    events = hostile.watched("drip (chat)", lambda: _stream_events(hostile.local, "drip/m"))
    assert "sent nothing for 3 s" in _error_message(events)
    assert time.monotonic() - started < TIMEOUTS["READ_TIMEOUT_S"] + 10


def test_max_tokens_is_kept_here_when_the_remote_does_not_stop(hostile: Hostile) -> None:
    started = time.monotonic()
    events = hostile.watched(
        "endless with max_tokens 5", lambda: _stream_events(hostile.local, "endless/m", max_tokens=5)
    )
    content = [e for e in events if e.get("choices") and e["choices"][0]["delta"].get("content")]
    assert len(content) == 5
    assert [e["choices"][0]["finish_reason"] for e in events if e.get("choices")][-1] == "length"
    assert time.monotonic() - started < 20


def test_clients_that_read_nothing_make_the_server_stop_reading_the_remote(hostile: Hostile) -> None:
    body = {"model": "endless/m", "messages": [{"role": "user", "content": "hi"}], "stream": True}

    before = _rss(hostile.local.process.pid)
    with httpx.Client(timeout=60, limits=httpx.Limits(max_connections=16)) as client:
        streams = [client.stream("POST", hostile.local.base_url + "/chat/completions", json=body) for _ in range(8)]
        replies = [stream.__enter__() for stream in streams]
        try:
            assert all(reply.status_code == 200 for reply in replies)
            # Until the sockets' buffers (megabytes each, on loopback) are full the server relays as fast as
            # it can, as it would for 8 fast readers; then it must wait, its memory no bigger.
            time.sleep(10)
            hostile.watched("8 clients reading nothing from an endless stream", lambda: time.sleep(4), before)
        finally:
            for stream in streams:
                stream.__exit__(None, None, None)


def test_metrics_never_wait_for_a_remote_and_relay_few_series(hostile: Hostile) -> None:
    def scrape_for_a_while() -> list[tuple[float, str]]:
        scrapes = []
        with httpx.Client(timeout=30) as client:
            for _ in range(12):
                started = time.perf_counter()
                text = client.get(hostile.local.url + "/metrics").text
                scrapes.append((time.perf_counter() - started, text))
                time.sleep(0.5)
        return scrapes

    scrapes = hostile.watched("huge, high-cardinality and dripping /metrics", scrape_for_a_while)
    for took, text in scrapes:
        assert took < 1.0, f"/metrics took {took:.2f} s"
        assert sum(1 for line in text.splitlines() if 'model="metrics/' in line) <= 10
        assert len(text) < 2 * 1024 * 1024


def test_a_malformed_answer_is_a_502_saying_so(hostile: Hostile) -> None:
    for model, said in (("garbage/m", "not JSON"), ("wrongshape/m", "not a chat completion")):
        for stream in (False, True):
            reply = _chat(hostile.local, model, stream=stream)
            assert reply.status_code == 502, reply.text[:300]
            assert said in reply.json()["error"]["message"]


def test_a_typo_under_a_remotes_prefix_is_a_404_naming_its_models(hostile: Hostile) -> None:
    reply = _chat(hostile.local, "ok/typo", stream=False)
    assert reply.status_code == 404, reply.text[:300]
    error = reply.json()["error"]
    assert error["code"] == "model_not_found" and "ok/m" in error["message"]

    anthropic = httpx.post(
        hostile.local.url + "/v1/messages",
        json={"model": "ok/typo", "max_tokens": 5, "messages": [{"role": "user", "content": "hi"}]},
        timeout=30,
    )
    assert anthropic.status_code == 404
    assert anthropic.json()["type"] == "error" and "ok/m" in anthropic.json()["error"]["message"]

    silent = _chat(hostile.local, "hang/typo", stream=False)  # a remote that never listed its models
    assert silent.status_code == 404 and "has not listed its models yet" in silent.json()["error"]["message"]


def test_remote_list_says_in_one_line_which_remote_does_not_answer(hostile: Hostile) -> None:
    env = {**os.environ, "LAUNCHER_HOME": str(hostile.home), "PYTHONPATH": str(REPO_ROOT)}
    started = time.monotonic()
    listing = subprocess.run(
        [sys.executable, "-m", "launcher", "remote", "list"], capture_output=True, text=True, env=env, timeout=120
    )
    assert listing.returncode == 0, listing.stderr
    assert time.monotonic() - started < 90
    lines = {line.split()[0]: line for line in listing.stdout.splitlines() if not line.startswith(" ")}
    assert "did not answer /v1/models within 5 s" in lines["drip"]
    assert "did not answer /v1/models within 5 s" in lines["hang"]
    assert "NOT reachable" in lines["bomb"] and lines["ok"].endswith("; reachable)")


def test_remote_list_asks_every_remote_at_once(hostile: Hostile, tmp_path: Path) -> None:
    home = tmp_path / "home"
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("LAUNCHER_HOME", str(home))
        hanging = f"{hostile.upstream_url}/hang/v1"
        for number in range(6):
            assert launcher_main(["remote", "add", f"hang{number}", hanging, "--no-check"]) == 0
    env = {**os.environ, "LAUNCHER_HOME": str(home), "PYTHONPATH": str(REPO_ROOT)}
    started = time.monotonic()
    listing = subprocess.run(
        [sys.executable, "-m", "launcher", "remote", "list"], capture_output=True, text=True, env=env, timeout=120
    )
    took = time.monotonic() - started
    assert listing.returncode == 0 and listing.stdout.count("did not answer /v1/models within 5 s") == 6, listing
    assert took < 20, f"{took:.1f} s"  # one after another, six hanging remotes took 30 s and more


def test_a_request_waiting_on_a_remote_gets_a_503_when_the_server_stops(hostile: Hostile, tmp_path: Path) -> None:
    server, _ = _serve(hostile.home, "--alias", "hang-alias=hang/m")  # hang never lists its models
    try:
        with ThreadPoolExecutor(1) as pool:
            waiting = pool.submit(_chat, server, "hang/m", stream=False)
            time.sleep(1.0)
            server.process.terminate()
            reply = waiting.result(timeout=30)
        assert reply.status_code == 503, reply.text[:300]
        assert reply.headers["retry-after"] and reply.json()["error"]["message"] == "The server is shutting down."
    finally:
        server.stop()
