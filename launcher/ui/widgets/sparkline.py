"""`Sparkline`: a tiny QPainter history graph (QtCharts is not in PySide6-Essentials)."""

from __future__ import annotations

from collections import deque

from PySide6.QtCore import QPointF, QRectF, QSize, Qt
from PySide6.QtGui import QColor, QPainter, QPainterPath, QPen
from PySide6.QtWidgets import QSizePolicy, QWidget

from launcher.ui import theme


class Sparkline(QWidget):
    """The last `capacity` values as a filled line, scaled to the largest value shown."""

    def __init__(self, capacity: int = 60, colour: str | QColor = theme.ACCENT, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self._values: deque[float] = deque(maxlen=capacity)
        self._colour = QColor(colour)
        self.setMinimumHeight(36)
        self.setSizePolicy(QSizePolicy.Policy.Expanding, QSizePolicy.Policy.Preferred)

    def sizeHint(self) -> QSize:
        """Wide and short."""
        return QSize(160, 44)

    def add(self, value: float) -> None:
        """Append one value and repaint."""
        self._values.append(max(0.0, float(value)))
        self.update()

    def clear(self) -> None:
        """Forget the history."""
        self._values.clear()
        self.update()

    def values(self) -> list[float]:
        """The history, oldest first."""
        return list(self._values)

    def paintEvent(self, event: object) -> None:
        """Draw the baseline and the graph."""
        painter = QPainter(self)
        painter.setRenderHint(QPainter.RenderHint.Antialiasing)
        rect = QRectF(self.rect()).adjusted(1, 3, -1, -1)
        baseline = QColor(self.palette().color(self.foregroundRole()))
        baseline.setAlpha(50)
        painter.setPen(QPen(baseline, 1))
        painter.drawLine(rect.bottomLeft(), rect.bottomRight())
        values = list(self._values)
        capacity = self._values.maxlen or 60
        if len(values) < 2:
            painter.end()
            return
        top = max(values) or 1.0
        step = rect.width() / max(1, capacity - 1)
        x0 = rect.right() - step * (len(values) - 1)
        points = [QPointF(x0 + i * step, rect.bottom() - (v / top) * rect.height()) for i, v in enumerate(values)]
        line = QPainterPath(points[0])
        for point in points[1:]:
            line.lineTo(point)
        fill = QPainterPath(line)
        fill.lineTo(points[-1].x(), rect.bottom())
        fill.lineTo(points[0].x(), rect.bottom())
        fill.closeSubpath()
        shade = QColor(self._colour)
        shade.setAlpha(60)
        painter.fillPath(fill, shade)
        painter.setPen(QPen(self._colour, 1.6, Qt.PenStyle.SolidLine, Qt.PenCapStyle.RoundCap))
        painter.drawPath(line)
        painter.end()
