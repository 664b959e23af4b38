"""Pages render real data: recorded machines, the real advisor and catalog, parsed /metrics text."""

from __future__ import annotations

import json

import pytest
from PySide6.QtWidgets import QMessageBox

from launcher.cli.gui import NO_DISPLAY_EXIT_CODE, display_available
from launcher.core import settings as settings_store
from launcher.core.config import ServeConfig
from launcher.core.settings import Settings, WindowGeometry
from launcher.hardware.recorded import load_recorded, recorded_names
from launcher.ui.main_window import MainWindow
from launcher.ui.metrics import LiveSample, Prediction, ProcessMemory, parse_metrics
from launcher.ui.panels.agents import AgentsPanel
from launcher.ui.panels.gauges import GaugesPanel
from launcher.ui.panels.machine import MachinePanel
from launcher.ui.panels.models import ModelsPanel
from launcher.ui.server_process import ServerEndpoint, ServerProcess

GIB = 1024**3


@pytest.mark.parametrize("name", recorded_names())
def test_machine_panel_shows_every_recorded_machine(qtbot, name) -> None:  # type: ignore[no-untyped-def]
    machine = load_recorded(name)
    panel = MachinePanel()
    qtbot.addWidget(panel)
    panel.set_machine(machine)
    assert panel.cards["cpu"].findChildren(type(panel.title))  # rows were laid out
    gpu_cards = [key for key in panel.cards if key.startswith("gpu") and key != "gpu"]
    assert len(gpu_cards) == len(machine.gpus)
    assert ("apple" in panel.cards) == (machine.apple is not None)
    texts = " ".join(label.text() for label in panel.cards["unseen"].findChildren(type(panel.title)))
    for note in machine.unseen:
        assert note in texts


def test_models_page_lists_catalog_with_fit_badges_and_recommendation(qtbot) -> None:  # type: ignore[no-untyped-def]
    panel = ModelsPanel()
    qtbot.addWidget(panel)
    with qtbot.waitSignal(panel.rows_changed, timeout=30_000):
        panel.set_machine(load_recorded("rtx4090-desktop"), this_machine=False)
    labels = {panel.list.topLevelItem(i).text(1) for i in range(panel.list.topLevelItemCount())}
    assert "Full GPU" in labels and "Partial offload" in labels  # 70B does not fit a 4090
    assert panel.list.select_key("catalog:qwen3-8b")
    card = panel.recommendation
    assert "Recommended:" in card.choice.text()
    assert card.bars and "GPU 0" in card.bars[0].title.text()
    assert "tok/s" in card.speed.text()
    assert card.alternatives.topLevelItemCount() >= 1
    panel.search.setText("coder")
    shown = [panel.list.topLevelItem(i).text(0) for i in range(panel.list.topLevelItemCount())]
    assert shown and all("Coder" in title for title in shown)


def test_gauges_show_a_metrics_scrape() -> None:
    text = (
        "# TYPE launcher_generation_tokens_total counter\nlauncher_generation_tokens_total 120\n"
        '# TYPE launcher_requests_total counter\nlauncher_requests_total{endpoint="chat",status="200"} 3\n'
        'launcher_requests_total{endpoint="chat",status="500"} 1\n'
        "# TYPE launcher_requests_running gauge\nlauncher_requests_running 2\n"
        "# TYPE launcher_requests_waiting gauge\nlauncher_requests_waiting 1\n"
        "# TYPE launcher_kv_cache_used_tokens gauge\nlauncher_kv_cache_used_tokens 512\n"
        "# TYPE launcher_kv_cache_total_tokens gauge\nlauncher_kv_cache_total_tokens 2048\n"
        "# TYPE launcher_decode_tokens_per_second gauge\nlauncher_decode_tokens_per_second 42.5\n"
        "# TYPE launcher_time_to_first_token_seconds histogram\n"
        'launcher_time_to_first_token_seconds_bucket{le="+Inf"} 4\n'
        "launcher_time_to_first_token_seconds_sum 0.8\nlauncher_time_to_first_token_seconds_count 4\n"
        "# TYPE launcher_stream_decode_tokens_total counter\nlauncher_stream_decode_tokens_total 116\n"
        "# TYPE launcher_stream_decode_seconds_total counter\nlauncher_stream_decode_seconds_total 4\n"
        "# TYPE launcher_busy_seconds_total counter\nlauncher_busy_seconds_total 2\n"
    )
    before = parse_metrics(text.replace("_sum 0.8", "_sum 0.2").replace("_count 4", "_count 2"), 10.0)
    now = parse_metrics(text, 11.0)
    sample = LiveSample.between(before, now, ProcessMemory(900 * 1024**2, 900 * 1024**2, 16 * GIB, "RAM"))
    assert sample.requests_total == 4 and sample.requests_failed == 1
    assert sample.ttft_recent == pytest.approx(0.3)
    panel = GaugesPanel()
    panel.update_sample(sample)
    assert panel.decode.value() == "42.5"
    assert panel.requests.value() == "2 / 1"
    assert panel.kv.value() == "25%"
    assert panel.ttft.value() == "300 ms"
    assert "900.0 MiB" in panel.rss.value()
    assert panel.decode.caption_label.text().endswith("per stream 29.0")  # 116 tokens over 4 s of streams decoding
    lines = [line.text for line in panel.comparisons()]
    assert "Decode per stream: no prediction, measured 29.0 tok/s." in lines
    assert "All streams: 60.0 tok/s at 2.0 streams on average while busy." in lines  # 120 tokens in 2 busy s
    panel.set_prediction(Prediction(None, 20.0, 30.0))
    assert "Decode per stream: predicted 20.0–30.0 tok/s, measured 29.0 tok/s (+16%)." in [
        line.text for line in panel.comparisons()
    ]
    assert not panel.comparison_lines[0].text().startswith("⚠")
    panel.set_prediction(Prediction(None, 10.0, 20.0))
    off = [label.text() for label in panel.comparison_lines if label.text().startswith("⚠")]
    assert off == ["⚠ Decode per stream: predicted 10.0–20.0 tok/s, measured 29.0 tok/s (+93%)."]


def test_network_access_always_gets_an_api_key(qtbot) -> None:  # type: ignore[no-untyped-def]
    from launcher.ui.panels.server import ServerPanel

    panel = ServerPanel(ServerProcess())
    qtbot.addWidget(panel)
    assert panel.config().host == "127.0.0.1" and panel.config().api_key is None
    panel.allow_network.setChecked(True)
    config = panel.config()
    assert config.host == "0.0.0.0" and config.api_key and config.api_key.startswith("sk-local-")
    panel.load_config(ServeConfig(port=9000, parallel=3))
    assert panel.config().port == 9000 and panel.config().parallel == 3 and panel.config().is_loopback


def test_agent_config_writer_keeps_a_backup(qtbot, tmp_path, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    settings_file = tmp_path / ".claude" / "settings.json"
    settings_file.parent.mkdir()
    settings_file.write_text(json.dumps({"theme": "dark"}))
    panel = AgentsPanel(home=tmp_path)
    qtbot.addWidget(panel)
    endpoint = ServerEndpoint(
        "http://127.0.0.1:8420",
        "http://127.0.0.1:8420/v1",
        "gemma-3-270m",
        "llamacpp",
        "",
        32768,
        4,
        True,
        1,
        api_key="sk-local-test",
    )
    panel.set_endpoint(endpoint)
    panel.select_agent("claude-code")
    assert panel.setup is not None and panel.write_buttons
    monkeypatch.setattr(QMessageBox, "question", lambda *a, **k: QMessageBox.StandardButton.Yes)
    with qtbot.waitSignal(panel.config_written) as written:
        panel.write_buttons[0].click()
    result = written.args[0]
    data = json.loads(settings_file.read_text())
    assert data["theme"] == "dark"
    assert "127.0.0.1:8420" in json.dumps(data) and "sk-local-test" in json.dumps(data)
    assert result.backup is not None and json.loads(result.backup.read_text()) == {"theme": "dark"}
    assert str(result.backup.name) in panel.status.text() or "backup" in panel.status.text().lower()


def test_window_geometry_and_server_defaults_are_saved(qtbot) -> None:  # type: ignore[no-untyped-def]
    settings = Settings(window=WindowGeometry(x=40, y=50, width=1000, height=700))
    window = MainWindow(settings, machine=load_recorded("cpu-avx2-laptop-16gb"))
    qtbot.addWidget(window)
    assert (window.width(), window.height()) == (1000, 700)
    window.resize(1100, 720)
    window.server_panel.parallel.setValue(6)
    window.close()
    saved = settings_store.load()
    assert (saved.window.width, saved.window.height) == (1100, 720)
    assert saved.serve.parallel == 6


def test_no_display_gives_exit_code_3() -> None:
    assert not display_available({}, platform="linux")
    assert display_available({"DISPLAY": ":0"}, platform="linux")
    assert display_available({"QT_QPA_PLATFORM": "offscreen"}, platform="linux")
    assert display_available({}, platform="darwin")
    assert NO_DISPLAY_EXIT_CODE == 3


def test_tray_keeps_the_server_with_the_window_closed_and_quit_stops_it(qtbot) -> None:  # type: ignore[no-untyped-def]
    import sys

    from launcher.ui.tray import Tray

    window = MainWindow(machine=load_recorded("cpu-avx2-laptop-16gb"), save_settings=False)
    qtbot.addWidget(window)
    # A child that stays up like a server would; the window/tray logic is what is under test.
    window.server._command = lambda _c: (
        sys.executable,
        ["-c", "import sys; print('up', flush=True); sys.stdin.read()"],
    )
    quits: list[bool] = []
    tray = Tray(window, quit_app=lambda: quits.append(True))
    window.show()
    with qtbot.waitSignal(window.server.started, timeout=20_000):
        window.server_panel.start()
    with qtbot.waitSignal(window.hidden_to_tray):
        window.close()
    assert not window.isVisible() and window.server.state == "starting"
    assert tray.server_action.text() == "Stop server"
    tray.quit()
    assert window.server.state == "stopped" or window.server.pid is None
    assert quits == [True]


def test_gui_without_a_display_exits_with_3(tmp_path) -> None:  # type: ignore[no-untyped-def]
    import os
    import subprocess
    import sys

    env = {k: v for k, v in os.environ.items() if k not in ("DISPLAY", "WAYLAND_DISPLAY", "QT_QPA_PLATFORM")}
    result = subprocess.run(
        [sys.executable, "-m", "launcher", "gui"], env=env, capture_output=True, text=True, timeout=60, check=False
    )
    assert result.returncode == 3
    assert "no display" in result.stderr


def test_pages_are_reachable_from_the_keyboard(qtbot) -> None:  # type: ignore[no-untyped-def]
    from PySide6.QtCore import Qt
    from PySide6.QtGui import QKeySequence, QShortcut

    window = MainWindow(machine=load_recorded("cpu-avx2-laptop-16gb"), save_settings=False)
    qtbot.addWidget(window)
    window.show()
    keys = window.page_keys()
    window.nav.setFocus()
    for index in range(1, len(keys)):
        qtbot.keyClick(window.nav, Qt.Key.Key_Down)
        assert window.pages.currentWidget() is window.page(keys[index])
    bound = {
        shortcut.key().toString(QKeySequence.SequenceFormat.PortableText) for shortcut in window.findChildren(QShortcut)
    }
    assert {f"Ctrl+{n}" for n in range(1, len(keys) + 1)} <= bound
    window.shortcut_for_page(2).activated.emit()
    assert window.pages.currentWidget() is window.page(keys[1])
