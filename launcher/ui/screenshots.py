"""Render the main window's pages to PNG files (used by scripts/screenshots).

Three windows, all real: one shows a recorded machine (the Models, Machine and Settings pages with
the real catalog and advisor), one runs on this computer and serves the starter model with the
real `launcher serve`, chats with it and runs an agent live test, so the Server, Chat, Agents and
Log pictures show measured numbers; the last serves the library, with the starter answering a
request beside a second model loaded by name (server-two-models.png).
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import httpx
from PySide6.QtCore import QEventLoop, QTimer, SignalInstance
from PySide6.QtWidgets import QApplication

from launcher.core.settings import Settings
from launcher.hardware.machine import Machine
from launcher.ui import theme, workers
from launcher.ui.app import create_application
from launcher.ui.main_window import MainWindow
from launcher.ui.panels.loaded_models import ACTIVITY, DECODE

SIZE = (1280, 860)
SHOWCASE_MODEL = "catalog:qwen3-coder-30b-a3b"
CHAT_PROMPTS = ("What is the capital of France? Answer in one sentence.",)
STORY_PROMPT = "Tell me a long story about a lighthouse keeper and a storm."
IDLE_UNLOAD_MINUTES = 15


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


def _two_models_picture(app: QApplication, outdir: Path, second_model: Path) -> Path:
    """The Server page with "Load other library models on request" on: `second_model` (added to the
    library) loaded by its name and idle, the starter generating a reply beside it."""
    from launcher.catalog.library import add_imported

    second = add_imported(second_model).name
    window = MainWindow(Settings(), save_settings=False)
    window.resize(*SIZE)
    window.show()
    wait_for(window.machine_changed, 60)
    wait_for(window.models_page.rows_changed, 60)
    panel = window.server_panel
    panel.port.setValue(0)
    panel.parallel.setValue(2)
    panel.library.setChecked(True)
    panel.idle_unload.setValue(IDLE_UNLOAD_MINUTES)
    starter = next(row for row in window.models_page.rows if row.catalog is not None and row.catalog.starter)
    window.serve_row(starter)
    if not wait_for(window.server.ready, 300) or window.endpoint is None:
        raise RuntimeError("the starter model did not start:\n" + window.logs_page.text()[-2000:])
    endpoint = window.endpoint
    body = {"model": second, "messages": [{"role": "user", "content": "Hello!"}], "max_tokens": 32}
    httpx.post(endpoint.base_url + "/chat/completions", json=body, timeout=300).raise_for_status()
    window.chat_page.max_tokens = 400  # long enough to be generating when the picture is taken
    window.chat_page.send(STORY_PROMPT)
    rows = window.loaded_models

    def both_live() -> bool:
        names = rows.row_names()
        return (
            sorted(names) == sorted([endpoint.model, second])
            and "running" in rows.row_text(endpoint.model)[ACTIVITY]
            and rows.row_text(endpoint.model)[DECODE] not in ("–", "0.0 tok/s")
        )

    if not _wait_until(app, both_live, 300):
        raise RuntimeError(f"two loaded models never showed: {rows.row_names()}")
    path = _grab(app, window, "server", outdir / "server-two-models.png")
    wait_for(window.chat_page.reply_finished, 300)
    window.shutdown()
    window.deleteLater()
    return path


def render_screenshots(
    outdir: Path,
    machine: Machine,
    *,
    live: bool = True,
    second_model: Path | None = None,
    only_two_models: bool = False,
) -> list[Path]:
    """Every page as PNG (light), plus dark variants; returns the paths written. `second_model` (a GGUF)
    adds the two-model Server picture; `only_two_models` renders that one alone."""
    app = create_application()
    written: list[Path] = []
    if not only_two_models:
        for dark in (False, True):
            theme.apply(app, dark=dark)
            written += _static_pictures(app, outdir, machine, dark)
        theme.apply(app, dark=False)
        if live:
            written += _live_pictures(app, outdir)
    if live and second_model is not None:
        written.append(_two_models_picture(app, outdir, second_model))
    app.processEvents()
    return written
