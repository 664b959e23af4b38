"""Cards, stat tiles, badges and a copyable field: the building blocks of every page."""

from __future__ import annotations

from PySide6.QtCore import Qt, Signal
from PySide6.QtGui import QGuiApplication
from PySide6.QtWidgets import (
    QFrame,
    QHBoxLayout,
    QLabel,
    QLineEdit,
    QPushButton,
    QVBoxLayout,
    QWidget,
)

from launcher.ui import theme


class Card(QFrame):
    """A framed box with a title; put content in `body` (a QVBoxLayout)."""

    def __init__(self, title: str = "", parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.setObjectName("Card")
        outer = QVBoxLayout(self)
        outer.setContentsMargins(14, 12, 14, 12)
        outer.setSpacing(8)
        self.title_label = QLabel(title)
        self.title_label.setObjectName("CardTitle")
        self.title_label.setVisible(bool(title))
        outer.addWidget(self.title_label)
        self.body = QVBoxLayout()
        self.body.setSpacing(6)
        outer.addLayout(self.body)
        outer.addStretch(1)  # cards side by side keep their content at the top

    def set_title(self, title: str) -> None:
        """Change the heading."""
        self.title_label.setText(title)
        self.title_label.setVisible(bool(title))


class StatTile(QWidget):
    """A big number with a caption under it (and an optional widget such as a sparkline)."""

    def __init__(self, caption: str, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        layout = QVBoxLayout(self)
        layout.setContentsMargins(0, 0, 0, 0)
        layout.setSpacing(2)
        self.value_label = QLabel("–")
        self.value_label.setObjectName("StatValue")
        self.value_label.setTextInteractionFlags(Qt.TextInteractionFlag.TextSelectableByMouse)
        self.caption_label = QLabel(caption)
        self.caption_label.setObjectName("StatCaption")
        self.caption_label.setWordWrap(True)
        layout.addWidget(self.value_label)
        layout.addWidget(self.caption_label)
        self.setAccessibleName(caption)

    def set_value(self, text: str, detail: str | None = None) -> None:
        """Show a value; `detail` replaces the caption's second line."""
        self.value_label.setText(text)
        self.setAccessibleDescription(text)
        if detail is not None:
            base = self.accessibleName()
            self.caption_label.setText(f"{base} · {detail}" if detail else base)

    def value(self) -> str:
        """The shown value text."""
        return self.value_label.text()


def badge(text: str, colour: str) -> QLabel:
    """A small coloured label ("Full GPU")."""
    label = QLabel(text)
    label.setObjectName("Badge")
    label.setStyleSheet(theme.badge_style(colour))
    label.setSizePolicy(label.sizePolicy().horizontalPolicy(), label.sizePolicy().verticalPolicy())
    return label


def muted(text: str = "", *, wrap: bool = True) -> QLabel:
    """A grey secondary-text label."""
    label = QLabel(text)
    label.setObjectName("Muted")
    label.setWordWrap(wrap)
    return label


class CopyField(QWidget):
    """A read-only line with a Copy button (endpoint URLs, keys, env lines)."""

    copied = Signal(str)

    def __init__(self, text: str = "", parent: QWidget | None = None, *, label: str = "Copy") -> None:
        super().__init__(parent)
        layout = QHBoxLayout(self)
        layout.setContentsMargins(0, 0, 0, 0)
        self.line = QLineEdit(text)
        self.line.setReadOnly(True)
        self.line.setFont(theme.monospace_font())
        self.button = QPushButton(label)
        self.button.clicked.connect(self.copy)
        layout.addWidget(self.line, 1)
        layout.addWidget(self.button)

    def set_text(self, text: str) -> None:
        """Replace the text."""
        self.line.setText(text)
        self.line.setCursorPosition(0)

    def text(self) -> str:
        """The current text."""
        return self.line.text()

    def copy(self) -> None:
        """Put the text on the clipboard."""
        QGuiApplication.clipboard().setText(self.line.text())
        self.copied.emit(self.line.text())
