"""The Server page's tile for speculative decoding, fed by the server's own /metrics text."""

from __future__ import annotations

import functools

from launcher.engines.base import EngineStats
from launcher.server.metrics import ServerMetrics
from launcher.ui.metrics import LiveSample, ProcessMemory, parse_metrics
from launcher.ui.panels.gauges import GaugesPanel


def _same(stats: EngineStats) -> EngineStats:
    return stats


def _scrape(**models: EngineStats) -> LiveSample:
    """What the gauges get from a server with these models loaded."""
    server = ServerMetrics()
    for name, stats in models.items():
        server.for_model(name, functools.partial(_same, stats))
    return LiveSample.between(None, parse_metrics(server.render().decode(), 1.0), ProcessMemory())


def _drafted(drafted: int, accepted: int) -> EngineStats:
    return EngineStats(speculative_draft_tokens_total=drafted, speculative_accepted_tokens_total=accepted)


def test_the_tile_shows_the_acceptance_rate_and_the_draft_tokens(qtbot) -> None:  # type: ignore[no-untyped-def]
    panel = GaugesPanel()
    qtbot.addWidget(panel)
    panel.set_speculative_mode("auto")
    # Two models drafting: their tokens add up
    panel.update_sample(_scrape(coder=_drafted(1_500, 1_200), small=_drafted(500, 100)))
    assert panel.speculation.value() == "65% accepted"
    assert panel.speculation.caption_label.text() == "speculative decoding · 1,300 of 2,000 draft tokens"
    assert "accepted" in panel.speculation.toolTip()
    panel.reset()
    assert panel.speculation.value() == "–"


def test_the_tile_says_idle_before_any_draft_and_off_when_the_server_does_not_speculate(qtbot) -> None:  # type: ignore[no-untyped-def]
    panel = GaugesPanel()
    qtbot.addWidget(panel)
    panel.update_sample(_scrape(coder=EngineStats()))  # auto: nothing drafted yet (or an engine without it)
    assert panel.speculation.value() == "idle"
    assert panel.speculation.caption_label.text() == "speculative decoding · nothing drafted yet"
    panel.set_speculative_mode("off")  # the app started the server with --speculative off
    assert panel.speculation.value() == "off"
    assert panel.speculation.caption_label.text() == "speculative decoding"
    panel.update_sample(LiveSample.between(None, parse_metrics("", 2.0), ProcessMemory()))  # an older server
    assert panel.speculation.value() == "off"
    # a request that asked for drafts on a server started with off: what was drafted is shown
    panel.update_sample(_scrape(coder=_drafted(40, 30)))
    assert panel.speculation.value() == "75% accepted"
    assert panel.speculation.caption_label.text().endswith("30 of 40 draft tokens")
