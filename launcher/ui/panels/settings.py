"""Settings: the models folder (a Hugging Face cache), the Hugging Face token, the update check, and the
MCP servers whose tools the chat may use.

Server defaults (engine, context, parallel, port, key) are the Server page's form, saved on quit.
Everything but the MCP servers lands in the one typed settings file (`launcher.core.settings`). The
update check's switch applies at once (the window's schedule reads it); "Check now" asks the window's
`UpdateController`, which reports back through `set_update_status`. The MCP servers section
(`launcher.ui.panels.mcp_servers`, mcp.json) is built by the window once the MCP SDK is imported off
the UI thread, and placed here with `set_mcp_section`.
"""

from __future__ import annotations

from PySide6.QtCore import Signal
from PySide6.QtWidgets import (
    QCheckBox,
    QFileDialog,
    QFormLayout,
    QHBoxLayout,
    QLabel,
    QLineEdit,
    QPushButton,
    QScrollArea,
    QVBoxLayout,
    QWidget,
)

from launcher.core import paths
from launcher.core import settings as settings_store
from launcher.core.errors import LauncherError
from launcher.core.settings import Settings
from launcher.ui.widgets.card import Card, muted


class SettingsPanel(QWidget):
    """Edits a Settings object and saves it on "Save"."""

    saved = Signal(object)  # Settings
    check_updates_requested = Signal()

    def __init__(self, settings: Settings, parent: QWidget | None = None, *, persist: bool = True) -> None:
        super().__init__(parent)
        self.settings = settings
        self.persist = persist
        self.mcp_section: QWidget | None = None
        content = QWidget()
        layout = QVBoxLayout(content)
        layout.setContentsMargins(20, 16, 20, 16)
        layout.setSpacing(12)
        self.scroll = QScrollArea()  # the MCP servers' list can outgrow a small window
        self.scroll.setWidgetResizable(True)
        self.scroll.setFrameShape(QScrollArea.Shape.NoFrame)
        self.scroll.setWidget(content)
        outer = QVBoxLayout(self)
        outer.setContentsMargins(0, 0, 0, 0)
        outer.addWidget(self.scroll)
        title = QLabel("Settings")
        title.setObjectName("PageTitle")
        layout.addWidget(title)
        card = Card("Models and the Hugging Face Hub")
        self.models_dir = QLineEdit(settings.models_dir or "")
        self.models_dir.setPlaceholderText(str(paths.hf_cache_dir()) + " (shared with other Hugging Face tools)")
        browse = QPushButton("Browse…")
        browse.clicked.connect(self._browse)
        folder = QHBoxLayout()
        folder.addWidget(self.models_dir, 1)
        folder.addWidget(browse)
        self.hf_token = QLineEdit(settings.hf_token or "")
        self.hf_token.setEchoMode(QLineEdit.EchoMode.Password)
        self.hf_token.setPlaceholderText("hf_… (only for gated or private models; HF_TOKEN wins when set)")
        form = QFormLayout()
        models_label = QLabel("&Models folder")
        models_label.setBuddy(self.models_dir)
        token_label = QLabel("Hugging Face &token")
        token_label.setBuddy(self.hf_token)
        form.addRow(models_label, folder)
        form.addRow(token_label, self.hf_token)
        card.body.addLayout(form)
        card.body.addWidget(muted(f"Settings file: {paths.settings_file()}"))
        self.save_button = QPushButton("Save")
        self.save_button.setObjectName("Primary")
        self.save_button.clicked.connect(self.save)
        self.status = muted()
        row = QHBoxLayout()
        row.addWidget(self.save_button)
        row.addWidget(self.status, 1)
        card.body.addLayout(row)
        layout.addWidget(card)
        layout.addWidget(self._updates_card())
        self._mcp_slot = QVBoxLayout()
        self.mcp_placeholder = muted("MCP servers: loading…")
        self._mcp_slot.addWidget(self.mcp_placeholder)
        layout.addLayout(self._mcp_slot)
        layout.addStretch(1)

    def set_mcp_section(self, section: QWidget) -> None:
        """Show the MCP servers section (built by the window once the SDK is loaded)."""
        if self.mcp_section is not None:
            self._mcp_slot.removeWidget(self.mcp_section)
            self.mcp_section.deleteLater()
        self.mcp_placeholder.hide()
        self.mcp_section = section
        self._mcp_slot.addWidget(section)

    def scroll_to_mcp(self) -> None:
        """Bring the MCP servers section into view (the Chat page's tools line links here)."""
        if self.mcp_section is not None:
            self.scroll.ensureWidgetVisible(self.mcp_section)

    def _updates_card(self) -> Card:
        card = Card("Updates")
        self.check_updates = QCheckBox("Check for updates at start and once a day")
        self.check_updates.setChecked(self.settings.check_for_updates)
        self.check_updates.toggled.connect(self._check_updates_toggled)
        card.body.addWidget(self.check_updates)
        card.body.addWidget(
            muted(
                "What is sent: only a GET of the release feed; nothing about you or your machine. "
                "Never while offline (HF_HUB_OFFLINE), and nothing downloads until you say so."
            )
        )
        self.check_now_button = QPushButton("Check now")
        self.check_now_button.clicked.connect(self._check_now)
        self.update_status = muted()
        row = QHBoxLayout()
        row.addWidget(self.check_now_button)
        row.addWidget(self.update_status, 1)
        card.body.addLayout(row)
        return card

    def _check_updates_toggled(self, on: bool) -> None:
        # Applied at once, not on Save: the schedule reads it, and the window saves it on quit.
        self.settings.check_for_updates = on

    def _check_now(self) -> None:
        self.check_now_button.setEnabled(False)  # until the answer comes back through set_update_status
        self.update_status.setText("Checking…")
        self.check_updates_requested.emit()

    def set_update_status(self, text: str) -> None:
        """The result of the last update check ("up to date", "failed (reason)", ...)."""
        self.update_status.setText(text)
        self.check_now_button.setEnabled(True)

    def _browse(self) -> None:
        folder = QFileDialog.getExistingDirectory(
            self, "Models folder", self.models_dir.text() or str(paths.hf_cache_dir())
        )
        if folder:
            self.models_dir.setText(folder)

    def save(self) -> None:
        """Apply the form to the settings and write the file."""
        self.settings.models_dir = self.models_dir.text().strip() or None
        self.settings.hf_token = self.hf_token.text().strip() or None
        self.settings.check_for_updates = self.check_updates.isChecked()
        if self.persist:
            try:
                path = settings_store.save(self.settings)
            except (OSError, LauncherError) as err:
                self.status.setText(f"Could not save: {err}")
                return
            self.status.setText(f"Saved to {path}.")
        self.saved.emit(self.settings)
