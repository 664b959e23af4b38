"""The recommendation card: the engine + format + quant the advisor picked for the selected model, why,
the memory breakdown (weights | KV at context | overhead | free), the predicted speed and the alternatives.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from PySide6.QtCore import Qt
from PySide6.QtWidgets import QHBoxLayout, QLabel, QTreeWidget, QTreeWidgetItem, QWidget

from launcher.core.units import format_bytes
from launcher.ui import theme
from launcher.ui.widgets.card import Card, badge, muted
from launcher.ui.widgets.memory_bar import MemoryBar

if TYPE_CHECKING:
    from launcher.advisor import FitResult, Option, SpeedEstimate
    from launcher.ui.model_rows import ModelRow


def verdict_badge_text(verdict: str | None) -> tuple[str, str]:
    """(label, colour) for a fit verdict; unknown verdicts are grey."""
    if verdict is None:
        return ("No prediction", theme.MUTED)
    return theme.VERDICT_STYLE.get(verdict, (verdict, theme.MUTED))


def speed_text(speed: SpeedEstimate) -> str:
    """'decode 35–56 tok/s · prefill 900–1800 tok/s'."""
    text = (
        f"decode {speed.decode_low:.0f}–{speed.decode_high:.0f} tok/s · "
        f"prefill {speed.prefill_low:.0f}–{speed.prefill_high:.0f} tok/s"
    )
    return f"{text} · {speed.calibration_note}" if speed.calibration_note else text


class RecommendationPanel(Card):
    """Shows one ModelRow's advice; empty until a model is selected."""

    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__("", parent)
        self.row: ModelRow | None = None
        header = QHBoxLayout()
        self.name = QLabel("Select a model")
        self.name.setObjectName("PageTitle")
        self.name.setWordWrap(True)
        self.badge = badge("", theme.MUTED)
        self.badge.hide()
        header.addWidget(self.name, 1)
        header.addWidget(self.badge, 0, Qt.AlignmentFlag.AlignTop)
        self.body.addLayout(header)
        self.description = muted("Pick a model on the left to see how it would run on this machine.")
        self.body.addWidget(self.description)

        self.choice = QLabel()
        self.choice.setObjectName("CardTitle")
        self.choice.setWordWrap(True)
        self.reasons = QLabel()
        self.reasons.setWordWrap(True)
        self.reasons.setTextFormat(Qt.TextFormat.RichText)
        self.reasons.setTextInteractionFlags(Qt.TextInteractionFlag.TextSelectableByMouse)
        self.speed = QLabel()
        self.speed.setWordWrap(True)
        self.memory_title = QLabel("Memory at this context")
        self.memory_title.setObjectName("CardTitle")
        self.memory_title.setWordWrap(True)
        self.bars: list[MemoryBar] = []
        self._bars_box = QWidget()
        from PySide6.QtWidgets import QVBoxLayout

        self._bars_layout = QVBoxLayout(self._bars_box)
        self._bars_layout.setContentsMargins(0, 0, 0, 0)
        self.advice = QLabel()
        self.advice.setWordWrap(True)
        self.advice.setStyleSheet(f"color: {theme.WARN};")
        self.alternatives_title = QLabel("Alternatives")
        self.alternatives_title.setObjectName("CardTitle")
        self.alternatives = QTreeWidget()
        self.alternatives.setHeaderLabels(["Option", "Fit", "Size", "Decode tok/s"])
        self.alternatives.setRootIsDecorated(False)
        self.alternatives.setAlternatingRowColors(True)
        self.alternatives.setAccessibleName("Alternatives")
        for widget in (
            self.choice,
            self.reasons,
            self.speed,
            self.memory_title,
            self._bars_box,
            self.advice,
            self.alternatives_title,
            self.alternatives,
        ):
            self.body.addWidget(widget)
        self._show_details(False)

    def _show_details(self, on: bool) -> None:
        for widget in (self.choice, self.reasons, self.speed, self.memory_title, self._bars_box):
            widget.setVisible(on)
        self.advice.setVisible(on and bool(self.advice.text()))

    def set_row(self, row: ModelRow | None) -> None:
        """Show the advice for `row`."""
        self.row = row
        self.alternatives.clear()
        self.advice.setText("")
        if row is None:
            self.name.setText("Select a model")
            self.badge.hide()
            self._show_details(False)
            self.alternatives_title.hide()
            self.alternatives.hide()
            return
        self.name.setText(row.title)
        label, colour = verdict_badge_text(row.verdict)
        self.badge.setText(label)
        self.badge.setStyleSheet(theme.badge_style(colour))
        self.badge.show()
        description = row.catalog.description if row.catalog else row.subtitle
        if row.note:
            description += f"\n{row.note}"
        self.description.setText(description)
        rec = row.recommendation
        if rec is not None:
            self._show_option(rec.choice, rec.context, list(rec.reasons))
            self._fill_alternatives(list(rec.alternatives))
            self._show_measured(row, rec.choice.speed)
        elif row.plan is not None:
            reasons = [row.plan.reason]
            self.choice.setText(f"{row.plan.engine} · {row.subtitle}")
            self._show_fit(row.plan.fit, reasons, row.speed)
            self.alternatives_title.hide()
            self.alternatives.hide()
            self._show_measured(row, row.speed)
        else:
            self._show_details(False)
            self.alternatives_title.hide()
            self.alternatives.hide()

    def _show_measured(self, row: ModelRow, speed: SpeedEstimate | None) -> None:
        """Beside the prediction, what a calibration run of this model measured here, if one did."""
        from launcher.ui.model_rows import measured_text

        text = measured_text(row, speed)
        if text:
            self.speed.setText(f"{self.speed.text()}<br>{text}.")

    def _show_option(self, option: Option, context: int, reasons: list[str]) -> None:
        self.choice.setText(f"Recommended: {option.label} · context {context // 1024}k")
        self._show_fit(option.fit, reasons, option.speed)

    def _show_fit(self, fit: FitResult, reasons: list[str], speed: SpeedEstimate | None) -> None:
        self._show_details(True)
        self.reasons.setText("".join(f"• {reason}<br>" for reason in reasons).removesuffix("<br>"))
        self.speed.setText(
            f"<b>Predicted speed:</b> {speed_text(speed)}<br><span style='color:{theme.MUTED}'>"
            f"limited by {speed.bound}</span>"
            if speed
            else "No speed prediction."
        )
        for bar in self.bars:
            self._bars_layout.removeWidget(bar)
            bar.hide()
            bar.deleteLater()
        self.bars = []
        for device in fit.devices:
            bar = MemoryBar()
            bar.set_parts(
                device.device, device.weights, device.kv_cache, device.overhead, device.free, device.checkpoints
            )
            self._bars_layout.addWidget(bar)
            self.bars.append(bar)
        sequences = f", {fit.parallel} parallel" if fit.parallel > 1 else ""
        draft = f" + draft model {format_bytes(fit.draft.used)} ({fit.draft.name})" if fit.draft else ""
        self.memory_title.setText(
            f"Memory at {fit.context // 1024}k context{sequences}: {format_bytes(fit.needed_bytes)}{draft}"
        )
        self.advice.setText("\n".join(fit.advice))
        self.advice.setVisible(bool(fit.advice))

    def _fill_alternatives(self, options: list[Option]) -> None:
        self.alternatives_title.setVisible(bool(options))
        self.alternatives.setVisible(bool(options))
        for option in options:
            label, colour = verdict_badge_text(option.fit.verdict)
            item = QTreeWidgetItem(
                [
                    option.label + ("" if option.runnable_here else " (not runnable here)"),
                    label,
                    format_bytes(option.weights_bytes),
                    f"{option.speed.decode_low:.0f}–{option.speed.decode_high:.0f}",
                ]
            )
            item.setForeground(1, theme_colour(colour))
            tip = option.unavailable_reason or option.fit.label
            item.setToolTip(0, tip)
            self.alternatives.addTopLevelItem(item)
        for column in range(4):
            self.alternatives.resizeColumnToContents(column)
        rows = max(1, len(options))
        row_height = self.alternatives.sizeHintForRow(0) if options else self.fontMetrics().height()
        header = self.alternatives.header().sizeHint().height()
        self.alternatives.setFixedHeight(header + rows * row_height + 2 * self.alternatives.frameWidth() + 4)


def theme_colour(colour: str):  # type: ignore[no-untyped-def]
    """A QBrush for a hex colour (tree items)."""
    from PySide6.QtGui import QBrush, QColor

    return QBrush(QColor(colour))
