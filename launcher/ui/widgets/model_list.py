"""`ModelList`: the searchable list of ModelRows with a two-line name column and fit badges."""

from __future__ import annotations

from typing import TYPE_CHECKING

from PySide6.QtCore import QModelIndex, QRect, QSize, Qt, Signal
from PySide6.QtGui import QColor, QPainter, QPalette
from PySide6.QtWidgets import QStyle, QStyledItemDelegate, QStyleOptionViewItem, QTreeWidget, QTreeWidgetItem

from launcher.core.units import format_bytes
from launcher.ui import theme

if TYPE_CHECKING:
    from launcher.ui.model_rows import ModelRow

ROW_ROLE = Qt.ItemDataRole.UserRole + 1
SUBTITLE_ROLE = Qt.ItemDataRole.UserRole + 2
BADGE_ROLE = Qt.ItemDataRole.UserRole + 3
COLUMNS = ["Model", "Fit here", "Size", "Predicted", "Status"]


class _Delegate(QStyledItemDelegate):
    """Column 0: title over a muted subtitle. Column 1: a coloured badge."""

    def sizeHint(self, option: QStyleOptionViewItem, index: QModelIndex) -> QSize:
        size = super().sizeHint(option, index)
        extra = 24 if index.column() == 1 else 0  # the badge's padding
        return QSize(size.width() + extra, int(option.fontMetrics.height() * 2.6))

    def paint(self, painter: QPainter, option: QStyleOptionViewItem, index: QModelIndex) -> None:
        column = index.column()
        if column not in (0, 1):
            super().paint(painter, option, index)
            return
        self.initStyleOption(option, index)
        text, option.text = option.text, ""
        style = option.widget.style() if option.widget else None
        if style is not None:
            style.drawControl(QStyle.ControlElement.CE_ItemViewItem, option, painter, option.widget)
        painter.save()
        selected = bool(option.state & QStyle.StateFlag.State_Selected)
        role = QPalette.ColorRole.HighlightedText if selected else QPalette.ColorRole.Text
        rect = option.rect.adjusted(8, 0, -6, 0)
        if column == 0:
            metrics = option.fontMetrics
            title_font = option.font
            title_font.setBold(True)
            painter.setFont(title_font)
            painter.setPen(option.palette.color(role))
            top = rect.top() + (rect.height() - 2 * metrics.height()) // 2
            title_rect = QRect(rect.left(), top, rect.width(), metrics.height())
            painter.drawText(
                title_rect,
                Qt.AlignmentFlag.AlignLeft | Qt.AlignmentFlag.AlignVCenter,
                metrics.elidedText(text, Qt.TextElideMode.ElideRight, rect.width()),
            )
            title_font.setBold(False)
            painter.setFont(title_font)
            muted = QColor(option.palette.color(role)) if selected else QColor(theme.MUTED)
            painter.setPen(muted)
            subtitle = str(index.data(SUBTITLE_ROLE) or "")
            sub_rect = QRect(rect.left(), top + metrics.height(), rect.width(), metrics.height())
            painter.drawText(
                sub_rect,
                Qt.AlignmentFlag.AlignLeft | Qt.AlignmentFlag.AlignVCenter,
                metrics.elidedText(subtitle, Qt.TextElideMode.ElideRight, rect.width()),
            )
        else:
            colour = QColor(str(index.data(BADGE_ROLE) or theme.MUTED))
            metrics = option.fontMetrics
            width = metrics.horizontalAdvance(text) + 14
            height = metrics.height() + 4
            badge = QRect(rect.left(), rect.center().y() - height // 2, min(width, rect.width()), height)
            painter.setRenderHint(QPainter.RenderHint.Antialiasing)
            painter.setPen(Qt.PenStyle.NoPen)
            painter.setBrush(colour)
            painter.drawRoundedRect(badge, 4, 4)
            painter.setPen(QColor("white"))
            painter.drawText(badge, Qt.AlignmentFlag.AlignCenter, text)
        painter.restore()


def predicted_text(row: ModelRow) -> str:
    """'35–56 tok/s' or '–'."""
    if row.decode_tps is None:
        return "–"
    low, high = row.decode_tps
    if high < 10:
        return f"{low:.1f}–{high:.1f} tok/s"
    return f"{low:.0f}–{high:.0f} tok/s"


class ModelList(QTreeWidget):
    """Rows of models; `row_selected(ModelRow | None)` when the selection changes."""

    row_selected = Signal(object)
    row_activated = Signal(object)

    def __init__(self, parent=None) -> None:  # type: ignore[no-untyped-def]
        super().__init__(parent)
        self.setHeaderLabels(COLUMNS)
        self.setRootIsDecorated(False)
        self.setUniformRowHeights(True)
        self.setItemDelegate(_Delegate(self))
        self.setAccessibleName("Models")
        self.setSortingEnabled(False)
        self.rows: list[ModelRow] = []
        self.currentItemChanged.connect(self._current_changed)
        self.itemActivated.connect(lambda item, _col: self.row_activated.emit(item.data(0, ROW_ROLE)))
        header = self.header()
        header.setStretchLastSection(False)
        header.setSectionResizeMode(0, header.ResizeMode.Stretch)
        for column in range(1, len(COLUMNS)):
            header.setSectionResizeMode(column, header.ResizeMode.ResizeToContents)

    def set_rows(self, rows: list[ModelRow], query: str = "", only_local: bool = False) -> None:
        """Replace the rows, keeping the selection on the same model when it is still shown."""
        current = self.selected_row()
        self.rows = rows
        self.blockSignals(True)
        self.clear()
        keep = None
        for row in rows:
            if query and row.kind != "hub" and not row.matches(query):
                continue
            if only_local and not row.downloaded:
                continue
            label, colour = theme.VERDICT_STYLE.get(row.verdict or "", ("no prediction", theme.MUTED))
            status = "On disk" if row.downloaded else ("On the Hub" if row.kind == "hub" else "Download")
            if row.catalog is not None and row.catalog.starter:
                status = "Built in"
            item = QTreeWidgetItem(
                [row.title, label, format_bytes(row.size_bytes) if row.size_bytes else "–", predicted_text(row), status]
            )
            item.setData(0, ROW_ROLE, row)
            item.setData(0, SUBTITLE_ROLE, row.subtitle)
            item.setData(1, BADGE_ROLE, colour)
            item.setToolTip(0, row.note or row.subtitle)
            item.setTextAlignment(2, Qt.AlignmentFlag.AlignRight | Qt.AlignmentFlag.AlignVCenter)
            self.addTopLevelItem(item)
            if current is not None and row.key == current.key:
                keep = item
        self.blockSignals(False)
        if keep is not None:
            self.setCurrentItem(keep)
        elif self.topLevelItemCount():
            self.setCurrentItem(self.topLevelItem(0))
        else:
            self.row_selected.emit(None)

    def selected_row(self) -> ModelRow | None:
        """The row under the cursor."""
        item = self.currentItem()
        return item.data(0, ROW_ROLE) if item is not None else None

    def select_key(self, key: str) -> bool:
        """Select the row with this key; False when it is not shown."""
        for index in range(self.topLevelItemCount()):
            item = self.topLevelItem(index)
            if item.data(0, ROW_ROLE).key == key:
                self.setCurrentItem(item)
                return True
        return False

    def _current_changed(self, current: QTreeWidgetItem | None, _previous: object) -> None:
        self.row_selected.emit(current.data(0, ROW_ROLE) if current is not None else None)
