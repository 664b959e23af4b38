"""The Server page's gauge for the prompt cache on disk, fed by the server's own /metrics text."""

from __future__ import annotations

import functools

from launcher.engines.base import EngineStats
from launcher.server.metrics import ServerMetrics
from launcher.ui.metrics import LiveSample, ProcessMemory, parse_metrics
from launcher.ui.panels.gauges import GaugesPanel

GIB = 1024**3


def _same(stats: EngineStats) -> EngineStats:
    return stats


def _scrape(**models: EngineStats) -> LiveSample:
    """What the gauges get from a server with these models loaded."""
    server = ServerMetrics()
    for name, stats in models.items():
        server.for_model(name, functools.partial(_same, stats))
    return LiveSample.between(None, parse_metrics(server.render().decode(), 1.0), ProcessMemory())


def _with_cache(hits: int, misses: int, size: int) -> EngineStats:
    return EngineStats(
        prompt_cache_disk_hits=hits,
        prompt_cache_disk_misses=misses,
        prompt_cache_disk_bytes=size,
        prompt_cache_disk_entries=2,
        prompt_cache_disk_budget_bytes=20 * GIB,
    )


def test_the_gauges_show_the_prompt_cache_on_disk_size_and_hit_rate(qtbot) -> None:  # type: ignore[no-untyped-def]
    panel = GaugesPanel()
    qtbot.addWidget(panel)
    # Two models share one folder: their bytes and lookups add up, the folder's budget counts once.
    panel.update_sample(_scrape(coder=_with_cache(2, 1, 2 * GIB), small=_with_cache(1, 0, GIB)))
    assert panel.prompt_cache.value() == "3.0 GiB / 20.0 GiB"
    assert panel.prompt_cache.caption_label.text() == "prompt cache on disk · hit rate 75% (3 of 4)"
    panel.reset()
    assert panel.prompt_cache.value() == "–"


def test_the_gauge_says_no_lookups_yet_then_off_without_a_budget(qtbot) -> None:  # type: ignore[no-untyped-def]
    panel = GaugesPanel()
    qtbot.addWidget(panel)
    panel.update_sample(_scrape(coder=_with_cache(0, 0, 0)))
    assert panel.prompt_cache.value() == "0 B / 20.0 GiB"
    assert panel.prompt_cache.caption_label.text().endswith("no lookups yet")
    panel.update_sample(_scrape(coder=EngineStats()))  # --prompt-cache-gb 0, or an engine without one
    assert panel.prompt_cache.value() == "off"
    assert panel.prompt_cache.caption_label.text() == "prompt cache on disk"
    panel.update_sample(LiveSample.between(None, parse_metrics("", 2.0), ProcessMemory()))  # an older server
    assert panel.prompt_cache.value() == "off"
