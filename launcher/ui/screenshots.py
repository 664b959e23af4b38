"""Render the main window's pages to PNG files (used by scripts/screenshots and its test)."""

from __future__ import annotations

from pathlib import Path

from PySide6.QtWidgets import QApplication

from launcher.core.settings import Settings
from launcher.hardware.machine import Machine
from launcher.ui import theme
from launcher.ui.app import create_application
from launcher.ui.main_window import MainWindow

SIZE = (1280, 820)


def _settle(app: QApplication, window: MainWindow) -> None:
    from launcher.ui import workers

    for _ in range(5):
        app.processEvents()
        workers.pool().waitForDone(10_000)
    app.processEvents()
    window.repaint()


def render_screenshots(outdir: Path, machine: Machine, *, dark_too: bool = True) -> list[Path]:
    """One PNG per page (light), plus dark variants of the first two; returns the paths written."""
    app = create_application()
    written: list[Path] = []
    for dark in (False, True) if dark_too else (False,):
        theme.apply(app, dark=dark)
        window = MainWindow(Settings(), machine=machine, save_settings=False)
        window.resize(*SIZE)
        window.show()
        _settle(app, window)
        keys = list(window.page_keys())
        for key in keys if not dark else keys[:2]:
            window.show_page(key)
            _settle(app, window)
            path = outdir / (f"{key}-dark.png" if dark else f"{key}.png")
            window.grab().save(str(path))
            written.append(path)
        window.shutdown()
        window.deleteLater()
        app.processEvents()
    return written
