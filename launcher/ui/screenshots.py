"""Render the main window's pages to PNG files (used by scripts/screenshots).

Two windows, both real: one shows a recorded machine (the Models, Machine and Settings pages with
the real catalog and advisor), the other runs on this computer and serves the starter model with
the real `launcher serve`, chats with it and runs an agent live test, so the Server, Chat, Agents
and Log pictures show measured numbers.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from PySide6.QtCore import QEventLoop, QTimer, SignalInstance
from PySide6.QtWidgets import QApplication

from launcher.core.settings import Settings
from launcher.hardware.machine import Machine
from launcher.ui import theme, workers
from launcher.ui.app import create_application
from launcher.ui.main_window import MainWindow

SIZE = (1280, 860)
SHOWCASE_MODEL = "catalog:qwen3-coder-30b-a3b"
CHAT_PROMPTS = ("What is the capital of France? Answer in one sentence.",)


def _settle(app: QApplication, window: MainWindow) -> None:
    for _ in range(5):
        app.processEvents()
        workers.pool().waitForDone(10_000)
    app.processEvents()
    window.repaint()


def wait_for(signal: SignalInstance, timeout_s: float, until: Callable[..., bool] | None = None) -> bool:
    """Run the event loop until `signal` fires (and `until(*args)` holds) or the timeout passes."""
    loop = QEventLoop()
    fired: list[bool] = []

    def on_signal(*args: object) -> None:
        if until is None or until(*args):
            fired.append(True)
            loop.quit()

    signal.connect(on_signal)
    QTimer.singleShot(int(timeout_s * 1000), loop.quit)
    loop.exec()
    signal.disconnect(on_signal)
    return bool(fired)


def _wait_until(app: QApplication, condition: Callable[[], bool], timeout_s: float) -> bool:
    """Run the event loop until `condition()` holds or the timeout passes."""
    deadline = QTimer()
    deadline.setSingleShot(True)
    deadline.start(int(timeout_s * 1000))
    while not condition() and deadline.isActive():
        app.processEvents(QEventLoop.ProcessEventsFlag.WaitForMoreEvents, 100)
    return condition()


def _grab(app: QApplication, window: MainWindow, key: str, path: Path) -> Path:
    window.show_page(key)
    _settle(app, window)
    window.grab().save(str(path))
    return path


def _static_pictures(app: QApplication, outdir: Path, machine: Machine, dark: bool) -> list[Path]:
    window = MainWindow(Settings(), machine=machine, this_machine=False, save_settings=False)
    window.resize(*SIZE)
    window.show()
    wait_for(window.models_page.rows_changed, 30)
    window.models_page.list.select_key(SHOWCASE_MODEL)
    suffix = "-dark" if dark else ""
    keys = ("models", "machine") if dark else ("models", "machine", "settings")
    written = [_grab(app, window, key, outdir / f"{key}{suffix}.png") for key in keys]
    window.shutdown()
    window.deleteLater()
    return written


def _live_pictures(app: QApplication, outdir: Path) -> list[Path]:
    window = MainWindow(Settings(), save_settings=False)
    window.resize(*SIZE)
    window.show()
    wait_for(window.machine_changed, 60)
    wait_for(window.models_page.rows_changed, 60)
    window.server_panel.port.setValue(0)
    window.server_panel.parallel.setValue(2)
    starter = next(row for row in window.models_page.rows if row.catalog is not None and row.catalog.starter)
    window.serve_row(starter)
    if not wait_for(window.server.ready, 300):
        raise RuntimeError("the starter model did not start:\n" + window.logs_page.text()[-2000:])
    window.chat_page.max_tokens = 48  # keeps the pictures quick on a slow CPU
    for prompt in CHAT_PROMPTS:
        window.chat_page.send(prompt)
        wait_for(window.chat_page.reply_finished, 180)
    if window.poller is not None:
        for _ in range(3):
            wait_for(window.poller.sample, 5)
    # Calibrate from the window, so the Server picture shows predictions corrected for this machine.
    window.gauges.calibrate_button.click()
    _wait_until(app, lambda: window.gauges.calibration_status.text().startswith(("Calibrated", "Calibration")), 300)
    if window.poller is not None:
        wait_for(window.poller.sample, 5)
    window.agents_page.select_agent("aider")
    window.agents_page.run_test()
    wait_for(window.agents_page.test_finished, 180)
    written = [_grab(app, window, key, outdir / f"{key}.png") for key in ("server", "chat", "logs")]
    window.show_page("agents")
    _settle(app, window)
    window.agents_page.scroll_to_test()
    written.append(_grab(app, window, "agents", outdir / "agents-test.png"))
    window.agents_page.select_agent("claude-code")
    written.append(_grab(app, window, "agents", outdir / "agents.png"))
    theme.apply(app, dark=True)
    written.append(_grab(app, window, "server", outdir / "server-dark.png"))
    theme.apply(app, dark=False)
    window.shutdown()
    window.deleteLater()
    return written


def render_screenshots(outdir: Path, machine: Machine, *, live: bool = True) -> list[Path]:
    """Every page as PNG (light), plus dark variants; returns the paths written."""
    app = create_application()
    written: list[Path] = []
    for dark in (False, True):
        theme.apply(app, dark=dark)
        written += _static_pictures(app, outdir, machine, dark)
    theme.apply(app, dark=False)
    if live:
        written += _live_pictures(app, outdir)
    app.processEvents()
    return written
