"""End to end through the window: import the tiny test model, serve it with the real `launcher serve`,
chat with it, watch the gauges move and the request count rise, stop it.
"""

from __future__ import annotations

import httpx
import pytest

from launcher.hardware.recorded import load_recorded
from launcher.ui.main_window import MainWindow

pytestmark = pytest.mark.slow


def test_serve_chat_and_watch_gauges(qtbot, tiny_gguf, tmp_path) -> None:  # type: ignore[no-untyped-def]
    window = MainWindow(machine=load_recorded("cpu-avx2-laptop-16gb"), save_settings=False, home=tmp_path)
    qtbot.addWidget(window)
    qtbot.waitSignal(window.models_page.rows_changed, timeout=30_000).wait()
    window.server_panel.port.setValue(0)  # any free port: tests never collide on 8420
    window.server_panel.context.setValue(1024)
    window.server_panel.parallel.setValue(2)
    models = window.models_page

    with qtbot.waitSignal(models.rows_changed, timeout=30_000):
        models.import_path(str(tiny_gguf))
    row = next(r for r in models.rows if r.kind == "local" and r.local and r.local.model.path == tiny_gguf)
    assert row.serve_spec
    assert models.list.select_key(row.key)
    assert models.actions.serve_button.isEnabled()

    with qtbot.waitSignal(window.server.ready, timeout=120_000) as ready:
        models.actions.serve_button.click()
    endpoint = ready.args[0]
    assert window.server_panel.endpoint.text() == endpoint.base_url
    assert "Ready" in window.server_panel.status.text()

    # The endpoint the window shows works for any OpenAI client.
    models_list = httpx.get(endpoint.base_url + "/models", timeout=10).json()
    assert models_list["data"][0]["id"] == endpoint.model

    chat = window.chat_page
    assert chat.send_button.isEnabled()
    with qtbot.waitSignal(chat.reply_finished, timeout=120_000) as reply:
        chat.send("Hello there, how are you today?")
    assert reply.args[0].text
    assert "Hello there" in chat.transcript_text()

    poller = window.poller
    assert poller is not None
    with qtbot.waitSignal(
        poller.sample,
        timeout=30_000,
        check_params_cb=lambda s: s.requests_total >= 1 and (s.decode_tps > 0 or s.generated_tps > 0),
    ):
        pass
    qtbot.waitUntil(lambda: window.gauges.total.value() not in ("–", "0"), timeout=10_000)
    assert max(window.gauges.decode_graph.values()) > 0
    assert window.gauges.rss.value() != "–"
    # the server runs with --speculative auto: the tile says how many drafts were accepted, or that none were made
    assert window.gauges.speculative_mode == "auto"
    tile = window.gauges.speculation.value()
    assert tile == "idle" or tile.endswith("% accepted"), tile

    # Predicted beside measured, for what the server runs (1,024 tokens x 2 sequences, its KV type).
    assert (endpoint.serving["context"], endpoint.serving["parallel"]) == (1024, 2)
    prediction = window.gauges.prediction
    assert prediction is not None and prediction.memory_bytes and prediction.calibrated_runs == 0
    qtbot.waitUntil(lambda: "measured" in window.gauges.comparison_lines[0].text(), timeout=10_000)

    # Calibrate from the window: a few requests, a run stored for this machine, a prediction that says so.
    window.gauges.calibrate_button.click()
    qtbot.waitUntil(lambda: window.gauges.calibration_status.text().startswith("Calibrated"), timeout=120_000)
    assert window.gauges.prediction is not None and window.gauges.prediction.calibrated_runs == 1
    assert any("calibrated from 1 run" in line.text for line in window.gauges.comparisons())

    with qtbot.waitSignal(window.server.finished, timeout=30_000) as finished:
        window.server_panel.stop_button.click()
    assert finished.args[0].kind == "stopped"
    assert window.poller is None
    assert not chat.send_button.isEnabled()
    window.shutdown()
