"""The Qt binding must not leak or drop references on ordinary calls: the gauges make dozens of calls a
second, so a binding that drops a reference to None each time (PySide6 6.12.0 on Python 3.11) aborts
the app after a few minutes of serving."""

from __future__ import annotations

import sys

from launcher.ui.widgets.card import StatTile


def test_updating_a_gauge_keeps_none_alive(qtbot) -> None:  # type: ignore[no-untyped-def]
    tile = StatTile("decode tok/s")
    qtbot.addWidget(tile)
    before = sys.getrefcount(None)
    for value in range(2000):
        tile.set_value(str(value), "detail")
    assert abs(sys.getrefcount(None) - before) < 100
