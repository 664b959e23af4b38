"""The Models page: catalog + local library in one searchable list with fit badges, size and predicted
tok/s; Hub search; download with progress, speed, ETA, cancel and resume; import a local file; and the
recommendation card for the selected model with a "Serve" button.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

from PySide6.QtCore import Qt, Signal
from PySide6.QtWidgets import (
    QCheckBox,
    QFileDialog,
    QHBoxLayout,
    QLabel,
    QLineEdit,
    QProgressBar,
    QPushButton,
    QScrollArea,
    QSplitter,
    QVBoxLayout,
    QWidget,
)

from launcher.core.units import format_bytes
from launcher.hardware.machine import Machine
from launcher.ui import workers
from launcher.ui.download_progress import progress_text
from launcher.ui.panels.recommendation import RecommendationPanel
from launcher.ui.widgets.card import Card, muted
from launcher.ui.widgets.model_list import ModelList

if TYPE_CHECKING:  # the catalog, advisor and Hub client load in the background, after the window shows
    from launcher.catalog.library import LibraryEntry
    from launcher.catalog.progress import ProgressEvent
    from launcher.core.model_types import LocalModel
    from launcher.ui.download_worker import DownloadWorker
    from launcher.ui.model_rows import ModelRow


def _build_rows(machine: Machine, this_machine: bool, generation: int) -> tuple[int, list[ModelRow]]:
    from launcher.ui.model_rows import build_rows

    return generation, build_rows(machine, this_machine=this_machine)


def _search_hub(query: str, machine: Machine) -> list[ModelRow]:
    from launcher.ui.hub_rows import search_rows

    return search_rows(query, machine)


class DownloadBox(Card):
    """The selected model's actions: Serve, Download with progress/speed/ETA, Cancel."""

    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__("", parent)
        row = QHBoxLayout()
        self.serve_button = QPushButton("Serve this model")
        self.serve_button.setObjectName("Primary")
        self.download_button = QPushButton("Download")
        self.cancel_button = QPushButton("Cancel download")
        row.addWidget(self.serve_button)
        row.addWidget(self.download_button)
        row.addWidget(self.cancel_button)
        row.addStretch(1)
        self.body.addLayout(row)
        self.bar = QProgressBar()
        self.bar.setRange(0, 1000)
        self.bar.setTextVisible(False)
        self.bar.setAccessibleName("Download progress")
        self.status = muted()
        self.body.addWidget(self.bar)
        self.body.addWidget(self.status)
        self.set_idle()

    def set_idle(self, message: str = "") -> None:
        """No download running."""
        self.bar.hide()
        self.cancel_button.hide()
        self.status.setText(message)
        self.status.setVisible(bool(message))

    def set_running(self, text: str) -> None:
        """A download is running."""
        self.bar.show()
        self.cancel_button.show()
        self.cancel_button.setEnabled(True)
        self.status.show()
        self.status.setText(text)


class ModelsPanel(QWidget):
    """List + recommendation + actions. `serve_requested(ModelRow)` when the user wants to run one."""

    serve_requested = Signal(object)
    rows_changed = Signal(list)
    hub_results_changed = Signal(list)

    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.machine: Machine | None = None
        self.this_machine = True
        self.rows: list[ModelRow] = []
        self.hub_results: list[ModelRow] = []
        self.download: DownloadWorker | None = None
        self._download_key: str | None = None
        self._generation = 0  # newest refresh; older scans finishing late are dropped
        # A model just downloaded or imported: its row is selected once the rescan shows it, so
        # Serve runs exactly that file.
        self._select_path: Path | None = None

        outer = QVBoxLayout(self)
        outer.setContentsMargins(20, 16, 20, 16)
        title = QLabel("Models")
        title.setObjectName("PageTitle")
        outer.addWidget(title)

        self.search = QLineEdit()
        self.search.setPlaceholderText("Filter models… (Enter searches the Hugging Face Hub)")
        self.search.setClearButtonEnabled(True)
        self.search.setAccessibleName("Search models")
        self.search.textChanged.connect(self._refilter)
        self.search.returnPressed.connect(self.search_hub)
        self.only_local = QCheckBox("On this computer")
        self.only_local.toggled.connect(self._refilter)
        self.hub_button = QPushButton("Search Hub")
        self.hub_button.clicked.connect(self.search_hub)
        self.import_button = QPushButton("Import file…")
        self.import_button.clicked.connect(self.import_file)
        bar = QHBoxLayout()
        bar.addWidget(self.search, 1)
        bar.addWidget(self.only_local)
        bar.addWidget(self.hub_button)
        bar.addWidget(self.import_button)
        outer.addLayout(bar)
        self.message = muted("Reading the catalog and your models…")
        outer.addWidget(self.message)

        self.list = ModelList()
        self.list.row_selected.connect(self._row_selected)
        self.list.row_activated.connect(self._activated)
        self.recommendation = RecommendationPanel()
        self.actions = DownloadBox()
        self.actions.serve_button.clicked.connect(self._serve_clicked)
        self.actions.download_button.clicked.connect(self.start_download)
        self.actions.cancel_button.clicked.connect(self.cancel_download)
        right = QWidget()
        right_layout = QVBoxLayout(right)
        right_layout.setContentsMargins(0, 0, 0, 0)
        right_layout.addWidget(self.actions)
        right_layout.addWidget(self.recommendation)
        right_layout.addStretch(1)
        scroll = QScrollArea()
        scroll.setWidgetResizable(True)
        scroll.setFrameShape(QScrollArea.Shape.NoFrame)
        scroll.setHorizontalScrollBarPolicy(Qt.ScrollBarPolicy.ScrollBarAlwaysOff)
        scroll.setMinimumWidth(self.fontMetrics().horizontalAdvance("M") * 28)
        scroll.setWidget(right)
        splitter = QSplitter(Qt.Orientation.Horizontal)
        splitter.addWidget(self.list)
        splitter.addWidget(scroll)
        splitter.setStretchFactor(0, 5)
        splitter.setStretchFactor(1, 4)
        splitter.setChildrenCollapsible(False)
        outer.addWidget(splitter, 1)
        self._row_selected(None)

    # -- data ------------------------------------------------------------------------------
    def set_machine(self, machine: Machine, *, this_machine: bool = True) -> None:
        """Recompute every row for this machine (in the background)."""
        self.machine = machine
        self.this_machine = this_machine
        self.refresh()

    def refresh(self) -> None:
        """Rescan the library and recompute verdicts."""
        if self.machine is None:
            return
        self._generation += 1
        workers.run_in_background(
            _build_rows,
            self.machine,
            self.this_machine,
            self._generation,
            on_done=self._rows_ready,
            on_failed=self._show_error,
        )

    def _rows_ready(self, result: tuple[int, list[ModelRow]]) -> None:
        generation, rows = result
        if generation != self._generation:
            return
        self.rows = rows
        on_disk = sum(r.downloaded for r in rows)
        self.message.setText(f"{len(rows)} models · {on_disk} on this computer · fit and speed for this machine")
        self._refilter()
        if self._select_path is not None:
            wanted, self._select_path = self._select_path, None
            row = next((r for r in rows if r.local is not None and Path(r.local.model.path) == wanted), None)
            if row is not None:
                self.list.select_key(row.key)
        self.rows_changed.emit(rows)

    def _show_error(self, text: str) -> None:
        self.message.setText(text)

    def _refilter(self, *_: object) -> None:
        self.list.set_rows(self.rows + self.hub_results, self.search.text(), self.only_local.isChecked())

    def row(self, key: str) -> ModelRow | None:
        """The row with this key (catalog:<id>, local:<name>, hub:<repo>)."""
        return next((r for r in self.rows + self.hub_results if r.key == key), None)

    # -- hub search and import -------------------------------------------------------------
    def search_hub(self) -> None:
        """Search the Hub for the query text (GGUF/MLX/EXL repos)."""
        query = self.search.text().strip()
        if not query or self.machine is None:
            return
        self.hub_button.setEnabled(False)
        self.message.setText(f"Searching the Hugging Face Hub for “{query}”…")
        workers.run_in_background(_search_hub, query, self.machine, on_done=self._hub_done, on_failed=self._hub_failed)

    def _hub_done(self, rows: list[ModelRow]) -> None:
        self.hub_button.setEnabled(True)
        self.hub_results = rows
        self.message.setText(f"{len(rows)} repos on the Hub match." if rows else "Nothing on the Hub matches.")
        self._refilter()
        self.hub_results_changed.emit(rows)

    def _hub_failed(self, text: str) -> None:
        self.hub_button.setEnabled(True)
        self.message.setText(f"Hub search failed: {text}")
        self.hub_results_changed.emit([])

    def import_file(self) -> None:
        """Pick a GGUF file (or a model folder) to add to the library without copying it."""
        path, _ = QFileDialog.getOpenFileName(self, "Import a model file", "", "GGUF models (*.gguf);;All files (*)")
        if path:
            self.import_path(path)

    def import_path(self, path: str) -> None:
        """Add `path` to the library (background) and select it."""
        from launcher.catalog.library import add_imported

        def done(entry: LibraryEntry) -> None:
            self.message.setText(f"Imported {entry.name}.")
            self._select_path = Path(entry.model.path)
            self.refresh()

        workers.run_in_background(add_imported, path, on_done=done, on_failed=self._show_error)

    # -- selection and actions -------------------------------------------------------------
    def _row_selected(self, row: ModelRow | None) -> None:
        self.recommendation.set_row(row)
        downloading = self.download is not None
        self.actions.serve_button.setEnabled(row is not None and row.serve_spec is not None)
        can_download = row is not None and not row.downloaded and (row.catalog is not None or row.hub_repo)
        self.actions.download_button.setVisible(bool(can_download))
        self.actions.download_button.setEnabled(bool(can_download) and not downloading)
        if row is not None and can_download:
            size = f" ({format_bytes(row.size_bytes)})" if row.size_bytes else ""
            quant = row.recommendation.choice.quant if row.recommendation else (row.hub_quant or "")
            self.actions.download_button.setText(f"Download {quant}{size}".replace("  ", " "))
        if row is not None and row.serve_spec is None and not can_download and row.note:
            self.actions.set_idle(row.note)

    def _activated(self, row: ModelRow | None) -> None:
        if row is not None and row.serve_spec is not None:
            self.serve_requested.emit(row)

    def _serve_clicked(self) -> None:
        row = self.list.selected_row()
        if row is not None and row.serve_spec is not None:
            self.serve_requested.emit(row)

    def start_download(self) -> None:
        """Pull the selected model (the advisor's format and quant for catalog models)."""
        row = self.list.selected_row()
        if row is None or self.download is not None:
            return
        fmt = quant = None
        if row.catalog is not None and row.recommendation is not None:
            spec, fmt, quant = row.catalog.id, row.recommendation.choice.format, row.recommendation.choice.quant
        elif row.hub_repo:
            spec, quant = row.hub_repo, row.hub_quant
        else:
            return
        from launcher.ui.download_worker import DownloadWorker

        worker = DownloadWorker(spec, fmt=fmt, quant=quant, machine=self.machine, parent=self)
        worker.progress.connect(self._progress)
        worker.succeeded.connect(self._download_done)
        worker.failed.connect(self._download_failed)
        worker.cancelled.connect(self._download_cancelled)
        worker.finished.connect(self._download_thread_ended)
        self.download = worker
        self._download_key = row.key
        self.actions.download_button.setEnabled(False)
        self.actions.set_running(f"Preparing the download of {row.title}…")
        self.actions.bar.setValue(0)
        worker.start()

    def cancel_download(self) -> None:
        """Stop the running download; the partial file is kept so Download resumes it."""
        if self.download is not None:
            self.download.cancel()
            self.actions.cancel_button.setEnabled(False)
            self.actions.status.setText("Cancelling…")

    def _progress(self, event: ProgressEvent) -> None:
        self.actions.bar.setValue(int(event.fraction * 1000))
        self.actions.status.setText(progress_text(event))

    def _download_done(self, model: LocalModel) -> None:
        self.actions.set_idle(f"Downloaded {model.name}. It is ready to serve.")
        self._select_path = Path(model.path)
        self.refresh()

    def _download_failed(self, text: str) -> None:
        self.actions.set_idle(text)

    def _download_cancelled(self, _text: str) -> None:
        self.actions.set_idle("Download cancelled. The partial file is kept: press Download to resume it.")

    def _download_thread_ended(self) -> None:
        worker, self.download = self.download, None
        if worker is not None:
            worker.deleteLater()
        self._row_selected(self.list.selected_row())

    def shutdown(self) -> None:
        """Cancel a running download and wait for its thread (app quit)."""
        if self.download is not None:
            self.download.cancel_and_wait()
