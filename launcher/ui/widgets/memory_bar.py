"""`MemoryBar`: weights | KV cache | overhead | KV checkpoints | free, drawn as one stacked bar with a legend
underneath (KV checkpoints: llama.cpp's sliding-window copies in host RAM, shown only where there are some)."""

from __future__ import annotations

from PySide6.QtCore import QRectF, QSize, Qt
from PySide6.QtGui import QColor, QPainter, QPainterPath
from PySide6.QtWidgets import QLabel, QSizePolicy, QVBoxLayout, QWidget

from launcher.core.units import format_bytes
from launcher.ui import theme

SEGMENTS = (("weights", "#3b82f6"), ("KV cache", "#8b5cf6"), ("overhead", "#9ca3af"), ("KV checkpoints", "#c084fc"))
FREE_COLOUR = "#22c55e"
OVER_COLOUR = theme.BAD


class _Bar(QWidget):
    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.parts: tuple[int, int, int, int] = (0, 0, 0, 0)
        self.capacity = 0
        self.setMinimumHeight(14)
        self.setSizePolicy(QSizePolicy.Policy.Expanding, QSizePolicy.Policy.Fixed)

    def sizeHint(self) -> QSize:
        return QSize(240, 16)

    def paintEvent(self, event: object) -> None:
        painter = QPainter(self)
        painter.setRenderHint(QPainter.RenderHint.Antialiasing)
        rect = QRectF(self.rect()).adjusted(0.5, 0.5, -0.5, -0.5)
        clip = QPainterPath()
        clip.addRoundedRect(rect, 4, 4)
        painter.setClipPath(clip)
        track = QColor(FREE_COLOUR)
        track.setAlpha(70)
        painter.fillRect(rect, track)
        used = sum(self.parts)
        scale = rect.width() / max(1, self.capacity, used)
        x = rect.left()
        for value, (_, colour) in zip(self.parts, SEGMENTS, strict=True):
            width = value * scale
            painter.fillRect(QRectF(x, rect.top(), width, rect.height()), QColor(colour))
            x += width
        if used > self.capacity > 0:  # mark where free memory ends
            edge = rect.left() + self.capacity * scale
            painter.fillRect(QRectF(edge, rect.top(), rect.right() - edge, rect.height()), QColor(OVER_COLOUR))
        painter.end()


class MemoryBar(QWidget):
    """A labelled bar for one memory pool ("GPU 0", "RAM", "unified memory")."""

    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        layout = QVBoxLayout(self)
        layout.setContentsMargins(0, 0, 0, 0)
        layout.setSpacing(3)
        self.title = QLabel()
        self.title.setWordWrap(True)
        self.bar = _Bar()
        self.legend = QLabel()
        self.legend.setObjectName("Muted")
        self.legend.setWordWrap(True)
        self.legend.setTextFormat(Qt.TextFormat.RichText)
        layout.addWidget(self.title)
        layout.addWidget(self.bar)
        layout.addWidget(self.legend)

    def set_parts(
        self, device: str, weights: int, kv_cache: int, overhead: int, free: int, checkpoints: int = 0
    ) -> None:
        """Show one device's share; `free` is the memory available before loading."""
        parts = (weights, kv_cache, overhead, checkpoints)
        used = sum(parts)
        verdict = "fits" if used <= free else f"over by {format_bytes(used - free)}"
        self.title.setText(f"<b>{device}</b>: needs {format_bytes(used)} of {format_bytes(free)} free ({verdict})")
        self.bar.parts = parts
        self.bar.capacity = free
        self.bar.update()
        swatches = [
            f"<span style='color:{colour}'>■</span> {name} {format_bytes(value)}"
            for (name, colour), value in zip(SEGMENTS, parts, strict=True)
            if value or name != "KV checkpoints"
        ]
        left = max(0, free - used)
        swatches.append(f"<span style='color:{FREE_COLOUR}'>■</span> free after load {format_bytes(left)}")
        self.legend.setText(" &nbsp; ".join(swatches))
