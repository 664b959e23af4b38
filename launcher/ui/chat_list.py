"""`ConversationList`: the Chat page's left column, the saved conversations.

New chat, a search box (title or any message, through `ChatStore.conversations(search=...)`),
and for the selected conversation Rename (edited in place), Delete (after a question) and
Export to Markdown or JSON. The list owns no data: every change goes to the `ChatStore` at once,
so what it shows is what is on disk. The two dialogs it opens are attributes (`ask_save_path`,
`confirm_delete`) so tests answer them without a modal dialog.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING

from PySide6.QtCore import Qt, QTimer, Signal
from PySide6.QtWidgets import (
    QAbstractItemView,
    QFileDialog,
    QHBoxLayout,
    QLineEdit,
    QListWidget,
    QListWidgetItem,
    QMenu,
    QMessageBox,
    QPushButton,
    QVBoxLayout,
    QWidget,
)

from launcher.ui.widgets.card import muted

if TYPE_CHECKING:
    from launcher.chat.store import ChatStore, Conversation

log = logging.getLogger(__name__)

ID_ROLE = Qt.ItemDataRole.UserRole
SEARCH_DELAY_MS = 150  # one query per pause in typing, not one per key


def _ask_save_path(parent: QWidget, title: str, suggested: str, filters: str) -> str:
    path, _ = QFileDialog.getSaveFileName(parent, title, suggested, filters)
    return path


def _confirm_delete(parent: QWidget, title: str) -> bool:
    answer = QMessageBox.question(
        parent, "Delete conversation", f"Delete “{title}” and all its messages? This cannot be undone."
    )
    return answer == QMessageBox.StandardButton.Yes


def when_text(updated: float, now: float | None = None) -> str:
    """A short "when" for the list: the time today, the weekday this week, else the date."""
    now = time.time() if now is None else now
    stamp, today = time.localtime(updated), time.localtime(now)
    if stamp[:3] == today[:3]:
        return time.strftime("%H:%M", stamp)
    if now - updated < 6 * 86400:
        return time.strftime("%a", stamp)
    return time.strftime("%Y-%m-%d", stamp)


def export_file_name(title: str, suffix: str) -> str:
    """A file name from a conversation title ("Plan the trip.md")."""
    safe = "".join(c if c.isalnum() or c in " -_." else "_" for c in title).strip(" .") or "conversation"
    return f"{safe[:60]}.{suffix}"


class ConversationList(QWidget):
    """The saved conversations, newest first. `current_changed(id or None)` when the choice changes."""

    current_changed = Signal(object)  # int | None
    new_requested = Signal()
    exported = Signal(str)  # the path written

    def __init__(self, store: ChatStore, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.store = store
        self.ask_save_path: Callable[[QWidget, str, str, str], str] = _ask_save_path
        self.confirm_delete: Callable[[QWidget, str], bool] = _confirm_delete
        self._current: int | None = None
        self._filling = False

        layout = QVBoxLayout(self)
        layout.setContentsMargins(0, 0, 0, 0)
        self.new_button = QPushButton("New chat")
        self.new_button.setObjectName("Primary")
        self.new_button.setAccessibleName("New chat")
        self.new_button.clicked.connect(self.new_requested.emit)
        self.search = QLineEdit()
        self.search.setPlaceholderText("Search chats…")
        self.search.setAccessibleName("Search chats")
        self.search.setClearButtonEnabled(True)
        self._search_timer = QTimer(self, singleShot=True, interval=SEARCH_DELAY_MS)
        self._search_timer.timeout.connect(self.refresh)
        self.search.textChanged.connect(lambda _text: self._search_timer.start())
        self.list = QListWidget()
        self.list.setAccessibleName("Conversations")
        # Long titles end in "…" (the tooltip has them whole) rather than scrolling the list sideways.
        self.list.setHorizontalScrollBarPolicy(Qt.ScrollBarPolicy.ScrollBarAlwaysOff)
        self.list.setTextElideMode(Qt.TextElideMode.ElideRight)
        self.list.setEditTriggers(
            QAbstractItemView.EditTrigger.EditKeyPressed | QAbstractItemView.EditTrigger.DoubleClicked
        )
        self.list.currentItemChanged.connect(self._item_changed)
        self.list.itemChanged.connect(self._item_edited)
        self.list.setContextMenuPolicy(Qt.ContextMenuPolicy.CustomContextMenu)
        self.list.customContextMenuRequested.connect(self._context_menu)
        self.empty_note = muted("No conversations yet.")
        self.rename_button = QPushButton("Rename")
        self.rename_button.clicked.connect(self.rename_current)
        self.delete_button = QPushButton("Delete")
        self.delete_button.clicked.connect(self.delete_current)
        self.export_button = QPushButton("Export")
        self.export_button.setAccessibleName("Export conversation")
        export_menu = QMenu(self.export_button)
        self.export_markdown_action = export_menu.addAction("Markdown (.md)…", lambda: self.export_current("md"))
        self.export_json_action = export_menu.addAction("JSON (.json)…", lambda: self.export_current("json"))
        self.export_button.setMenu(export_menu)
        actions = QHBoxLayout()
        actions.setSpacing(4)
        for button in (self.rename_button, self.delete_button, self.export_button):
            actions.addWidget(button)
        self.status = muted()
        self.status.setWordWrap(True)
        layout.addWidget(self.new_button)
        layout.addWidget(self.search)
        layout.addWidget(self.list, 1)
        layout.addWidget(self.empty_note)
        layout.addLayout(actions)
        layout.addWidget(self.status)
        self._update_actions()

    def shutdown(self) -> None:
        """No more queries: the store is about to close (app quit)."""
        self._search_timer.stop()
        self.search.blockSignals(True)

    # -- reading -----------------------------------------------------------------------------
    def refresh(self) -> None:
        """Read the list from the store again (search applied), keeping the selection when it is listed."""
        query = self.search.text().strip() or None
        try:
            conversations = self.store.conversations(search=query)
        except Exception as err:  # a broken database: say so here, the page stays usable
            log.warning("could not list conversations: %s", err)
            self.status.setText(f"Could not read the chats: {err}")
            conversations = []
        self._filling = True
        try:
            self.list.clear()
            for conversation in conversations:
                self.list.addItem(self._item(conversation))
        finally:
            self._filling = False
        self.empty_note.setText("No chat matches." if query else "No conversations yet.")
        self.empty_note.setVisible(not conversations)
        if self._current is not None and not self.select(self._current, notify=False):
            # Filtered out by the search: the page keeps showing it, the list shows no selection.
            self.list.setCurrentRow(-1)
        self._update_actions()

    def _item(self, conversation: Conversation) -> QListWidgetItem:
        item = QListWidgetItem(conversation.title)
        item.setData(ID_ROLE, conversation.id)
        item.setToolTip(f"{conversation.title}\n{when_text(conversation.updated)}")
        item.setFlags(item.flags() | Qt.ItemFlag.ItemIsEditable)
        return item

    def ids(self) -> list[int]:
        """The listed conversation ids, top to bottom."""
        return [int(self.list.item(row).data(ID_ROLE)) for row in range(self.list.count())]

    def titles(self) -> list[str]:
        """The listed titles, top to bottom."""
        return [self.list.item(row).text() for row in range(self.list.count())]

    def current_id(self) -> int | None:
        """The conversation the page shows."""
        return self._current

    def select(self, conversation_id: int | None, *, notify: bool = True) -> bool:
        """Select a conversation (False when the list does not show it)."""
        self._current = conversation_id
        found = False
        for row in range(self.list.count()):
            if self.list.item(row).data(ID_ROLE) == conversation_id:
                self._filling = True
                try:
                    self.list.setCurrentRow(row)
                finally:
                    self._filling = False
                found = True
                break
        self._update_actions()
        if notify:
            self.current_changed.emit(conversation_id)
        return found

    def _item_changed(self, item: QListWidgetItem | None, _previous: QListWidgetItem | None) -> None:
        if self._filling or item is None:
            return
        conversation_id = int(item.data(ID_ROLE))
        if conversation_id != self._current:
            self._current = conversation_id
            self._update_actions()
            self.current_changed.emit(conversation_id)

    def _update_actions(self) -> None:
        has = self._current is not None
        for button in (self.rename_button, self.delete_button, self.export_button):
            button.setEnabled(has)

    def _current_item(self) -> QListWidgetItem | None:
        item = self.list.currentItem()
        return item if item is not None and item.data(ID_ROLE) == self._current else None

    def _context_menu(self, position: object) -> None:
        item = self.list.itemAt(position)  # type: ignore[arg-type]
        if item is None:
            return
        self.list.setCurrentItem(item)
        menu = QMenu(self)
        menu.addAction("Rename", self.rename_current)
        menu.addAction("Export as Markdown…", lambda: self.export_current("md"))
        menu.addAction("Export as JSON…", lambda: self.export_current("json"))
        menu.addSeparator()
        menu.addAction("Delete", self.delete_current)
        menu.exec(self.list.viewport().mapToGlobal(position))  # type: ignore[arg-type]

    # -- changing ----------------------------------------------------------------------------
    def rename_current(self) -> None:
        """Edit the selected title in place; Enter saves it (`_item_edited`)."""
        item = self._current_item()
        if item is not None:
            self.list.setFocus()
            self.list.editItem(item)

    def _item_edited(self, item: QListWidgetItem) -> None:
        if self._filling:
            return
        conversation_id = int(item.data(ID_ROLE))
        title = item.text().strip()
        if not title:  # an emptied title is a slip: put the stored one back
            self._filling = True
            try:
                item.setText(self.store.get(conversation_id).title)
            finally:
                self._filling = False
            return
        self.store.rename(conversation_id, title)
        self.refresh()
        if conversation_id == self._current:
            self.current_changed.emit(conversation_id)  # the page shows the new title

    def delete_current(self) -> None:
        """Delete the selected conversation after asking; the next one (or none) becomes current."""
        item = self._current_item()
        if item is None or self._current is None:
            return
        if not self.confirm_delete(self, item.text()):
            return
        row = self.list.row(item)
        self.store.delete(self._current)
        self._current = None
        self.refresh()
        following = self.ids()
        self.select(following[min(row, len(following) - 1)] if following else None)

    def export_current(self, kind: str) -> Path | None:
        """Export the selected conversation as Markdown ("md") or JSON ("json") to a file the user picks."""
        if self._current is None:
            return None
        conversation = self.store.get(self._current)
        filters = "Markdown (*.md)" if kind == "md" else "JSON (*.json)"
        chosen = self.ask_save_path(self, "Export conversation", export_file_name(conversation.title, kind), filters)
        if not chosen:
            return None
        path = Path(chosen)
        if not path.suffix:
            path = path.with_suffix(f".{kind}")
        text = self.store.export_markdown(conversation.id) if kind == "md" else self.store.export_json(conversation.id)
        try:
            path.write_text(text, encoding="utf-8")
        except OSError as err:
            self.status.setText(f"Could not write {path}: {err.strerror or err}")
            return None
        self.status.setText(f"Exported to {path}")
        self.exported.emit(str(path))
        return path
