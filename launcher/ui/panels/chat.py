"""The Chat page: saved conversations, streamed answers, files dropped into the prompt, and MCP tools.

Left, the conversations (`launcher.ui.chat_list`, kept in `launcher.chat.store`); right, the
transcript (`launcher.ui.chat_view`), the chat's own settings (model, system prompt, temperature,
output limit), and the prompt with Send and Stop. A turn runs `launcher.chat.session.run_turn` on
a `TurnWorker` thread: the view streams its text, each tool call shows as a card that waits for
Allow once / Always allow / Deny, and the worker saves the turn as it goes.

The tools are those of the window's `McpHost` (the enabled servers of mcp.json); they go to the
server as OpenAI `tools`, which it renders in the model's own template. Nothing runs without the
user's OK: a call waits for the card's answer, and "Always allow" holds for this page's lifetime.

When no server runs a model that follows instructions, the page offers the tiny demo chat model
(SmolLM2-135M-Instruct, shipped with the app) and says what it is: a demo, with a pointer to the
model recommended for this machine.
"""

from __future__ import annotations

import base64
import contextlib
import html
import logging
import mimetypes
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from PySide6.QtCore import Qt, QThread, QTimer, Signal
from PySide6.QtGui import QDragEnterEvent, QDropEvent, QKeySequence, QShortcut
from PySide6.QtWidgets import (
    QCheckBox,
    QComboBox,
    QDoubleSpinBox,
    QFormLayout,
    QFrame,
    QHBoxLayout,
    QLabel,
    QPlainTextEdit,
    QPushButton,
    QSizePolicy,
    QSpinBox,
    QSplitter,
    QVBoxLayout,
    QWidget,
)

from launcher.chat.store import DEFAULT_TITLE, Attachment, ChatSettings, ChatStore, ChatStoreError, Conversation
from launcher.chat.store import auto_title as title_from
from launcher.ui import workers
from launcher.ui.chat_list import ConversationList
from launcher.ui.chat_markdown import plain_tooltip
from launcher.ui.chat_view import ChatView
from launcher.ui.server_process import ServerEndpoint
from launcher.ui.widgets.card import muted

if TYPE_CHECKING:
    from launcher.chat.mcp_host import McpHost, ToolApprovals
    from launcher.ui.chat_worker import TurnOutcome, TurnWorker

log = logging.getLogger(__name__)
SHUTDOWN_WAIT_MS = 3000  # quitting waits this long for a stopped turn (it ends within ~0.1 s)
_LEFT_RUNNING: list[QThread] = []  # turns that outlived their page's shutdown (wedged): kept alive

MAX_TEXT_BYTES = 200 * 1024  # a text file larger than this would crowd the model's context
MAX_IMAGE_BYTES = 20 * 1024 * 1024
IMAGE_TYPES = {
    ".png": "image/png",
    ".jpg": "image/jpeg",
    ".jpeg": "image/jpeg",
    ".gif": "image/gif",
    ".webp": "image/webp",
}
SETTINGS_SAVE_DELAY_MS = 400  # one write per pause in typing the system prompt


# -- dropped files -----------------------------------------------------------------------------
@dataclass(frozen=True)
class Dropped:
    """What a dropped file became: an attachment, or a note saying why it was not attached."""

    attachment: Attachment | None = None
    note: str | None = None


def read_dropped(path: Path, *, takes_images: bool) -> Dropped:
    """A dropped file as an attachment: text files (UTF-8, up to 200 KB) go into the prompt, images only
    to a model that takes them; anything else is refused with a note."""
    name = path.name
    try:
        size = path.stat().st_size
        if not path.is_file():
            return Dropped(note=f"{name}: only files can be attached, not folders.")
        suffix = path.suffix.lower()
        if suffix in IMAGE_TYPES:
            if not takes_images:
                return Dropped(
                    note=f"{name} was not attached: this model does not take images. "
                    "Serve a model that does (a vision model) to ask about pictures."
                )
            if size > MAX_IMAGE_BYTES:
                return Dropped(note=f"{name} was not attached: images up to {MAX_IMAGE_BYTES // 1024**2} MB.")
            data = base64.b64encode(path.read_bytes()).decode("ascii")
            return Dropped(Attachment(name=name, kind="image", mime=IMAGE_TYPES[suffix], data_base64=data, size=size))
        if size > MAX_TEXT_BYTES:
            return Dropped(note=f"{name} was not attached: text files up to {MAX_TEXT_BYTES // 1024} KB.")
        raw = path.read_bytes()
    except OSError as err:
        return Dropped(note=f"{name} could not be read: {err.strerror or err}.")
    text = _as_text(raw)
    if text is None:
        return Dropped(note=f"{name} was not attached: only text files and images can be attached.")
    mime = mimetypes.guess_type(name)[0] or "text/plain"
    return Dropped(Attachment(name=name, kind="text", mime=mime, text=text, size=size))


def _as_text(raw: bytes) -> str | None:
    if b"\x00" in raw[:8192]:  # binary formats hold NUL bytes early; text never does
        return None
    try:
        return raw.decode("utf-8-sig")
    except UnicodeDecodeError:
        return None


# -- the answering starter --------------------------------------------------------------------
def chat_starter_path() -> Path | None:
    """The tiny demo chat model shipped with the app, if this install has it."""
    from launcher.catalog.starter import chat_starter

    return chat_starter()


def serves_file(endpoint: ServerEndpoint | None, path: Path | None) -> bool:
    """True when the server runs exactly this model file."""
    if endpoint is None or path is None:
        return False
    served = endpoint.serving.get("model_path")
    return served is not None and Path(str(served)) == path


def follows_instructions(endpoint: ServerEndpoint | None) -> bool:
    """Whether the served model can hold a chat. The one we know cannot is the embedded starter, a
    pretrained model without a chat template; any other model is trusted to."""
    if endpoint is None:
        return False
    from launcher.catalog.starter import starter_name, starter_path

    return endpoint.model != starter_name() and not serves_file(endpoint, starter_path())


# -- the page ---------------------------------------------------------------------------------
class ElidedLabel(QLabel):
    """A one-line label that shortens its text with "…" to the width it gets (a long chat title must not
    widen the window); `text()` is the whole text, also the tooltip."""

    def __init__(self, text: str = "", parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self._full = ""
        self.setTextFormat(Qt.TextFormat.PlainText)  # a title is the user's or the model's text, not markup
        self.setSizePolicy(QSizePolicy.Policy.Ignored, QSizePolicy.Policy.Preferred)
        self.setMinimumWidth(self.fontMetrics().horizontalAdvance("M") * 4)
        self.setText(text)

    def setText(self, text: str) -> None:
        """Show `text`, shortened to the label's width."""
        self._full = text
        self.setToolTip(plain_tooltip(text))  # a chat's title comes from its text: never read as markup
        self._elide()

    def text(self) -> str:
        """The whole text, not the shortened one shown."""
        return self._full

    def resizeEvent(self, event: object) -> None:
        """Shorten again for the new width."""
        super().resizeEvent(event)  # type: ignore[arg-type]
        self._elide()

    def _elide(self) -> None:
        shown = self.fontMetrics().elidedText(self._full, Qt.TextElideMode.ElideRight, max(self.width(), 1))
        super().setText(shown)


class ChatSettingsRow(QFrame):
    """The chat's own settings: system prompt, temperature, output limit (shown by "Chat settings")."""

    changed = Signal()

    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.setObjectName("Card")
        form = QFormLayout(self)
        form.setContentsMargins(12, 8, 12, 8)
        self.system_prompt = QPlainTextEdit()
        self.system_prompt.setPlaceholderText("How the model should behave in this chat (optional)")
        self.system_prompt.setAccessibleName("System prompt")
        self.system_prompt.setMaximumHeight(self.fontMetrics().height() * 4)
        self.system_prompt.setTabChangesFocus(True)
        self.temperature = QDoubleSpinBox()
        self.temperature.setAccessibleName("Temperature")
        self.temperature.setRange(-0.05, 2.0)
        self.temperature.setSingleStep(0.05)
        self.temperature.setSpecialValueText("model default")  # the minimum stands for "not set"
        self.max_tokens = QSpinBox()
        self.max_tokens.setAccessibleName("Maximum answer length")
        self.max_tokens.setRange(0, 1_000_000)
        self.max_tokens.setSingleStep(256)
        self.max_tokens.setSpecialValueText("server default")
        self.max_tokens.setSuffix(" tokens")
        form.addRow("System prompt", self.system_prompt)
        form.addRow("Temperature", self.temperature)
        form.addRow("Answer length", self.max_tokens)
        self._loading = False
        self.system_prompt.textChanged.connect(self._changed)
        self.temperature.valueChanged.connect(self._changed)
        self.max_tokens.valueChanged.connect(self._changed)

    def _changed(self, *_: object) -> None:
        if not self._loading:
            self.changed.emit()

    def load(self, system_prompt: str, settings: ChatSettings) -> None:
        """Show a chat's settings (no `changed`)."""
        self._loading = True
        try:
            self.system_prompt.setPlainText(system_prompt)
            self.temperature.setValue(settings.temperature if settings.temperature is not None else -0.05)
            self.max_tokens.setValue(settings.max_tokens or 0)
        finally:
            self._loading = False

    def values(self, base: ChatSettings | None = None) -> tuple[str, ChatSettings]:
        """(system prompt, settings) as the form shows them; fields the form lacks are kept from `base`."""
        temperature = self.temperature.value()
        update = {
            "temperature": None if temperature < 0 else round(temperature, 2),
            "max_tokens": self.max_tokens.value() or None,
        }
        return self.system_prompt.toPlainText(), (base or ChatSettings()).model_copy(update=update)


class ChatPanel(QWidget):
    """The Chat page; the window tells it the endpoint (`set_endpoint`) and the MCP host (`set_mcp_host`)."""

    reply_finished = Signal(object)  # TurnOutcome
    serve_starter_requested = Signal(object)  # Path of the demo chat model
    show_models_requested = Signal()  # the recommendation for this machine
    show_settings_requested = Signal()  # the MCP servers section
    _tools_changed = Signal()  # from the host's thread; handled on the UI thread

    def __init__(self, parent: QWidget | None = None, *, store: ChatStore | None = None) -> None:
        super().__init__(parent)
        self.endpoint: ServerEndpoint | None = None
        self.worker: TurnWorker | None = None
        self.mcp_host: McpHost | None = None
        self._mcp_error: str | None = None
        self.conversation: Conversation | None = None
        self.max_tokens: int | None = None  # a cap when the chat leaves the length to the server (screenshots)
        # "Always allow": by (server, tool), for this run of the MCP servers (set_mcp_host makes it a
        # ToolApprovals, which a restart of the servers empties); without a host no tool runs at all.
        self.always_allowed: ToolApprovals | set[str] = set()
        self.pending: list[Attachment] = []
        self.editing_id: int | None = None
        self.model_entries: dict[str, dict[str, Any]] = {}  # /v1/models of the current server, by id
        self._server_state = "stopped"
        self._closed = False
        self._starter: Path | None = None
        self._starter_looked = False
        self.store, store_problem = self._open_store(store)

        self.list = ConversationList(self.store)
        self.list.current_changed.connect(self.open_conversation)
        self.list.new_requested.connect(self.new_chat)
        self.view = ChatView()
        self.view.setAccessibleName("Conversation")
        self.view.edit_requested.connect(self.edit_message)
        self.view.regenerate_requested.connect(self.regenerate)
        self.view.tool_decided.connect(self._decided)

        title = QLabel("Chat")
        title.setObjectName("PageTitle")
        self.chat_title = ElidedLabel()
        self.chat_title.setObjectName("CardTitle")
        self.model_box = QComboBox()
        self.model_box.setAccessibleName("Model")
        self.model_box.setMinimumContentsLength(18)
        self.model_box.currentIndexChanged.connect(self._model_chosen)
        self.settings_button = QPushButton("Chat settings")
        self.settings_button.setCheckable(True)
        self.settings_row = ChatSettingsRow()
        self.settings_row.setVisible(False)
        self.settings_button.toggled.connect(self.settings_row.setVisible)
        self.settings_row.changed.connect(lambda: self._settings_timer.start())
        self._settings_timer = QTimer(self, singleShot=True, interval=SETTINGS_SAVE_DELAY_MS)
        self._settings_timer.timeout.connect(self._save_settings)
        self.tools_toggle = QCheckBox("Tools")
        self.tools_toggle.setAccessibleName("Use MCP tools")
        self.tools_toggle.setChecked(True)
        self.tools_label = QLabel()
        self.tools_label.setObjectName("Muted")
        self.tools_label.setTextFormat(Qt.TextFormat.RichText)
        self.tools_label.linkActivated.connect(lambda _link: self.show_settings_requested.emit())
        self._tools_changed.connect(self._update_tools)
        header = QHBoxLayout()
        header.addWidget(title)
        header.addSpacing(12)
        header.addWidget(self.chat_title, 1)
        header.addWidget(self.tools_toggle)
        header.addWidget(self.tools_label)
        header.addSpacing(8)
        header.addWidget(QLabel("Model"))
        header.addWidget(self.model_box)
        header.addWidget(self.settings_button)

        self.info = muted("Start the server to chat with the model.")
        self.info.setTextFormat(Qt.TextFormat.RichText)
        self.info.linkActivated.connect(self._info_link)
        self.starter_button = QPushButton("Chat with the tiny demo model (SmolLM2-135M, offline)")
        self.starter_button.setObjectName("Primary")
        self.starter_button.clicked.connect(self._serve_starter)
        self.starter_button.setVisible(False)
        self.store_note = muted(store_problem or "")
        self.store_note.setVisible(bool(store_problem))
        self.note = muted()  # dropped files, edits, what the last action did
        self.note.setVisible(False)
        self.attachments_label = muted()
        self.clear_attachments_button = QPushButton("Remove files")
        self.clear_attachments_button.clicked.connect(self.clear_attachments)
        attachments = QHBoxLayout()
        attachments.addWidget(self.attachments_label, 1)
        attachments.addWidget(self.clear_attachments_button)
        self.cancel_edit_button = QPushButton("Cancel edit")
        self.cancel_edit_button.clicked.connect(self.cancel_edit)
        attachments.addWidget(self.cancel_edit_button)

        self.prompt = QPlainTextEdit()
        self.prompt.setPlaceholderText("Ask something… (Ctrl+Enter sends; drop text files or images here)")
        self.prompt.setMaximumHeight(self.fontMetrics().height() * 5)
        self.prompt.setAccessibleName("Message")
        self.prompt.setTabChangesFocus(True)
        self.prompt.setAcceptDrops(False)  # files dropped on it go to the page, which attaches them
        self.send_button = QPushButton("Send")
        self.send_button.setObjectName("Primary")
        self.send_button.clicked.connect(lambda: self.send())
        self.stop_button = QPushButton("Stop")
        self.stop_button.clicked.connect(self.stop)
        buttons = QVBoxLayout()
        buttons.addWidget(self.send_button)
        buttons.addWidget(self.stop_button)
        buttons.addStretch(1)
        row = QHBoxLayout()
        row.addWidget(self.prompt, 1)
        row.addLayout(buttons)
        self.stats = muted()

        right = QWidget()
        column = QVBoxLayout(right)
        column.setContentsMargins(0, 0, 0, 0)
        column.addLayout(header)
        column.addWidget(self.settings_row)
        column.addWidget(self.info)
        column.addWidget(self.starter_button, 0, Qt.AlignmentFlag.AlignLeft)
        column.addWidget(self.store_note)
        column.addWidget(self.view, 1)
        column.addWidget(self.stats)
        column.addWidget(self.note)
        column.addLayout(attachments)
        column.addLayout(row)
        splitter = QSplitter(Qt.Orientation.Horizontal)
        splitter.addWidget(self.list)
        splitter.addWidget(right)
        splitter.setStretchFactor(1, 1)
        splitter.setSizes([self.fontMetrics().horizontalAdvance("M") * 16, 800])
        splitter.setChildrenCollapsible(False)
        layout = QVBoxLayout(self)
        layout.setContentsMargins(20, 16, 20, 16)
        layout.addWidget(splitter)
        self.setAcceptDrops(True)
        for keys in ("Ctrl+Return", "Ctrl+Enter"):
            shortcut = QShortcut(QKeySequence(keys), self.prompt, activated=lambda: self.send())
            shortcut.setContext(Qt.ShortcutContext.WidgetShortcut)  # only while typing a message

        self.list.refresh()
        ids = self.list.ids()
        if ids:
            self.list.select(ids[0])
        else:
            self.new_chat()
        self._update_attachments()
        self._update_tools()
        self.set_endpoint(None)

    @staticmethod
    def _open_store(store: ChatStore | None) -> tuple[ChatStore, str | None]:
        if store is not None:
            return store, None
        try:
            return ChatStore(), None
        except ChatStoreError as err:
            # The page still chats; nothing is kept, and the note says why.
            log.warning("chats file unusable: %s", err)
            return ChatStore(Path(":memory:")), f"Chats are not saved this time: {err}"

    # -- server ----------------------------------------------------------------------------
    def set_endpoint(self, endpoint: ServerEndpoint | None) -> None:
        """The server to talk to (None: disabled)."""
        if endpoint is None:
            self.stop()
        self.endpoint = endpoint
        self.model_entries = {}
        if endpoint is not None:
            self._server_state = "ready"
            self._fill_models([{"id": endpoint.model}] if endpoint.model else [])
            workers.run_in_background(_list_models, endpoint, on_done=self._models_listed, on_failed=log.info)
        elif self._server_state == "ready":
            self._server_state = "stopped"
        self._update_info()
        self._update_buttons()

    def set_server_state(self, state: str) -> None:
        """The window's server: "starting", "ready", "stopping" or "stopped" (hides the demo offer while loading)."""
        self._server_state = state
        self._update_info()

    def _models_listed(self, entries: list[dict[str, Any]]) -> None:
        if self.endpoint is not None and entries:
            self._fill_models(entries)

    def _fill_models(self, entries: list[dict[str, Any]]) -> None:
        self.model_entries = {str(entry["id"]): entry for entry in entries if entry.get("id")}
        self.model_box.blockSignals(True)
        try:
            self.model_box.clear()
            for model_id in self.model_entries:
                self.model_box.addItem(model_id)
            self._select_model()
        finally:
            self.model_box.blockSignals(False)
        self.model_box.setEnabled(self.model_box.count() > 1)

    def _select_model(self) -> None:
        wanted = self.conversation.model if self.conversation is not None else None
        index = self.model_box.findText(wanted) if wanted else -1
        self.model_box.setCurrentIndex(index if index >= 0 else 0)

    def current_model(self) -> str | None:
        """The model this chat's next answer comes from."""
        return self.model_box.currentText() or (self.endpoint.model if self.endpoint is not None else None)

    def _model_chosen(self, _index: int) -> None:
        model = self.model_box.currentText()
        if self.conversation is not None and model and model != self.conversation.model:
            self.conversation = self.store.save(self.conversation.model_copy(update={"model": model}))

    def takes_images(self) -> bool:
        """Whether the chosen model takes images (what its /v1/models entry says)."""
        from launcher.chat.session import accepts_images

        entry = self.model_entries.get(self.current_model() or "")
        return entry is not None and accepts_images(entry)

    def _update_info(self) -> None:
        endpoint = self.endpoint
        # A file lookup: not at app start, only once the page is seen.
        starter = self._find_starter() if self._starter_looked or self.isVisible() else None
        on_starter = serves_file(endpoint, starter)
        offer = (
            starter is not None
            and self._server_state not in ("starting", "stopping")
            and not on_starter
            and not follows_instructions(endpoint)
        )
        model = html.escape(endpoint.model) if endpoint is not None else ""
        if on_starter and endpoint is not None:
            text = (
                f"Talking to {model}, a tiny demo model that runs anywhere: it answers, but weakly. "
                "For real work, serve <a href='models'>the model recommended for this machine</a>."
            )
        elif endpoint is not None and not follows_instructions(endpoint):
            text = (
                f"{model} is a pretrained model without chat training: its answers will wander. "
                "Chat with a model that follows instructions, such as "
                "<a href='models'>the one recommended for this machine</a>."
            )
        elif endpoint is not None:
            text = f"Talking to the server at {html.escape(endpoint.base_url)}"
        elif self._server_state == "starting":
            text = "The server is loading the model…"
        else:
            text = "Start the server to chat, or try the tiny demo model right away."
            if starter is None:
                text = "Start the server to chat (Models page: pick a model and Serve)."
        self.info.setText(text)
        self.starter_button.setVisible(offer)

    def _find_starter(self) -> Path | None:
        if not self._starter_looked:  # a file lookup; once per page is enough
            self._starter_looked = True
            self._starter = chat_starter_path()
        return self._starter

    def _serve_starter(self) -> None:
        starter = self._find_starter()
        if starter is not None:
            self.starter_button.setVisible(False)
            self.info.setText("Starting the tiny demo model…")
            self.serve_starter_requested.emit(starter)

    def _info_link(self, link: str) -> None:
        if link == "models":
            self.show_models_requested.emit()

    # -- MCP tools -------------------------------------------------------------------------
    def set_mcp_host(self, host: McpHost | None) -> None:
        """The running MCP servers whose tools the model may call (None: no tools)."""
        from launcher.chat.mcp_host import ToolApprovals

        self.mcp_host = host
        if isinstance(self.always_allowed, ToolApprovals):
            self.always_allowed.set_host(host)  # the same object a running turn holds
        else:
            self.always_allowed = ToolApprovals(host)
        if host is not None:
            host.on_change(self._host_changed)
        self._update_tools()

    def set_mcp_error(self, message: str | None) -> None:
        """mcp.json could not be read (None: it could)."""
        self._mcp_error = message
        self._update_tools()

    def _host_changed(self, *_: object) -> None:
        # Queued to the UI thread; the page may be gone when the app quits while a server changes state.
        with contextlib.suppress(RuntimeError):
            self._tools_changed.emit()

    def tools_summary(self) -> str:
        """ "3 tools from 2 servers", or what keeps tools from being there."""
        host = self.mcp_host
        states = host.states() if host is not None else {}
        if self._mcp_error:
            return "mcp.json has a problem"
        if not states:
            return "No MCP servers"
        if all(state.state == "stopped" for state in states.values()):
            return "No MCP server running"
        ready = [state for state in states.values() if state.state == "ready"]
        starting = [name for name, state in states.items() if state.state == "starting"]
        failed = [name for name, state in states.items() if state.state == "failed"]
        tools = sum(len(state.tools) for state in ready)
        if starting and not ready:
            return f"Starting {len(starting)} MCP server{'s' if len(starting) != 1 else ''}…"
        parts = [f"{tools} tool{'s' if tools != 1 else ''} from {len(ready)} server{'s' if len(ready) != 1 else ''}"]
        if starting:
            parts.append(f"{len(starting)} starting")
        if failed:
            parts.append(f"{', '.join(sorted(failed))} failed")
        return " · ".join(parts)

    def refresh_tools(self) -> None:
        """Show the tools again (Settings changed the servers)."""
        self._update_tools()

    def _update_tools(self) -> None:
        host = self.mcp_host
        states = host.states() if host is not None else {}
        summary = self.tools_summary()
        self.tools_label.setText(f"<a href='settings'>{summary}</a>")
        tips = [
            f"{name}: {state.state}" + (f" ({state.error})" if state.error else "") for name, state in states.items()
        ]
        if self._mcp_error:
            tips.insert(0, self._mcp_error)
        # Server errors are the servers' words: shown as text, never read as markup.
        tip = "\n".join(tips) or "Add MCP servers in Settings to give the model tools."
        self.tools_label.setToolTip(plain_tooltip(tip))
        self.tools_toggle.setEnabled(bool(states))

    def tools_for_turn(self) -> list[dict[str, Any]]:
        """The OpenAI `tools` the next turn offers (none when the toggle is off)."""
        if self.mcp_host is None or not self.tools_toggle.isChecked():
            return []
        return self.mcp_host.openai_tools()

    # -- conversations ---------------------------------------------------------------------
    def new_chat(self) -> None:
        """An empty chat; it is saved when its first message is sent."""
        if self.worker is not None:
            return
        self.conversation = None
        self.list.select(None, notify=False)
        self.list.list.setCurrentRow(-1)
        self.chat_title.setText(DEFAULT_TITLE)
        self.settings_row.load("", ChatSettings())
        self.view.set_messages([])
        self.cancel_edit()
        self._select_model()
        self.stats.setText("")
        self.prompt.setFocus()

    def open_conversation(self, conversation_id: int | None) -> None:
        """Show a saved chat (None: a new one)."""
        if conversation_id is None:
            self.new_chat()
            return
        if self.worker is not None and (self.conversation is None or self.conversation.id != conversation_id):
            self.stop()  # the answer streaming now belongs to the chat being left; it is saved as far as it got
            self.worker.wait()
            self._turn_done()
        try:
            self.conversation = self.store.get(conversation_id)
            messages = self.store.messages(conversation_id)
        except ChatStoreError as err:
            self._show_note(str(err))
            return
        self.chat_title.setText(self.conversation.title)
        self.settings_row.load(self.conversation.system_prompt, self.conversation.settings)
        self._select_model()
        self.cancel_edit()
        self.view.set_messages(messages)
        self.stats.setText("")

    def _save_settings(self) -> None:
        if self.conversation is None:
            return  # a new chat takes the form's values when it is created
        system_prompt, settings = self.settings_row.values(self.conversation.settings)
        self.conversation = self.store.save(
            self.conversation.model_copy(update={"system_prompt": system_prompt, "settings": settings})
        )

    # -- sending ---------------------------------------------------------------------------
    def _update_buttons(self) -> None:
        busy = self.worker is not None
        self.send_button.setEnabled(self.endpoint is not None and not busy)
        self.stop_button.setEnabled(busy)
        self.prompt.setEnabled(self.endpoint is not None)
        self.list.setEnabled(not busy)

    def send(self, text: str | None = None) -> None:
        """Send the prompt box's text (or `text`) with the dropped files and stream the answer."""
        if self.endpoint is None or self.worker is not None:
            return
        text = (text if isinstance(text, str) else self.prompt.toPlainText()).strip()
        if not text and not self.pending:
            return
        try:
            conversation = self._conversation_for(text)
            if self.editing_id is not None:
                self.store.delete_from(conversation.id, self.editing_id)
            self.store.add_message(conversation.id, "user", text, attachments=self.pending)
        except ChatStoreError as err:
            self._show_note(str(err))
            return
        self.prompt.clear()
        self.pending = []
        self.editing_id = None
        self._update_attachments()
        self._show_note("")
        self._start_turn()

    def _conversation_for(self, text: str) -> Conversation:
        """The current chat, created (and titled from the first message) when the page shows a new one."""
        title = title_from(text) if text else (self.pending[0].name if self.pending else DEFAULT_TITLE)
        if self.conversation is None:
            system_prompt, settings = self.settings_row.values()
            self.conversation = self.store.create(
                title=title, model=self.current_model(), system_prompt=system_prompt, settings=settings
            )
            self.chat_title.setText(title)
        elif self.conversation.title == DEFAULT_TITLE and not self.store.messages(self.conversation.id):
            self.store.rename(self.conversation.id, title)
            self.conversation = self.conversation.model_copy(update={"title": title})
            self.chat_title.setText(title)
        self.list.refresh()
        self.list.select(self.conversation.id, notify=False)
        return self.conversation

    def regenerate(self) -> None:
        """Answer the last question again: the last answer (with its tool calls) is replaced."""
        if self.conversation is None or self.worker is not None or self.endpoint is None:
            return
        messages = self.store.messages(self.conversation.id)
        last_user = max((i for i, m in enumerate(messages) if m.role == "user"), default=None)
        if last_user is None:
            return
        if last_user + 1 < len(messages):
            self.store.delete_from(self.conversation.id, messages[last_user + 1].id)
        self._start_turn()

    def edit_message(self, message_id: int) -> None:
        """Put a sent message back in the prompt box; Send replaces it and everything after it."""
        if self.conversation is None or self.worker is not None:
            return
        message = next((m for m in self.store.messages(self.conversation.id) if m.id == message_id), None)
        if message is None:
            return
        self.editing_id = message_id
        self.prompt.setPlainText(message.content)
        self.pending = list(message.attachments)
        self._update_attachments()
        self._show_note("Editing a sent message: Send replaces it and the answers after it.")
        self.prompt.setFocus()

    def cancel_edit(self) -> None:
        """Leave the edit; the prompt box empties."""
        if self.editing_id is None:
            return
        self.editing_id = None
        self.prompt.clear()
        self.pending = []
        self._update_attachments()
        self._show_note("")

    def _start_turn(self) -> None:
        from launcher.chat import session
        from launcher.ui.chat_worker import TurnWorker

        assert self.conversation is not None and self.endpoint is not None
        messages = self.store.messages(self.conversation.id)
        self.view.set_messages(messages)
        takes_images = self.takes_images()
        if any(a.kind == "image" for m in messages for a in m.attachments) and not takes_images:
            self._show_note("The images in this chat are left out: this model does not take images.")
        history = session.to_openai_messages(self.conversation.system_prompt, messages, accepts_images=takes_images)
        settings = self.conversation.settings
        if settings.max_tokens is None and self.max_tokens is not None:
            settings = settings.model_copy(update={"max_tokens": self.max_tokens})
        host = self.mcp_host
        worker = TurnWorker(
            endpoint=session.Endpoint(self.endpoint.base_url, self.endpoint.api_key, self.current_model() or ""),
            messages=history,
            settings=settings,
            store=self.store,
            conversation_id=self.conversation.id,
            tools=self.tools_for_turn(),
            call_tool=host.call if host is not None else None,
            always_allowed=self.always_allowed,
            parent=self,
        )
        worker.event.connect(self._event)
        worker.outcome.connect(self._outcome)
        worker.finished.connect(self._turn_done)
        self.worker = worker
        self.view.assistant_name = self.current_model() or "Assistant"
        self.view.begin_assistant()
        self.stats.setText("Generating…")
        self._update_buttons()
        worker.start()

    def stop(self) -> None:
        """Stop the answer being generated (what arrived is kept, marked as cut short)."""
        if self.worker is not None:
            self.worker.stop()

    def _event(self, event: object) -> None:
        from launcher.chat import session

        if isinstance(event, session.TextDelta):
            self.view.append_text(event.text)
        elif isinstance(event, session.ReasoningDelta):
            self.view.append_reasoning(event.text)
        elif isinstance(event, session.ToolCallProposed):
            card = self.view.add_tool_call(event.call_id, event.qualified, event.arguments)
            if event.qualified in self.always_allowed:
                card.mark_decided("always")  # the session runs it without asking
        elif isinstance(event, session.ToolCallResult):
            self.view.set_tool_result(event.call_id, event.text, event.is_error, event.denied)
            if event.denied:
                self._show_note("You denied the tool call; the model was told so.")
        elif isinstance(event, session.Finished):
            self.view.finish()
            if event.finish_reason == "cancelled" and self.view.message_widgets():
                self.view.message_widgets()[-1].set_status("Stopped before the end.")
        elif isinstance(event, session.Failed):
            self.view.finish(event.message)

    def _decided(self, call_id: str, decision: str) -> None:
        if self.worker is not None and decision in ("once", "always", "deny"):
            self.worker.decide(call_id, decision)  # type: ignore[arg-type]

    def _outcome(self, outcome: TurnOutcome) -> None:
        parts = []
        if outcome.completion_tokens:
            parts.append(f"{outcome.completion_tokens} tokens")
        if outcome.time_to_first_token is not None:
            parts.append(f"first token after {outcome.time_to_first_token * 1000:.0f} ms")
        if outcome.tokens_per_second:
            parts.append(f"{outcome.tokens_per_second:.1f} tok/s")
        if outcome.stopped:
            parts.append("stopped")
        if outcome.error:
            parts.append(outcome.error)
        self.stats.setText(" · ".join(parts))
        self.reply_finished.emit(outcome)

    def _turn_done(self) -> None:
        worker, self.worker = self.worker, None
        if worker is not None:
            worker.deleteLater()
        if self._closed:
            return
        if self.conversation is not None:
            self.list.refresh()  # its place in the list moved up
        self._update_buttons()

    # -- files -----------------------------------------------------------------------------
    def dragEnterEvent(self, event: QDragEnterEvent) -> None:
        """Accept files dragged over the page."""
        if event.mimeData().hasUrls() and any(url.isLocalFile() for url in event.mimeData().urls()):
            event.acceptProposedAction()
        else:
            event.ignore()

    def dragMoveEvent(self, event: QDragEnterEvent) -> None:  # type: ignore[override]
        """Keep accepting while the files move over the page."""
        self.dragEnterEvent(event)

    def dropEvent(self, event: QDropEvent) -> None:
        """Attach the dropped files (or say why not)."""
        paths = [Path(url.toLocalFile()) for url in event.mimeData().urls() if url.isLocalFile()]
        if not paths:
            event.ignore()
            return
        event.acceptProposedAction()
        self.attach(paths)

    def attach(self, paths: list[Path]) -> None:
        """Attach files to the next message: text goes into the prompt, images only for a model that takes them."""
        takes_images = self.takes_images()
        notes = []
        for path in paths:
            dropped = read_dropped(path, takes_images=takes_images)
            if dropped.attachment is not None:
                self.pending.append(dropped.attachment)
            if dropped.note:
                notes.append(dropped.note)
        self._update_attachments()
        self._show_note("\n".join(notes))

    def clear_attachments(self) -> None:
        """Drop the files attached to the next message."""
        self.pending = []
        self._update_attachments()

    def _update_attachments(self) -> None:
        names = [f"{a.name} ({'image' if a.kind == 'image' else _size_text(a.size)})" for a in self.pending]
        self.attachments_label.setText("Attached: " + ", ".join(names) if names else "")
        self.attachments_label.setVisible(bool(names))
        self.clear_attachments_button.setVisible(bool(names))
        self.cancel_edit_button.setVisible(self.editing_id is not None)

    def _show_note(self, text: str) -> None:
        self.note.setText(text)
        self.note.setVisible(bool(text))

    def transcript_text(self) -> str:
        """The conversation as shown, one message after another (tests, screenshots)."""
        return "\n\n".join(widget.text() for widget in self.view.message_widgets())

    # -- lifecycle -------------------------------------------------------------------------
    def showEvent(self, event: object) -> None:
        """Look for the demo model when the page first shows."""
        super().showEvent(event)  # type: ignore[arg-type]
        self._update_info()

    def shutdown(self) -> None:
        """Stop and join the worker, save what is pending, close the chats file (app quit). The wait is
        bounded: Stop ends a stream and a tool call at once, so only a wedged thread is left behind."""
        if self._closed:
            return
        worker = self.worker
        if worker is not None:
            worker.stop()
            if not worker.wait(SHUTDOWN_WAIT_MS):
                log.warning("the chat turn did not end within %d ms of Stop", SHUTDOWN_WAIT_MS)
                # A QThread destroyed while it runs aborts the process: it must not go with the page.
                worker.setParent(None)
                _LEFT_RUNNING.append(worker)
        self._closed = True  # the worker's queued "finished" may still arrive: nothing may read the store then
        if self._settings_timer.isActive():
            self._settings_timer.stop()
            self._save_settings()
        self.list.shutdown()
        self.store.close()


def _size_text(size: int) -> str:
    return f"{size / 1024:.1f} KB" if size >= 1024 else f"{size} B"


def _list_models(endpoint: ServerEndpoint) -> list[dict[str, Any]]:
    """The server's /v1/models entries (background job)."""
    import httpx

    headers = {"Authorization": f"Bearer {endpoint.api_key}"} if endpoint.api_key else {}
    response = httpx.get(endpoint.base_url.rstrip("/") + "/models", headers=headers, timeout=10)
    response.raise_for_status()
    data = response.json().get("data") or []
    return [entry for entry in data if isinstance(entry, dict)]
