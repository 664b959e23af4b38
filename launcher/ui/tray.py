"""The system tray icon: keeps the server running while the window is closed; Quit stops it cleanly."""

from __future__ import annotations

from collections.abc import Callable

from PySide6.QtGui import QAction
from PySide6.QtWidgets import QApplication, QMenu, QSystemTrayIcon

from launcher.ui import theme
from launcher.ui.main_window import MainWindow


class Tray(QSystemTrayIcon):
    """Tray icon with Show / Start-Stop / Quit. Only created where a tray exists."""

    def __init__(self, window: MainWindow, *, quit_app: Callable[[], None] = QApplication.quit) -> None:
        super().__init__(theme.app_icon(), window)
        self.window = window
        self._quit_app = quit_app
        self._told = False
        menu = QMenu()
        self.show_action = QAction("Show Launcher", menu)
        self.show_action.triggered.connect(self.show_window)
        self.server_action = QAction("Stop server", menu)
        self.server_action.triggered.connect(self._toggle_server)
        quit_action = QAction("Quit (stops the server)", menu)
        quit_action.triggered.connect(self.quit)
        menu.addAction(self.show_action)
        menu.addAction(self.server_action)
        menu.addSeparator()
        menu.addAction(quit_action)
        self._menu = menu
        self.setContextMenu(menu)
        self.setToolTip("Launcher: server stopped")
        self.activated.connect(self._activated)
        window.server.state_changed.connect(self._state_changed)
        window.server.finished.connect(self._server_finished)
        window.quit_on_close = False
        self._state_changed(window.server.state)

    def show_window(self) -> None:
        """Bring the window back."""
        self.window.showNormal()
        self.window.raise_()
        self.window.activateWindow()

    def _activated(self, reason: QSystemTrayIcon.ActivationReason) -> None:
        if reason in (QSystemTrayIcon.ActivationReason.Trigger, QSystemTrayIcon.ActivationReason.DoubleClick):
            self.show_window()

    def _toggle_server(self) -> None:
        if self.window.server.state == "stopped":
            self.window.server_panel.start()
        else:
            self.window.server.stop()

    def _state_changed(self, state: str) -> None:
        self.server_action.setText("Start server" if state == "stopped" else "Stop server")
        endpoint = self.window.server.endpoint
        text = f"serving at {endpoint.base_url}" if endpoint and state == "ready" else f"server {state}"
        self.setToolTip(f"Launcher: {text}")

    def _server_finished(self, outcome: object) -> None:
        # A crash while the window is hidden must still reach the user.
        if getattr(outcome, "is_failure", False) and self.supportsMessages():
            self.showMessage(
                "Launcher: server stopped", str(outcome).splitlines()[0], QSystemTrayIcon.MessageIcon.Critical
            )

    def note_hidden(self) -> None:
        """Tell the user once that the server keeps running in the tray."""
        if not self._told and self.supportsMessages():
            self._told = True
            self.showMessage("Launcher", "The server keeps running. Use the tray icon to open or quit.")

    def quit(self) -> None:
        """Stop everything and leave."""
        self.window.shutdown()
        self.hide()
        self._quit_app()
