"""The server's log: every stderr line of the `launcher serve` process, newest at the bottom."""

from __future__ import annotations

from PySide6.QtGui import QGuiApplication, QTextCursor
from PySide6.QtWidgets import QHBoxLayout, QLabel, QPlainTextEdit, QPushButton, QVBoxLayout, QWidget

from launcher.ui import theme

MAX_LINES = 5000


class LogsPanel(QWidget):
    """A read-only, size-capped log view with Copy and Clear."""

    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        layout = QVBoxLayout(self)
        layout.setContentsMargins(20, 16, 20, 16)
        title = QLabel("Server log")
        title.setObjectName("PageTitle")
        self.view = QPlainTextEdit()
        self.view.setObjectName("Log")
        self.view.setReadOnly(True)
        self.view.setMaximumBlockCount(MAX_LINES)
        self.view.setFont(theme.monospace_font())
        self.view.setLineWrapMode(QPlainTextEdit.LineWrapMode.NoWrap)
        self.view.setAccessibleName("Server log")
        copy = QPushButton("Copy all")
        copy.clicked.connect(lambda: QGuiApplication.clipboard().setText(self.view.toPlainText()))
        clear = QPushButton("Clear")
        clear.clicked.connect(self.view.clear)
        header = QHBoxLayout()
        header.addWidget(title)
        header.addStretch(1)
        header.addWidget(copy)
        header.addWidget(clear)
        layout.addLayout(header)
        layout.addWidget(self.view, 1)

    def append(self, line: str) -> None:
        """Add one line, keeping the view scrolled to the end if it was there."""
        bar = self.view.verticalScrollBar()
        at_end = bar.value() >= bar.maximum() - 2
        self.view.appendPlainText(line)
        if at_end:
            self.view.moveCursor(QTextCursor.MoveOperation.End)
            bar.setValue(bar.maximum())

    def text(self) -> str:
        """Everything shown."""
        return self.view.toPlainText()
