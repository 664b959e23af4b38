"""The Server page's "Loaded models": one row per model the server has loaded, with its engine,
memory, context, activity, live decode tok/s and an Unload button.

The poller feeds it (`show_listing` from /launcher/models, `show_rates` from /metrics once a
second). Rows are kept by model id and updated in place, so a button is never rebuilt under the
pointer. Unloading runs off the UI thread; the row goes when the server has freed the model.
"""

from __future__ import annotations

import time

from PySide6.QtCore import Signal
from PySide6.QtWidgets import QHeaderView, QLabel, QPushButton, QTreeWidget, QTreeWidgetItem, QWidget

from launcher.ui import theme, workers
from launcher.ui.loaded_models import LoadedModelInfo, LoadedModels, decode_text, unload_model
from launcher.ui.server_process import ServerEndpoint
from launcher.ui.widgets.card import Card, muted

COLUMNS = ("Model", "Engine", "Memory", "Context", "Activity", "Decode", "")
MODEL, ENGINE, MEMORY, CONTEXT, ACTIVITY, DECODE, BUTTON = range(len(COLUMNS))
STOPPED_TEXT = "Start the server to see the models it has loaded."
BUSY_TIP = "Answering requests: it can be unloaded when they are done."


class LoadedModelsPanel(Card):
    """What the running server has loaded, with a way to free each model's memory."""

    unloaded = Signal(str)  # the server confirmed it unloaded this model
    unload_failed = Signal(str)  # why an unload was refused (also shown in the panel)

    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__("Loaded models", parent)
        self.endpoint: ServerEndpoint | None = None
        self.table = QTreeWidget()
        self.table.setHeaderLabels(list(COLUMNS))
        self.table.setRootIsDecorated(False)
        self.table.setAlternatingRowColors(True)
        self.table.setSelectionMode(QTreeWidget.SelectionMode.NoSelection)
        self.table.setAccessibleName("Loaded models")
        header = self.table.header()
        header.setStretchLastSection(False)
        for column in range(len(COLUMNS)):
            mode = QHeaderView.ResizeMode.Stretch if column == ACTIVITY else QHeaderView.ResizeMode.ResizeToContents
            header.setSectionResizeMode(column, mode)
        self.summary = muted()
        self.summary.setAccessibleName("Loaded models summary")
        self.error = QLabel()
        self.error.setWordWrap(True)
        self.error.setStyleSheet(f"color: {theme.BAD};")
        self.error.setAccessibleName("Unload error")
        self.body.addWidget(self.table)
        self.body.addWidget(self.summary)
        self.body.addWidget(self.error)
        self._items: dict[str, QTreeWidgetItem] = {}
        self._buttons: dict[str, QPushButton] = {}
        self._models: dict[str, LoadedModelInfo] = {}
        self._decode: dict[str, float] = {}
        self._unloading: set[str] = set()
        self._stale_before = 0.0  # listings asked for before the last unload finished still show the model
        self.reset()

    # -- what the window tells it ------------------------------------------------------------
    def set_endpoint(self, endpoint: ServerEndpoint | None) -> None:
        """The server the Unload buttons talk to (None: stopped, back to the empty look)."""
        self.endpoint = endpoint
        if endpoint is None:
            self.reset()

    def reset(self) -> None:
        """No server: no rows."""
        for name in list(self._items):
            self._remove_row(name)
        self._decode.clear()
        self._unloading.clear()
        self.summary.setText(STOPPED_TEXT)
        self.error.clear()
        self.error.hide()
        self._fit_height()

    def show_listing(self, listing: LoadedModels) -> None:
        """One answer of /launcher/models: add, update and drop rows to match it."""
        if listing.fetched_at < self._stale_before:
            return  # asked before an unload finished: it would bring the row back for a second
        current = {model.id: model for model in listing.models}
        for name in [name for name in self._items if name not in current]:
            self._remove_row(name)
        for model in listing.models:
            self._show_model(model)
        self.summary.setText(listing.summary_text)
        self.summary.setToolTip("Loads on request: " + ", ".join(listing.on_request) if listing.on_request else "")
        self._fit_height()

    def show_rates(self, decode_by_model: dict[str, float]) -> None:
        """Each model's live decode tok/s, from the per-model series of /metrics."""
        self._decode = dict(decode_by_model)
        for name, item in self._items.items():
            item.setText(DECODE, decode_text(self._decode.get(name)))

    def show_unreachable(self, message: str) -> None:
        """The listing failed: say so rather than show stale rows as current."""
        self.summary.setText(message)

    # -- reading it (tests, screenshots) -----------------------------------------------------
    def row_names(self) -> list[str]:
        """The models shown, top to bottom."""
        items = (self.table.topLevelItem(index) for index in range(self.table.topLevelItemCount()))
        return [item.text(MODEL) for item in items if item is not None]

    def row_text(self, name: str) -> list[str]:
        """The cells of `name`'s row, as shown."""
        item = self._items[name]
        return [item.text(column) for column in range(len(COLUMNS) - 1)]

    def unload_button(self, name: str) -> QPushButton:
        """The Unload button of `name`'s row."""
        return self._buttons[name]

    # -- unloading ---------------------------------------------------------------------------
    def unload(self, name: str) -> None:
        """Ask the server to free `name` (off the UI thread); the row goes when it has."""
        endpoint = self.endpoint
        if endpoint is None or name in self._unloading:
            return
        self._unloading.add(name)
        self.error.hide()
        if name in self._models:
            self._update_button(self._models[name])
        workers.run_in_background(
            unload_model,
            endpoint.url,
            name,
            api_key=endpoint.api_key,
            on_done=self._unload_done,
            on_failed=lambda message: self._unload_failed(name, message),
        )

    def _unload_done(self, name: str) -> None:
        self._unloading.discard(name)
        self._stale_before = time.monotonic()
        self._remove_row(name)
        self._decode.pop(name, None)
        self._fit_height()
        self.unloaded.emit(name)

    def _unload_failed(self, name: str, message: str) -> None:
        self._unloading.discard(name)
        self.error.setText(message)
        self.error.show()
        if name in self._models:
            self._update_button(self._models[name])
        self.unload_failed.emit(message)

    # -- rows --------------------------------------------------------------------------------
    def _show_model(self, model: LoadedModelInfo) -> None:
        item = self._items.get(model.id)
        if item is None:
            item = QTreeWidgetItem()
            self._insert_sorted(model.id, item)
            button = QPushButton("Unload")
            button.setAccessibleName(f"Unload {model.id}")
            button.clicked.connect(lambda _checked=False, name=model.id: self.unload(name))
            self.table.setItemWidget(item, BUTTON, button)
            self._items[model.id] = item
            self._buttons[model.id] = button
        self._models[model.id] = model
        cells = {
            MODEL: model.id,
            ENGINE: model.engine_text,
            MEMORY: model.memory_text,
            CONTEXT: model.context_text,
            ACTIVITY: model.activity_text,
            DECODE: decode_text(self._decode.get(model.id)),
        }
        for column, text in cells.items():
            item.setText(column, text)
        item.setToolTip(
            MEMORY, f"The advisor estimated {model.estimated_bytes:,} bytes" if model.estimated_bytes else ""
        )
        item.setToolTip(CONTEXT, f"{model.context_length:,} tokens per sequence, {model.parallel} in parallel")
        loaded_in = f"loaded in {model.load_seconds:.1f} s"
        item.setToolTip(MODEL, f"{model.format} · {loaded_in}" if model.format else loaded_in)
        self._update_button(model)

    def _insert_sorted(self, name: str, item: QTreeWidgetItem) -> None:
        names = self.row_names()
        position = next((index for index, shown in enumerate(names) if shown > name), len(names))
        self.table.insertTopLevelItem(position, item)

    def _update_button(self, model: LoadedModelInfo) -> None:
        button = self._buttons.get(model.id)
        if button is None:
            return
        unloading = model.id in self._unloading
        button.setEnabled(not model.busy and not unloading and self.endpoint is not None)
        button.setText("Unloading…" if unloading else "Unload")
        button.setToolTip(BUSY_TIP if model.busy else f"Free the memory {model.id} takes now.")

    def _remove_row(self, name: str) -> None:
        item = self._items.pop(name, None)
        self._buttons.pop(name, None)
        self._models.pop(name, None)
        if item is not None:
            self.table.takeTopLevelItem(self.table.indexOfTopLevelItem(item))

    def _fit_height(self) -> None:
        """As tall as its rows (the page scrolls, not the table); hidden when there are none."""
        rows = self.table.topLevelItemCount()
        self.table.setVisible(rows > 0)
        if rows:
            row_height = max(self.table.sizeHintForRow(0), self._buttons_height())
            header = self.table.header().sizeHint().height()
            self.table.setFixedHeight(header + rows * row_height + 2 * self.table.frameWidth() + 4)

    def _buttons_height(self) -> int:
        return max((button.sizeHint().height() for button in self._buttons.values()), default=0)
