"""A small chat box to try the served model, streaming."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from PySide6.QtCore import Qt, Signal
from PySide6.QtGui import QKeySequence, QShortcut, QTextCharFormat, QTextCursor
from PySide6.QtWidgets import QHBoxLayout, QLabel, QPlainTextEdit, QPushButton, QTextEdit, QVBoxLayout, QWidget

from launcher.ui import theme
from launcher.ui.server_process import ServerEndpoint
from launcher.ui.widgets.card import muted

if TYPE_CHECKING:  # httpx loads on the first message, not at start-up
    from launcher.ui.chat_worker import ChatResult, ChatWorker


class ChatPanel(QWidget):
    """Transcript + prompt box; enabled while a server is ready."""

    reply_finished = Signal(object)  # ChatResult

    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.endpoint: ServerEndpoint | None = None
        self.messages: list[dict[str, Any]] = []
        self.worker: ChatWorker | None = None
        self.max_tokens = 512
        self._reply: list[str] = []

        layout = QVBoxLayout(self)
        layout.setContentsMargins(20, 16, 20, 16)
        title = QLabel("Chat")
        title.setObjectName("PageTitle")
        self.info = muted("Start the server to chat with the model.")
        self.transcript = QTextEdit()
        self.transcript.setReadOnly(True)
        self.transcript.setAccessibleName("Conversation")
        self.prompt = QPlainTextEdit()
        self.prompt.setPlaceholderText("Ask something… (Ctrl+Enter sends)")
        self.prompt.setMaximumHeight(self.fontMetrics().height() * 5)
        self.prompt.setAccessibleName("Message")
        self.prompt.setTabChangesFocus(True)
        self.send_button = QPushButton("Send")
        self.send_button.setObjectName("Primary")
        self.send_button.clicked.connect(self.send)
        self.stop_button = QPushButton("Stop")
        self.stop_button.clicked.connect(self.stop)
        self.clear_button = QPushButton("New chat")
        self.clear_button.clicked.connect(self.clear)
        buttons = QVBoxLayout()
        buttons.addWidget(self.send_button)
        buttons.addWidget(self.stop_button)
        buttons.addWidget(self.clear_button)
        buttons.addStretch(1)
        row = QHBoxLayout()
        row.addWidget(self.prompt, 1)
        row.addLayout(buttons)
        self.stats = muted()
        layout.addWidget(title)
        layout.addWidget(self.info)
        layout.addWidget(self.transcript, 1)
        layout.addWidget(self.stats)
        layout.addLayout(row)
        for keys in ("Ctrl+Return", "Ctrl+Enter"):
            shortcut = QShortcut(QKeySequence(keys), self.prompt, activated=self.send)
            shortcut.setContext(Qt.ShortcutContext.WidgetShortcut)  # only while typing a message
        self.set_endpoint(None)

    def set_endpoint(self, endpoint: ServerEndpoint | None) -> None:
        """The server to talk to (None: disabled)."""
        if endpoint is None:
            self.stop()
        self.endpoint = endpoint
        self.info.setText(
            f"Talking to {endpoint.model} at {endpoint.base_url}" if endpoint else "Start the server to chat."
        )
        self._update_buttons()

    def _update_buttons(self) -> None:
        busy = self.worker is not None
        self.send_button.setEnabled(self.endpoint is not None and not busy)
        self.stop_button.setEnabled(busy)
        self.prompt.setEnabled(self.endpoint is not None)

    def send(self, text: str | None = None) -> None:
        """Send the prompt box's text (or `text`) and stream the reply."""
        if self.endpoint is None or self.worker is not None:
            return
        text = (text if isinstance(text, str) else self.prompt.toPlainText()).strip()
        if not text:
            return
        self.prompt.clear()
        self.messages.append({"role": "user", "content": text})
        self._append("You", text)
        self._append(self.endpoint.model, "")
        self._reply = []
        from launcher.ui.chat_worker import ChatWorker

        worker = ChatWorker(
            self.endpoint.base_url,
            self.endpoint.model,
            list(self.messages),
            api_key=self.endpoint.api_key,
            max_tokens=self.max_tokens,
            parent=self,
        )
        worker.delta.connect(self._delta)
        worker.completed.connect(self._completed)
        worker.failed.connect(self._failed)
        worker.finished.connect(self._thread_done)
        self.worker = worker
        self.stats.setText("Generating…")
        self._update_buttons()
        worker.start()

    def stop(self) -> None:
        """Stop the reply being generated."""
        if self.worker is not None:
            self.worker.stop()

    def clear(self) -> None:
        """Start a new conversation."""
        self.stop()
        self.messages = []
        self.transcript.clear()
        self.stats.setText("")

    def _append(self, who: str, text: str) -> None:
        cursor = self.transcript.textCursor()
        cursor.movePosition(QTextCursor.MoveOperation.End)
        if not self.transcript.document().isEmpty():
            cursor.insertBlock()
            cursor.insertBlock()
        bold = QTextCharFormat()
        bold.setFontWeight(700)
        bold.setForeground(theme.ACCENT if who != "You" else self.palette().text())
        cursor.insertText(who + "\n", bold)
        cursor.insertText(text, QTextCharFormat())
        self.transcript.setTextCursor(cursor)
        self.transcript.ensureCursorVisible()

    def _delta(self, text: str) -> None:
        self._reply.append(text)
        cursor = self.transcript.textCursor()
        cursor.movePosition(QTextCursor.MoveOperation.End)
        cursor.insertText(text, QTextCharFormat())
        self.transcript.setTextCursor(cursor)
        self.transcript.ensureCursorVisible()

    def _completed(self, result: ChatResult) -> None:
        self.messages.append({"role": "assistant", "content": result.text})
        parts = []
        if result.completion_tokens:
            parts.append(f"{result.completion_tokens} tokens")
        if result.time_to_first_token is not None:
            parts.append(f"first token after {result.time_to_first_token * 1000:.0f} ms")
        if result.tokens_per_second:
            parts.append(f"{result.tokens_per_second:.1f} tok/s")
        if result.stopped:
            parts.append("stopped")
        self.stats.setText(" · ".join(parts))
        self.reply_finished.emit(result)

    def _failed(self, message: str) -> None:
        self._delta(f"[{message}]")
        self.stats.setText(message)
        if self.messages and self.messages[-1]["role"] == "user":
            self.messages.pop()

    def _thread_done(self) -> None:
        worker, self.worker = self.worker, None
        if worker is not None:
            worker.deleteLater()
        self._update_buttons()

    def shutdown(self) -> None:
        """Stop and join the worker (app quit)."""
        worker = self.worker
        if worker is not None:
            worker.stop()
            worker.wait()
