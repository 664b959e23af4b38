"""Settings: the models folder (a Hugging Face cache), the Hugging Face token and the theme.

Server defaults (engine, context, parallel, port, key) are the Server page's form, saved on quit.
Everything lands in the one typed settings file (`launcher.core.settings`).
"""

from __future__ import annotations

from PySide6.QtCore import Signal
from PySide6.QtWidgets import (
    QFileDialog,
    QFormLayout,
    QHBoxLayout,
    QLabel,
    QLineEdit,
    QPushButton,
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

    def __init__(self, settings: Settings, parent: QWidget | None = None, *, persist: bool = True) -> None:
        super().__init__(parent)
        self.settings = settings
        self.persist = persist
        layout = QVBoxLayout(self)
        layout.setContentsMargins(20, 16, 20, 16)
        layout.setSpacing(12)
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
        layout.addStretch(1)

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
        if self.persist:
            try:
                path = settings_store.save(self.settings)
            except (OSError, LauncherError) as err:
                self.status.setText(f"Could not save: {err}")
                return
            self.status.setText(f"Saved to {path}.")
        self.saved.emit(self.settings)
