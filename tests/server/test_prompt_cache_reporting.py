"""What the server says about the prompt cache on disk: its /metrics series and the request log line.

The scripted model stands in for an engine whose prompt was put back from disk (the engine side is
tested in tests/engines/llamacpp/test_prompt_cache.py); everything above the seam is the real server.
"""

from __future__ import annotations

import logging
import time
from collections.abc import AsyncIterator
from dataclasses import dataclass

import httpx
import pytest

from launcher.engines.base import EngineStats, GenerationEvent, GenerationRequest
from tests.metrics_text import metric_total
from tests.server.conftest import ServeFn
from tests.server.fake_model import FakeModel

DISK_STATS = EngineStats(
    kv_cache_total_tokens=1024,
    prompt_cache_disk_hits=3,
    prompt_cache_disk_misses=1,
    prompt_cache_disk_restored_tokens=36_000,
    prompt_cache_disk_restore_seconds=0.75,
    prompt_cache_disk_writes=5,
    prompt_cache_disk_write_failures=1,
    prompt_cache_disk_entries=4,
    prompt_cache_disk_bytes=3 << 30,
    prompt_cache_disk_budget_bytes=20 << 30,
)


@dataclass
class RestoringModel(FakeModel):
    """Says that all but the last `uncached` prompt tokens were cached, `disk` of them restored from disk."""

    uncached: int = 5
    disk: int = 0

    async def _run(self, request: GenerationRequest) -> AsyncIterator[GenerationEvent]:
        cached = max(len(request.prompt_tokens) - self.uncached, 0)
        yield GenerationEvent(
            token_ids=(ord("o"),), text="o", cached_prompt_tokens=cached, disk_prompt_tokens=min(self.disk, cached)
        )
        yield GenerationEvent(
            finish_reason="stop",
            prompt_tokens=len(request.prompt_tokens),
            cached_prompt_tokens=cached,
            disk_prompt_tokens=min(self.disk, cached),
            completion_tokens=1,
        )

    def stats(self) -> EngineStats:
        """The numbers a model with a prompt cache on disk reports."""
        return DISK_STATS


def test_metrics_export_the_prompt_cache_on_disk_per_model(serve: ServeFn) -> None:
    with serve(RestoringModel()) as url:
        text = httpx.get(f"{url}/metrics").text
    expected = {
        "launcher_prompt_cache_disk_hits_total": 3,
        "launcher_prompt_cache_disk_misses_total": 1,
        "launcher_prompt_cache_disk_restored_tokens_total": 36_000,
        "launcher_prompt_cache_disk_restore_seconds_total": 0.75,
        "launcher_prompt_cache_disk_writes_total": 5,
        "launcher_prompt_cache_disk_write_failures_total": 1,
        "launcher_prompt_cache_disk_entries": 4,
        "launcher_prompt_cache_disk_bytes": 3 << 30,
        "launcher_prompt_cache_disk_budget_bytes": 20 << 30,
    }
    for name, value in expected.items():
        assert metric_total(text, name, model="fake-model") == value, name
    assert "# HELP launcher_prompt_cache_disk_hits_total prompts that missed in memory" in text


def test_metrics_say_zero_for_a_model_without_the_prompt_cache_on_disk(serve: ServeFn, fake_model: FakeModel) -> None:
    with serve(fake_model) as url:
        text = httpx.get(f"{url}/metrics").text
    assert metric_total(text, "launcher_prompt_cache_disk_budget_bytes", model="fake-model") == 0
    assert metric_total(text, "launcher_prompt_cache_disk_hits_total", model="fake-model") == 0


def _log_lines(caplog: pytest.LogCaptureFixture, count: int) -> list[str]:
    deadline = time.monotonic() + 10
    while True:
        lines = [r.getMessage() for r in caplog.records if r.name == "launcher.requests"]
        if len(lines) >= count or time.monotonic() > deadline:
            return lines
        time.sleep(0.02)


def test_the_request_log_says_how_many_cached_tokens_came_from_disk(
    serve: ServeFn, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger="launcher.requests")
    body = {"model": "x", "messages": [{"role": "user", "content": "y" * 3000}]}
    with serve(RestoringModel(disk=2_500)) as url:
        assert httpx.post(f"{url}/v1/chat/completions", json=body, timeout=30).status_code == 200
    (line,) = _log_lines(caplog, 1)
    prompt = int(line.split("prompt=")[1].split()[0].replace(",", ""))
    assert f"cached={prompt - 5:,} (disk 2,500) generated=1 " in line, line


def test_the_request_log_keeps_its_format_when_nothing_came_from_disk(
    serve: ServeFn, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger="launcher.requests")
    body = {"model": "x", "messages": [{"role": "user", "content": "y" * 3000}]}
    with serve(RestoringModel(disk=0)) as url:
        assert httpx.post(f"{url}/v1/chat/completions", json=body, timeout=30).status_code == 200
    (line,) = _log_lines(caplog, 1)
    assert "disk" not in line and " generated=1 " in line, line
