"""Look and feel: Fusion style, a light or dark palette following the system, one stylesheet.

The stylesheet only refers to palette roles (`palette(base)`, ...) and a few accent colours
that read well on both backgrounds, so a theme switch never leaves dark text on a dark card.
Sizes are in points / font-relative units so 200% scaling stays readable.
"""

from __future__ import annotations

from PySide6.QtCore import QRectF, Qt
from PySide6.QtGui import (
    QBrush,
    QColor,
    QFont,
    QGuiApplication,
    QIcon,
    QPainter,
    QPainterPath,
    QPalette,
    QPixmap,
)
from PySide6.QtWidgets import QApplication

ACCENT = QColor("#3b82f6")
GOOD = "#16a34a"
WARN = "#d97706"
BAD = "#dc2626"
MUTED = "#6b7280"

# Fit verdict (launcher.advisor.fit.Verdict) -> (label, colour) for the badges in lists and the recommendation card.
VERDICT_STYLE: dict[str, tuple[str, str]] = {
    "full_gpu": ("Full GPU", GOOD),
    "unified": ("Unified memory", GOOD),
    "partial": ("Partial offload", WARN),
    "cpu": ("CPU only", "#0891b2"),
    "wont_fit": ("Won't fit", BAD),
}


def is_dark(palette: QPalette | None = None) -> bool:
    """True when the window background is dark (system dark mode or our dark palette)."""
    palette = palette or QGuiApplication.palette()
    return palette.color(QPalette.ColorRole.Window).lightness() < 128


def _system_prefers_dark() -> bool:
    hints = QGuiApplication.styleHints()
    scheme = getattr(hints, "colorScheme", None)
    if scheme is None:  # Qt < 6.5
        return is_dark()
    return bool(scheme() == Qt.ColorScheme.Dark)


def dark_palette() -> QPalette:
    """A calm dark palette for Fusion."""
    palette = QPalette()
    roles = {
        QPalette.ColorRole.Window: "#1f2228",
        QPalette.ColorRole.WindowText: "#e5e7eb",
        QPalette.ColorRole.Base: "#16181d",
        QPalette.ColorRole.AlternateBase: "#23262d",
        QPalette.ColorRole.ToolTipBase: "#2a2e36",
        QPalette.ColorRole.ToolTipText: "#e5e7eb",
        QPalette.ColorRole.Text: "#e5e7eb",
        QPalette.ColorRole.Button: "#2a2e36",
        QPalette.ColorRole.ButtonText: "#e5e7eb",
        QPalette.ColorRole.BrightText: "#ffffff",
        QPalette.ColorRole.Mid: "#3a3f48",
        QPalette.ColorRole.Midlight: "#30343c",
        QPalette.ColorRole.Dark: "#111317",
        QPalette.ColorRole.Highlight: ACCENT.name(),
        QPalette.ColorRole.HighlightedText: "#ffffff",
        QPalette.ColorRole.Link: "#60a5fa",
        QPalette.ColorRole.PlaceholderText: "#8b919c",
    }
    for role, colour in roles.items():
        palette.setColor(role, QColor(colour))
    for role in (QPalette.ColorRole.Text, QPalette.ColorRole.WindowText, QPalette.ColorRole.ButtonText):
        palette.setColor(QPalette.ColorGroup.Disabled, role, QColor("#6b7280"))
    return palette


def light_palette() -> QPalette:
    """Fusion's light palette with our accent."""
    palette = QPalette()
    roles = {
        QPalette.ColorRole.Window: "#f5f6f8",
        QPalette.ColorRole.WindowText: "#111827",
        QPalette.ColorRole.Base: "#ffffff",
        QPalette.ColorRole.AlternateBase: "#f0f2f5",
        QPalette.ColorRole.Text: "#111827",
        QPalette.ColorRole.Button: "#ffffff",
        QPalette.ColorRole.ButtonText: "#111827",
        QPalette.ColorRole.Mid: "#d1d5db",
        QPalette.ColorRole.Midlight: "#e5e7eb",
        QPalette.ColorRole.Highlight: ACCENT.name(),
        QPalette.ColorRole.HighlightedText: "#ffffff",
        QPalette.ColorRole.Link: "#2563eb",
        QPalette.ColorRole.PlaceholderText: "#9ca3af",
    }
    for role, colour in roles.items():
        palette.setColor(role, QColor(colour))
    return palette


STYLESHEET = f"""
QWidget#Sidebar {{ background: palette(alternate-base); border-right: 1px solid palette(mid); }}
QListWidget#Nav {{ background: transparent; border: none; outline: none; }}
QListWidget#Nav::item {{ padding: 0.55em 0.9em; border-radius: 6px; margin: 1px 6px; }}
QListWidget#Nav::item:selected {{ background: palette(highlight); color: palette(highlighted-text); }}
QListWidget#AgentList {{ border: 1px solid palette(mid); border-radius: 8px; background: palette(base); padding: 4px; }}
QListWidget#AgentList::item {{ padding: 0.45em 0.6em; border-radius: 5px; }}
QListWidget#AgentList::item:selected {{ background: palette(highlight); color: palette(highlighted-text); }}
QFrame#Card {{ background: palette(base); border: 1px solid palette(mid); border-radius: 8px; }}
QLabel#CardTitle {{ font-weight: 600; font-size: 11pt; }}
QLabel#PageTitle {{ font-size: 16pt; font-weight: 600; }}
QLabel#Muted {{ color: {MUTED}; }}
QLabel#StatValue {{ font-size: 15pt; font-weight: 600; }}
QLabel#StatCaption {{ color: {MUTED}; font-size: 8.5pt; }}
QLabel#Badge {{ border-radius: 4px; padding: 1px 6px; color: white; font-weight: 600; font-size: 8.5pt; }}
QPushButton {{ padding: 0.3em 0.9em; }}
QPushButton#Primary {{ background: {ACCENT.name()}; color: white; border: none; border-radius: 5px;
                      padding: 0.4em 1.1em; font-weight: 600; }}
QPushButton#Primary:disabled {{ background: palette(mid); color: palette(window); }}
QPushButton#Danger {{ background: {BAD}; color: white; border: none; border-radius: 5px;
                     padding: 0.4em 1.1em; font-weight: 600; }}
QPlainTextEdit#Log {{ font-family: monospace; }}
"""


def apply(app: QApplication, *, dark: bool | None = None) -> None:
    """Fusion + a palette matching the system scheme (or the one asked for) + the stylesheet."""
    app.setStyle("Fusion")
    dark = _system_prefers_dark() if dark is None else dark
    app.setPalette(dark_palette() if dark else light_palette())
    app.setStyleSheet(STYLESHEET)


def badge_style(colour: str) -> str:
    """The inline style for a coloured badge label."""
    return f"background: {colour}; color: white; border-radius: 4px; padding: 1px 6px; font-weight: 600;"


def monospace_font() -> QFont:
    """The system fixed-width font (logs, settings snippets)."""
    from PySide6.QtGui import QFontDatabase

    return QFontDatabase.systemFont(QFontDatabase.SystemFont.FixedFont)


def app_icon() -> QIcon:
    """The app icon, drawn (no binary assets): a rounded accent square with a prompt glyph."""
    icon = QIcon()
    for size in (16, 24, 32, 48, 64, 128, 256):
        pixmap = QPixmap(size, size)
        pixmap.fill(Qt.GlobalColor.transparent)
        painter = QPainter(pixmap)
        painter.setRenderHint(QPainter.RenderHint.Antialiasing)
        path = QPainterPath()
        path.addRoundedRect(QRectF(0, 0, size, size), size * 0.22, size * 0.22)
        painter.fillPath(path, QBrush(ACCENT))
        pen = painter.pen()
        pen.setColor(QColor("white"))
        pen.setWidthF(max(1.5, size * 0.09))
        pen.setCapStyle(Qt.PenCapStyle.RoundCap)
        pen.setJoinStyle(Qt.PenJoinStyle.RoundJoin)
        painter.setPen(pen)
        s = size
        painter.drawPolyline([_pt(s * 0.25, s * 0.32), _pt(s * 0.45, s * 0.5), _pt(s * 0.25, s * 0.68)])
        painter.drawLine(_pt(s * 0.52, s * 0.7), _pt(s * 0.76, s * 0.7))
        painter.end()
        icon.addPixmap(pixmap)
    return icon


def _pt(x: float, y: float):  # type: ignore[no-untyped-def]
    from PySide6.QtCore import QPointF

    return QPointF(x, y)
