"""Live gauges from /metrics and the server process: decode and prefill tok/s with a short history,
TTFT of the last requests, requests running/queued, KV cache use, process RAM, GPU/unified memory,
the prompt cache on disk (size of its budget, hit rate), speculative decoding (draft tokens accepted);
and the served model's predicted vs measured memory and tok/s once there is something to compare (read
from its own series: another model loaded beside it does not count).
"""

from __future__ import annotations

from collections import deque

from PySide6.QtCore import Signal
from PySide6.QtWidgets import QGridLayout, QHBoxLayout, QLabel, QProgressBar, QPushButton, QVBoxLayout, QWidget

from launcher.core.units import format_bytes
from launcher.ui.metrics import (
    Comparison,
    LiveSample,
    Measured,
    Prediction,
    compare,
    prompt_cache_summary,
    speculation_summary,
)
from launcher.ui.widgets.card import Card, StatTile, muted
from launcher.ui.widgets.sparkline import Sparkline

TTFT_HISTORY = 5


def _tps(value: float) -> str:
    return f"{value:.1f}" if value < 100 else f"{value:.0f}"


OFF_MARK = "⚠ "  # a prediction that missed by more than its tolerance
COMPARISON_LINES = 4  # memory (or "no prediction"), decode, prefill, all streams


class GaugesPanel(Card):
    """The live numbers; `update_sample` is called once a second by the poller's signal."""

    calibrate_requested = Signal()

    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__("Live", parent)
        self.measured: Measured | None = None
        self.prediction: Prediction | None = None
        self.model: str | None = None  # the model the prediction is for (others may be loaded beside it)
        self.speculative_mode: str | None = None  # the served config's --speculative (None: not known)
        self._ttfts: deque[float] = deque(maxlen=TTFT_HISTORY)
        self.last_sample: LiveSample | None = None

        grid = QGridLayout()
        grid.setHorizontalSpacing(24)
        grid.setVerticalSpacing(12)
        self.decode = StatTile("generated tok/s, all streams")
        self.decode_graph = Sparkline()
        self.prefill = StatTile("prefill tok/s")
        self.prefill_graph = Sparkline(colour="#8b5cf6")
        self.ttft = StatTile("time to first token")
        self.requests = StatTile("requests running / queued")
        self.total = StatTile("requests served")
        self.kv = StatTile("KV cache")
        self.kv_bar = QProgressBar()
        self.kv_bar.setTextVisible(False)
        self.kv_bar.setMaximumHeight(8)
        self.rss = StatTile("server process RAM")
        self.device = StatTile("memory in use")
        self.device_bar = QProgressBar()
        self.device_bar.setTextVisible(False)
        self.device_bar.setMaximumHeight(8)
        self.prompt_cache = StatTile("prompt cache on disk")
        self.prompt_cache.setToolTip(
            "Prompt prefixes kept on disk across restarts and model swaps: used / budget (--prompt-cache-gb),"
            " and how often a prompt that missed in memory was restored from disk."
        )
        self.speculation = StatTile("speculative decoding")
        self.speculation.setToolTip(
            "Draft tokens copied from the prompt and the reply so far (--speculative), checked in the same step:"
            " the share accepted, each one a token generated without a step of its own."
        )

        grid.addWidget(self._stack(self.decode, self.decode_graph), 0, 0)
        grid.addWidget(self._stack(self.prefill, self.prefill_graph), 0, 1)
        grid.addWidget(self.ttft, 0, 2)
        grid.addWidget(self.requests, 1, 0)
        grid.addWidget(self.total, 1, 1)
        grid.addWidget(self._stack(self.kv, self.kv_bar), 1, 2)
        grid.addWidget(self.rss, 2, 0)
        grid.addWidget(self._stack(self.device, self.device_bar), 2, 1, 1, 2)
        grid.addWidget(self.prompt_cache, 3, 0)
        grid.addWidget(self.speculation, 3, 1)
        for column in range(3):
            grid.setColumnStretch(column, 1)
        self.body.addLayout(grid)

        heading = QHBoxLayout()
        self.compare_title = QLabel("Predicted vs measured")
        self.compare_title.setObjectName("CardTitle")
        self.calibrate_button = QPushButton("Calibrate predictions")
        self.calibrate_button.setToolTip(
            "Run a short fixed workload on this server and keep how far the advisor's predictions were off,"
            " so its later predictions on this machine are corrected (launcher bench --calibrate)."
        )
        self.calibrate_button.clicked.connect(self.calibrate_requested)
        heading.addWidget(self.compare_title)
        heading.addStretch(1)
        heading.addWidget(self.calibrate_button)
        self.body.addLayout(heading)
        self.comparison_lines = [muted() for _ in range(COMPARISON_LINES)]
        for label in self.comparison_lines:
            self.body.addWidget(label)
        self.calibration_status = muted()
        self.body.addWidget(self.calibration_status)
        self.reset()

    @staticmethod
    def _stack(top: QWidget, bottom: QWidget) -> QWidget:
        box = QWidget()
        layout = QVBoxLayout(box)
        layout.setContentsMargins(0, 0, 0, 0)
        layout.setSpacing(4)
        layout.addWidget(top)
        layout.addWidget(bottom)
        return box

    def reset(self) -> None:
        """Back to the idle look (server stopped)."""
        self.measured = None
        self._ttfts.clear()
        self.last_sample = None
        for tile in (
            self.decode,
            self.prefill,
            self.ttft,
            self.requests,
            self.total,
            self.kv,
            self.rss,
            self.device,
            self.prompt_cache,
            self.speculation,
        ):
            tile.set_value("–", "")
        self.decode_graph.clear()
        self.prefill_graph.clear()
        self.kv_bar.setValue(0)
        self.device_bar.setValue(0)
        self._update_comparison()

    def set_prediction(self, prediction: Prediction | None, model: str | None = None) -> None:
        """The advisor's numbers for the model now served, which is measured by its own series."""
        self.prediction = prediction
        self.model = model
        if self.last_sample is not None:
            self.measured = Measured.from_sample(self.last_sample, model)
        self._update_comparison()

    def set_speculative_mode(self, mode: str | None) -> None:
        """The served config's --speculative, so an idle tile can say "off" when speculation is off."""
        self.speculative_mode = mode
        if self.last_sample is not None:
            self.speculation.set_value(*speculation_summary(self.last_sample.snapshot, mode))

    def set_unreachable(self, message: str) -> None:
        """The last poll failed (server busy or gone): say so instead of showing stale numbers as live."""
        self.set_title(f"Live · {message}")

    def update_sample(self, sample: LiveSample) -> None:
        """Show one poll."""
        self.set_title("Live")
        self.last_sample = sample
        self.measured = Measured.from_sample(sample, self.model)
        decode = sample.decode_tps or sample.generated_tps
        measured = self.measured
        per_stream = f"per stream {_tps(measured.decode_tps)}" if measured.decode_tps else ""
        self.decode.set_value(_tps(decode), per_stream)
        self.decode_graph.add(decode)
        per_request = f"since start {_tps(measured.prefill_tps)}" if measured.prefill_tps else ""
        self.prefill.set_value(_tps(sample.prefill_tps), per_request)
        self.prefill_graph.add(sample.prefill_tps)
        if sample.ttft_recent is not None:
            self._ttfts.append(sample.ttft_recent)
        if self._ttfts:
            last = self._ttfts[-1]
            history = ", ".join(f"{t * 1000:.0f}" for t in list(self._ttfts)[:-1])
            self.ttft.set_value(f"{last * 1000:.0f} ms", f"earlier: {history} ms" if history else "")
        self.requests.set_value(f"{sample.requests_running} / {sample.requests_waiting}")
        failed = f"{sample.requests_failed} failed" if sample.requests_failed else ""
        self.total.set_value(f"{sample.requests_total:,}", failed)
        if sample.kv_total_tokens:
            self.kv.set_value(
                f"{sample.kv_usage_ratio:.0%}",
                f"{sample.kv_used_tokens:,} of {sample.kv_total_tokens:,} tokens",
            )
        else:
            self.kv.set_value(f"{sample.kv_usage_ratio:.0%}")
        self.kv_bar.setValue(round(sample.kv_usage_ratio * 100))
        memory = sample.memory
        self.rss.set_value(format_bytes(memory.rss_bytes) if memory.rss_bytes is not None else "–")
        if memory.device_used_bytes is not None and memory.device_total_bytes:
            ratio = memory.device_used_bytes / memory.device_total_bytes
            self.device.set_value(
                f"{format_bytes(memory.device_used_bytes)} / {format_bytes(memory.device_total_bytes)}",
                memory.device_label,
            )
            self.device_bar.setValue(round(ratio * 100))
        self.prompt_cache.set_value(*prompt_cache_summary(sample.snapshot))
        self.speculation.set_value(*speculation_summary(sample.snapshot, self.speculative_mode))
        self._update_comparison()

    def set_calibration_status(self, text: str, *, busy: bool = False) -> None:
        """What the last calibration did (or that one runs now)."""
        self.calibration_status.setText(text)
        self.calibrate_button.setEnabled(not busy and self.last_sample is not None)

    def comparisons(self) -> list[Comparison]:
        """The lines shown under "Predicted vs measured" (for tests and the screenshots)."""
        if self.prediction is None and self.last_sample is None:
            return [
                Comparison("Start the server to set the advisor's memory and speed predictions against measurements.")
            ]
        return compare(self.prediction, self.measured)

    def _update_comparison(self) -> None:
        lines = self.comparisons()
        for label, line in zip(self.comparison_lines, [*lines, *[None] * COMPARISON_LINES], strict=False):
            text = "" if line is None else (OFF_MARK if line.off else "") + line.text
            label.setText(text)
            label.setVisible(bool(text))
            label.setProperty("off", bool(line and line.off))
            label.setToolTip(
                "Outside the prediction's tolerance: calibrate to correct this machine's predictions."
                if line is not None and line.off
                else ""
            )
        self.calibrate_button.setEnabled(self.last_sample is not None)
