"""Application setup: QApplication, high-DPI, theme, settings, the main window and the tray.

`run_app` is what `launcher gui` calls. With `measure_startup` it prints the seconds from process
start (the OS's record of it, so interpreter start-up and imports count) to the window being
shown, then quits: that is the cold-start figure quoted in the README.
"""

from __future__ import annotations

import logging
import sys
import time

import psutil
from PySide6.QtCore import Qt, QTimer
from PySide6.QtGui import QGuiApplication, QIcon
from PySide6.QtWidgets import QApplication, QMessageBox, QSystemTrayIcon

from launcher.core import settings as settings_store
from launcher.core.errors import ConfigError
from launcher.core.paths import resources_dir
from launcher.hardware.machine import Machine
from launcher.ui import theme, workers
from launcher.ui.main_window import MainWindow

STARTUP_MARKER = "LAUNCHER_WINDOW_SHOWN"
log = logging.getLogger(__name__)


def create_application() -> QApplication:
    """The QApplication, with the DPI policy set before it exists and our theme applied."""
    existing = QApplication.instance()
    if isinstance(existing, QApplication):
        return existing
    # Fractional scaling (150%, 175%) renders crisp instead of rounding to 100%/200%.
    QGuiApplication.setHighDpiScaleFactorRoundingPolicy(Qt.HighDpiScaleFactorRoundingPolicy.PassThrough)
    app = QApplication(sys.argv[:1])
    app.setApplicationName("Launcher")
    app.setApplicationDisplayName("Launcher")
    app.setOrganizationName("launcher")
    app.setDesktopFileName("launcher")
    app.setWindowIcon(window_icon())
    return app


def window_icon() -> QIcon:
    """The app icon from launcher/resources/icons (the PNGs the installers use, packaging/make_icons.py),
    so the window, tray and taskbar show the same picture as the dock, Start menu and desktop entry;
    the drawn one if the files are missing."""
    folder = resources_dir() / "icons"
    files = sorted(folder.glob("launcher-*.png"))
    if not files:
        return theme.app_icon()
    icon = QIcon()
    for path in files:
        icon.addFile(str(path))
    return icon


def finish_update_in_background() -> None:
    """This version has started: remove what an update left beside it (the previous version's folder,
    once nothing runs from it). Off the UI thread, since that folder may be large; a failure costs only
    the disk space, so it is logged."""

    def finish() -> list[object]:
        from launcher.updates.install import finish_pending_update

        return list(finish_pending_update())

    def done(removed: list[object]) -> None:
        for path in removed:
            log.info("removed the previous version's files: %s", path)

    workers.run_in_background(
        finish, on_done=done, on_failed=lambda text: log.warning("could not finish the update: %s", text)
    )


def seconds_since_process_start() -> float:
    """Wall-clock seconds since the OS started this process."""
    return time.time() - psutil.Process().create_time()


def run_app(
    *,
    machine_name: str | None = None,
    page: str | None = None,
    dark: bool | None = None,
    measure_startup: bool = False,
    serve: bool = False,
) -> int:
    """Open the window and run the event loop; returns the exit code. `serve`: start the server with
    the saved settings once the model list is ready (`launcher gui --serve`)."""
    app = create_application()
    theme.apply(app, dark=dark)
    try:
        settings = settings_store.load()
        settings_error = None
    except ConfigError as err:
        settings, settings_error = settings_store.Settings(), str(err)
    machine: Machine | None = None
    if machine_name:
        from launcher.hardware.recorded import load_recorded

        machine = load_recorded(machine_name)  # ConfigError lists the known names
    # The startup timing measures the window alone: no update check, no network.
    window = MainWindow(
        settings,
        machine=machine,
        save_settings=not measure_startup,
        check_updates=not measure_startup,
        serve_on_start=serve,
    )
    window.setWindowIcon(app.windowIcon())  # the packaged icon files, over the window's drawn one
    # Once the window is on screen, so the cleanup's imports and disk work do not delay it.
    window.exposed.connect(finish_update_in_background)
    tray = None
    if QSystemTrayIcon.isSystemTrayAvailable() and not measure_startup:
        from launcher.ui.tray import Tray

        tray = Tray(window)
        tray.show()
        app.setQuitOnLastWindowClosed(False)
        window.hidden_to_tray.connect(tray.note_hidden)
    window.closed.connect(app.quit)
    if page:
        window.show_page(page)
    if measure_startup:

        def report() -> None:
            cpu = psutil.Process().cpu_times()
            # Wall time is the user's figure; CPU time says how much of it was our work on a busy machine.
            print(f"{STARTUP_MARKER} {seconds_since_process_start():.3f} cpu={cpu.user + cpu.system:.3f}", flush=True)
            QTimer.singleShot(0, window.close)

        window.exposed.connect(report)
    window.show()
    if settings_error:
        QMessageBox.warning(window, "Settings not loaded", f"{settings_error}\nDefaults are used for now.")
    code = app.exec()
    window.shutdown()
    # Let running background jobs (a probe, a library scan) finish before their receivers go away.
    workers.pool().waitForDone(10_000)
    del tray
    return int(code)
