"""The Chat page's transcript: messages rendered as markdown, and a streamed answer that never stalls the window.

`ChatView` shows a conversation's stored messages (`set_messages`, `add_message`) and streams a reply
into the last one (`begin_assistant`, `append_text`, `append_reasoning`, `finish`). A delta is only
collected when it arrives; a single-shot timer renders what has come at most every
RENDER_INTERVAL_MS, and rendering touches only the message's unfinished tail
(launcher/ui/chat_markdown.py). Work that piles up (a burst of text, a long stored conversation) is
done in steps of a few milliseconds with the event loop running between them, so a 20,000-token
answer, or opening a chat with hundreds of messages, never holds the window for long.

Each message has Copy (its raw markdown); the last user message has Edit and the last answer
Regenerate, which the page acts on. Thinking is folded under "Reasoning". A tool call shows as a
`ToolCallCard` that asks Allow once / Always allow / Deny, then shows the result.
"""

from __future__ import annotations

import json
import time
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from PySide6.QtCore import QEvent, Qt, QTimer, Signal
from PySide6.QtGui import QGuiApplication, QPalette, QTextCursor
from PySide6.QtWidgets import (
    QFrame,
    QHBoxLayout,
    QLabel,
    QPushButton,
    QScrollArea,
    QSizePolicy,
    QToolButton,
    QVBoxLayout,
    QWidget,
)

from launcher.chat.store import DENIED_TEXT, parse_arguments
from launcher.ui import theme, workers
from launcher.ui.chat_markdown import (
    AutoHeightBrowser,
    CodeBlockView,
    MarkdownBody,
    code_formats,
    code_style_name,
    plain_label,
    small_button,
    warm_up,
)

if TYPE_CHECKING:
    from launcher.chat.store import Message

RENDER_INTERVAL_MS = 50  # a streamed message is rendered again at most this often
RENDER_BUDGET_S = 0.004  # one render adds new blocks for about this long, then lets the event loop run
BACKLOG_STEP_MS = 1
# set_messages shows a conversation of up to OPEN_AT_ONCE_CHARS of text and OPEN_AT_ONCE_MESSAGES
# messages before it returns; of a longer one, what OPEN_BUDGET_S allows (the end first), the rest in
# steps of BACKFILL_BUDGET_S while the event loop runs.
OPEN_AT_ONCE_CHARS = 8000
OPEN_AT_ONCE_MESSAGES = 12
OPEN_BUDGET_S = 0.015
BACKFILL_BUDGET_S = 0.008  # a step of that work: the event loop runs between steps
REASONING_CHUNK_CHARS = 2000  # one box of unfolded thinking holds about this much
SHOWN_CHARS = 4000  # a tool call's arguments or result beyond this are cut in the card (Copy copies all)
_FOLLOW_SLACK_PX = 24  # this close to the bottom still counts as "at the bottom": keep following the answer
_warmed = False


class ReasoningFold(QWidget):
    """The model's thinking, folded under a toggle ("Thinking…", "Thought for 4 s", "Reasoning").

    Unfolded, streamed thinking is appended (never set again) into boxes of about
    REASONING_CHUNK_CHARS, so even one endless paragraph never has to be laid out whole per update.
    """

    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self._parts: list[str] = []
        self._shown = 0  # characters of the text already in the boxes
        self._box_full = True  # the next text starts a new box
        layout = QVBoxLayout(self)
        layout.setContentsMargins(0, 0, 0, 0)
        layout.setSpacing(2)
        self.toggle = QToolButton()
        self.toggle.setText("Reasoning")
        self.toggle.setAccessibleName("Reasoning")
        self.toggle.setCheckable(True)
        self.toggle.setAutoRaise(True)
        self.toggle.setArrowType(Qt.ArrowType.RightArrow)
        self.toggle.setToolButtonStyle(Qt.ToolButtonStyle.ToolButtonTextBesideIcon)
        self.toggle.toggled.connect(self.set_expanded)
        self.body = QWidget()
        self.body.setAccessibleName("Reasoning text")
        self._boxes_layout = QVBoxLayout(self.body)
        self._boxes_layout.setContentsMargins(0, 0, 0, 0)
        self._boxes_layout.setSpacing(0)
        self.boxes: list[AutoHeightBrowser] = []
        self.body.hide()
        layout.addWidget(self.toggle, 0, Qt.AlignmentFlag.AlignLeft)
        layout.addWidget(self.body)

    def text(self) -> str:
        """All the reasoning received."""
        if len(self._parts) > 1:
            self._parts = ["".join(self._parts)]
        return self._parts[0] if self._parts else ""

    def shown_text(self) -> str:
        """The text in the boxes (what unfolding shows so far)."""
        return "\n".join(box.toPlainText() for box in self.boxes)

    def append(self, delta: str) -> None:
        """Add streamed thinking (shown at the next `refresh` when unfolded)."""
        self._parts.append(delta)

    def set_text(self, text: str) -> None:
        """Show a complete reasoning text."""
        self._parts = [text]
        self._shown = 0
        self._box_full = True
        for box in self.boxes:
            box.hide()
            box.deleteLater()
        self.boxes = []
        self.refresh()

    def set_title(self, title: str) -> None:
        """The toggle's label."""
        self.toggle.setText(title)

    def is_expanded(self) -> bool:
        """Whether the reasoning is unfolded."""
        return self.toggle.isChecked()

    def set_expanded(self, expanded: bool) -> None:
        """Unfold or fold."""
        if self.toggle.isChecked() != expanded:
            self.toggle.setChecked(expanded)  # comes back here through `toggled`
            return
        self.toggle.setArrowType(Qt.ArrowType.DownArrow if expanded else Qt.ArrowType.RightArrow)
        self.body.setVisible(expanded)
        self.refresh()

    def refresh(self) -> None:
        """Append what arrived to the boxes (only while unfolded: folded thinking costs nothing)."""
        if not self.is_expanded():
            return
        text = self.text()
        while self._shown < len(text):
            if self._box_full:
                self._add_box()
            box = self.boxes[-1]
            room = REASONING_CHUNK_CHARS - box.document().characterCount()
            piece = text[self._shown : self._shown + max(room, 1)]
            if self._shown + len(piece) < len(text) and len(piece) >= room:
                # This box is full: it ends at a line break or a space, the rest goes in the next one.
                cut = max(piece.rfind("\n"), piece.rfind(" ")) + 1
                piece = piece[:cut] if cut > 0 else piece
                self._box_full = True
            cursor = QTextCursor(box.document())
            cursor.movePosition(QTextCursor.MoveOperation.End)
            cursor.insertText(piece.rstrip("\n") if self._box_full else piece)
            self._shown += len(piece)

    def _add_box(self) -> None:
        box = AutoHeightBrowser()
        palette = box.palette()
        palette.setColor(QPalette.ColorRole.Text, theme.MUTED)
        box.setPalette(palette)
        self._boxes_layout.addWidget(box)
        self.boxes.append(box)
        self._box_full = False


class ToolCallCard(QFrame):
    """A tool call the model asks for: its arguments, the question (Allow once / Always allow / Deny), then
    the result. `decided(call_id, decision)` carries "once", "always" or "deny"."""

    decided = Signal(str, str)

    def __init__(
        self, call_id: str, qualified: str, arguments: dict[str, Any] | str, parent: QWidget | None = None
    ) -> None:
        super().__init__(parent)
        self.setObjectName("ChatTool")
        self.call_id = call_id
        self.qualified = qualified
        self.arguments = arguments
        self.decision: str | None = None
        self.result_text: str | None = None
        self.is_error = False
        self.denied = False
        layout = QVBoxLayout(self)
        layout.setContentsMargins(12, 8, 12, 8)
        layout.setSpacing(4)
        self.title = plain_label(f"Tool call: {qualified}")
        self.title.setObjectName("ChatRole")
        self.title.setTextInteractionFlags(Qt.TextInteractionFlag.TextSelectableByMouse)
        layout.addWidget(self.title)
        self.arguments_view = _monospace_box("Tool call arguments")
        self.arguments_view.setPlainText(_shown(_pretty(arguments)))
        layout.addWidget(self.arguments_view)
        self.buttons = QWidget()
        row = QHBoxLayout(self.buttons)
        row.setContentsMargins(0, 0, 0, 0)
        self.allow_once_button = _button("Allow once", "Allow once", lambda: self.decide("once"))
        self.allow_once_button.setObjectName("Primary")
        self.always_button = _button(f"Always allow {qualified}", f"Always allow {qualified}", self._always)
        self.always_button.setToolTip("Run this tool from now on without asking")
        self.deny_button = _button("Deny", "Deny", lambda: self.decide("deny"))
        for button in (self.allow_once_button, self.always_button, self.deny_button):
            row.addWidget(button)
        row.addStretch(1)
        layout.addWidget(self.buttons)
        self.status = plain_label("Waiting for your OK: nothing runs until you allow it.")
        self.status.setObjectName("Muted")
        self.status.setWordWrap(True)
        layout.addWidget(self.status)
        self.result_view = _monospace_box("Tool result")
        self.result_view.hide()
        layout.addWidget(self.result_view)
        self.copy_result_button = small_button("Copy result", "Copy result", self.copy_result)
        self.copy_result_button.hide()
        layout.addWidget(self.copy_result_button, 0, Qt.AlignmentFlag.AlignLeft)

    def _always(self) -> None:
        self.decide("always")

    def decide(self, decision: str) -> None:
        """Answer the question (the buttons call this); only the first answer counts."""
        if self.decision is not None:
            return
        self.mark_decided(decision)
        self.decided.emit(self.call_id, decision)

    def mark_decided(self, decision: str) -> None:
        """Show a decision without asking (e.g. a tool the user always allows)."""
        self.decision = decision
        self.buttons.hide()
        self.status.setText(
            {
                "once": "Allowed once: running…",
                "always": f"Allowed ({self.qualified} is always allowed): running…",
                "deny": "Denied.",
            }.get(decision, decision)
        )

    def set_result(self, text: str, is_error: bool = False, denied: bool = False) -> None:
        """Show what the call gave back (what the model reads)."""
        self.result_text, self.is_error, self.denied = text, is_error, denied
        self.buttons.hide()
        if denied:
            self.decision = self.decision or "deny"
            self.status.setText("Denied: the model was told it may not run this call.")
            self.status.setStyleSheet("")
            return
        self.status.setText("The call failed:" if is_error else "Result:")
        self.status.setStyleSheet(f"color: {theme.BAD};" if is_error else "")
        self.result_view.setPlainText(_shown(text))
        self.result_view.show()
        self.copy_result_button.show()

    def set_not_run(self, reason: str = "Not run.") -> None:
        """A stored call that never got an answer (the turn was cut short)."""
        self.buttons.hide()
        self.status.setText(reason)

    def copy_result(self) -> None:
        """Put the whole result on the clipboard."""
        QGuiApplication.clipboard().setText(self.result_text or "")


class MessageWidget(QFrame):
    """One message: who, its text (markdown for answers, plain for the user's), its actions and cards.

    What most messages lack (thinking, attachments, a status line, Edit, Regenerate) is made on first
    use: a long conversation opens with a few widgets per message, not a dozen.
    """

    copy_clicked = Signal(str)
    edit_clicked = Signal(int)
    regenerate_clicked = Signal()

    def __init__(self, role: str, *, name: str = "", message_id: int | None = None, parent: QWidget | None = None):
        super().__init__(parent)
        self.role = role
        self.message_id = message_id
        self.key: tuple[Any, ...] | None = None  # what it shows, to reuse it when set_messages gets the same
        self.setObjectName("ChatUser" if role == "user" else "ChatMessage")
        self.setSizePolicy(QSizePolicy.Policy.Preferred, QSizePolicy.Policy.Maximum)
        self._reasoning_started: float | None = None
        self._reasoning_seconds: float | None = None
        self._reasoning: ReasoningFold | None = None
        self._attachments: QLabel | None = None
        self._status: QLabel | None = None
        self._status_shown: tuple[str, bool] = ("", False)
        self._edit_button: QToolButton | None = None
        self._regenerate_button: QToolButton | None = None
        self._plain_text = ""
        self._layout = QVBoxLayout(self)
        self._layout.setContentsMargins(12, 8, 12, 8)
        self._layout.setSpacing(4)
        self._header = QHBoxLayout()
        self._header.setSpacing(2)
        self.role_label = plain_label(name or _ROLE_NAMES.get(role, role.capitalize()))
        self.role_label.setObjectName("ChatRole")
        self._header.addWidget(self.role_label)
        self._header.addStretch(1)
        self.copy_button = small_button("Copy", "Copy message", lambda: self.copy_clicked.emit(self.text()))
        self._header.addWidget(self.copy_button)
        self._layout.addLayout(self._header)
        self.body = MarkdownBody()
        self.plain: AutoHeightBrowser | None = None
        if role in ("user", "tool"):  # the user's words exactly as typed, not markdown
            self.plain = AutoHeightBrowser()
            self.plain.setAccessibleName("Message text")
            self._layout.addWidget(self.plain)
        else:
            self._layout.addWidget(self.body)
        self.cards: list[ToolCallCard] = []
        self._cards_layout = QVBoxLayout()
        self._cards_layout.setSpacing(6)
        self._layout.addLayout(self._cards_layout)

    # --- parts made on first use ---

    @property
    def reasoning(self) -> ReasoningFold:
        """The folded thinking (above the text)."""
        if self._reasoning is None:
            self._reasoning = ReasoningFold()
            self._layout.insertWidget(1, self._reasoning)
            self._reasoning.show()
        return self._reasoning

    @property
    def attachments(self) -> QLabel:
        """The line naming the attached files (above the text)."""
        if self._attachments is None:
            self._attachments = plain_label()
            self._attachments.setObjectName("Muted")
            self._attachments.setWordWrap(True)
            self._attachments.hide()
            self._layout.insertWidget(self._layout.indexOf(self.plain or self.body), self._attachments)
        return self._attachments

    @property
    def status(self) -> QLabel:
        """The line under the message ("Answering…", an error, "Stopped before the end.")."""
        if self._status is None:
            self._status = plain_label()
            self._status.setObjectName("Muted")
            self._status.setWordWrap(True)
            self._status.hide()
            self._layout.addWidget(self._status)
        return self._status

    @property
    def edit_button(self) -> QToolButton:
        """Edit (shown on the last user message)."""
        if self._edit_button is None:
            self._edit_button = small_button("Edit", "Edit message", self._edit)
            self._edit_button.hide()
            self._header.addWidget(self._edit_button)
        return self._edit_button

    @property
    def regenerate_button(self) -> QToolButton:
        """Regenerate (shown on the last answer)."""
        if self._regenerate_button is None:
            self._regenerate_button = small_button("Regenerate", "Regenerate answer", self.regenerate_clicked.emit)
            self._regenerate_button.hide()
            self._header.addWidget(self._regenerate_button)
        return self._regenerate_button

    # --- content ---

    def text(self) -> str:
        """The raw text (markdown as the model wrote it)."""
        return self._plain_text if self.plain is not None else self.body.text()

    def reasoning_text(self) -> str:
        """The thinking received ("" when none)."""
        return self._reasoning.text() if self._reasoning is not None else ""

    def set_content(self, text: str, reasoning: str = "", *, progressive: bool = False) -> None:
        """Show a complete message (`progressive`: the answer's markdown part by part, see
        MarkdownBody.advance)."""
        if self.plain is not None:
            self._plain_text = text
            self.plain.setPlainText(text)
            self.plain.setVisible(bool(text))
        else:
            self.body.set_text(text, progressive=progressive)
        if reasoning:
            self.reasoning.set_text(reasoning)

    def set_attachments(self, names: Sequence[str]) -> None:
        """List the files attached to the message."""
        if names or self._attachments is not None:
            self.attachments.setText("Attached: " + ", ".join(names))
            self.attachments.setVisible(bool(names))

    def append_text(self, delta: str) -> None:
        """Streamed answer text (rendered by `refresh`)."""
        if self._reasoning_started is not None and self._reasoning_seconds is None:
            self._reasoning_seconds = time.monotonic() - self._reasoning_started
        self.body.append(delta)

    def append_reasoning(self, delta: str) -> None:
        """Streamed thinking (rendered by `refresh`)."""
        if self._reasoning_started is None:
            self._reasoning_started = time.monotonic()
            self.reasoning.set_title("Thinking…")
        self.reasoning.append(delta)

    def refresh(self, *, final: bool = False, budget_s: float | None = None) -> bool:
        """Show what was streamed since the last call (only the unfinished tail is rendered again);
        False: `budget_s` ran out first, call again (see MarkdownBody.refresh)."""
        done = self.body.refresh(final=final, budget_s=budget_s)
        if self._reasoning is not None:
            self._reasoning.refresh()
        if self._reasoning_seconds is not None or (final and self._reasoning_started is not None):
            seconds = self._reasoning_seconds
            if seconds is None and self._reasoning_started is not None:
                seconds = self._reasoning_seconds = time.monotonic() - self._reasoning_started
            self.reasoning.set_title(f"Thought for {max(1, round(seconds or 0))} s")
        if self.body.text() or self.reasoning_text() or self.cards:
            self.set_status("")
        return done

    def finish(self, error: str | None = None, *, budget_s: float | None = None) -> bool:
        """The stream ended (`error`: why it was cut short). With `budget_s`, what is still to show
        past that time is left to `body.advance` (False is returned)."""
        done = self.refresh(final=True, budget_s=budget_s)
        self.set_status(error or "", error=bool(error))
        if not done:
            self.body.finish_in_steps()
        return done

    def set_status(self, text: str, *, error: bool = False) -> None:
        """A line under the message ("Answering…", an error, "Stopped")."""
        if (text, error) == self._status_shown:
            return  # called on every render: a style sheet set again would restyle the label each time
        self._status_shown = (text, error)
        self.status.setText(text)
        self.status.setStyleSheet(f"color: {theme.BAD};" if error else "")
        self.status.setVisible(bool(text))

    def add_card(self, card: ToolCallCard) -> None:
        """Show a tool call under the message."""
        self.cards.append(card)
        self._cards_layout.addWidget(card)
        card.show()

    def shows(self, message: Message, results: dict[str, Message]) -> bool:
        """Whether this widget already shows `message` (and its tool results): then it is kept as it is."""
        if self.message_id not in (None, message.id):
            return False
        if self.key is not None:
            return self.key == _key(message, results)
        # Streamed here: the stored message has the same words, thinking and calls.
        return (
            self.role == message.role
            and self.text() == message.content
            and self.reasoning_text() == message.reasoning
            and [card.call_id for card in self.cards] == [str(call.get("id")) for call in message.tool_calls]
        )

    def adopt(self, message: Message, results: dict[str, Message]) -> None:
        """Take the stored message's id and state (a streamed answer once it is saved)."""
        self.message_id = message.id
        if self.key is None:
            self.key = _key(message, results)
            if message.error:
                self.set_status(message.error, error=True)
            elif not message.finished:
                self.set_status("Stopped before the end.")
            for card in self.cards:
                result = results.get(card.call_id)
                if result is not None and card.result_text is None:
                    card.set_result(result.content, result.error is not None, result.content == DENIED_TEXT)

    # --- actions ---

    def set_actions(self, *, edit: bool, regenerate: bool) -> None:
        """Show Edit (last user message) and Regenerate (last answer)."""
        if edit or self._edit_button is not None:
            self.edit_button.setVisible(edit)
        if regenerate or self._regenerate_button is not None:
            self.regenerate_button.setVisible(regenerate)

    def _edit(self) -> None:
        if self.message_id is not None:
            self.edit_clicked.emit(self.message_id)


_ROLE_NAMES = {"user": "You", "assistant": "Assistant", "system": "System prompt", "tool": "Tool result"}


class ChatView(QWidget):
    """The transcript (see the module docstring). Signals: `copy_requested(text)` after a Copy put text on
    the clipboard, `edit_requested(message_id)`, `regenerate_requested()`, `tool_decided(call_id, decision)`."""

    copy_requested = Signal(str)
    edit_requested = Signal(int)
    regenerate_requested = Signal()
    tool_decided = Signal(str, str)

    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.assistant_name = "Assistant"  # the page may set the model's name
        self._messages: list[MessageWidget] = []
        self._live: MessageWidget | None = None
        self._streaming = False
        self._follow = True
        self._dark: bool | None = None
        self._cards: dict[str, ToolCallCard] = {}
        self.render_interval_ms = RENDER_INTERVAL_MS
        self.renders = 0  # how many times a streamed message was rendered (tests and tuning read it)
        self._render_timer = QTimer(self)
        self._render_timer.setSingleShot(True)
        self._render_timer.timeout.connect(self._render_live)
        self._backfill: list[MessageWidget] = []  # stored answers not all shown yet (set_messages)
        self._unbuilt: list[tuple[Message, dict[str, Message]]] = []  # the first messages, not made yet
        self._unbuilt_before: MessageWidget | None = None  # ...to go above this one
        self._backfill_timer = QTimer(self)
        self._backfill_timer.setSingleShot(True)
        self._backfill_timer.timeout.connect(self._backfill_step)

        self.scroll_area = QScrollArea()
        self.scroll_area.setObjectName("ChatScroll")
        self.scroll_area.setAccessibleName("Conversation")
        self.scroll_area.setWidgetResizable(True)
        self.scroll_area.setFrameShape(QFrame.Shape.NoFrame)
        self.scroll_area.setHorizontalScrollBarPolicy(Qt.ScrollBarPolicy.ScrollBarAlwaysOff)
        self._content = QWidget()
        self._content.setObjectName("ChatContent")
        self._content.setAutoFillBackground(True)
        self._items = QVBoxLayout(self._content)
        self._items.setContentsMargins(4, 4, 4, 4)
        self._items.setSpacing(10)
        self._items.addStretch(1)
        self.scroll_area.setWidget(self._content)
        bar = self.scroll_area.verticalScrollBar()
        bar.rangeChanged.connect(self._range_changed)
        bar.valueChanged.connect(self._scrolled)
        layout = QVBoxLayout(self)
        layout.setContentsMargins(0, 0, 0, 0)
        layout.addWidget(self.scroll_area)
        self._apply_theme()
        _warm_up_once()

    # --- stored messages ---

    def set_messages(self, messages: Sequence[Message]) -> None:
        """Show a conversation. Messages already shown as they are keep their widgets (no re-render), so
        calling this after a streamed answer was stored, or after an edit, costs only what changed.

        A short conversation is all shown when this returns. Of a long one (more than
        OPEN_AT_ONCE_CHARS of text or OPEN_AT_ONCE_MESSAGES messages), the end is shown first, within
        OPEN_BUDGET_S, and the rest (earlier messages, the rest of long answers) in short steps while
        the event loop runs; `is_rendering()` says when that is done.
        """
        if self._live is not None:
            self.finish()
        if self._unbuilt:
            self.clear()  # a long conversation still opening: its widgets are no prefix to keep
        groups = _group(messages)
        keep = 0
        for widget, (message, results) in zip(self._messages, groups, strict=False):
            if not widget.shows(message, results):
                break
            widget.adopt(message, results)
            keep += 1
        if keep < len(self._messages):
            self._remove_from(self._messages[keep])
        new = groups[keep:]
        short = len(new) <= OPEN_AT_ONCE_MESSAGES and sum(len(m.content) for m, _ in new) <= OPEN_AT_ONCE_CHARS
        deadline = time.perf_counter() + OPEN_BUDGET_S
        bulk = len(new) > 1 and self._content.isVisible()
        if bulk:
            self._content.hide()  # shown all at once with the content: one layout pass, not one per message
        built: list[MessageWidget] = []
        while new and (short or not built or time.perf_counter() < deadline):
            message, results = new.pop()  # the end first: it is what the view shows
            built.append(self._message_widget(message, results, progressive=True))
        for widget in reversed(built):
            self._append_item(widget, show=not bulk)
            if widget.body.pending():
                self._backfill.append(widget)
        if bulk:
            self._content.show()
        self._unbuilt = new
        self._unbuilt_before = built[-1] if new else None  # they go above the first message made
        self._update_actions()
        while self._backfill and (short or time.perf_counter() < deadline):
            self._backfill_step(budget_s=OPEN_BUDGET_S if short else max(0.001, deadline - time.perf_counter()))
        if self._unbuilt:
            self._backfill_timer.start(BACKLOG_STEP_MS)

    def is_rendering(self) -> bool:
        """An answer streams, or a long conversation is still being laid out (see `set_messages`)."""
        return self._streaming or bool(self._backfill) or bool(self._unbuilt)

    def add_message(self, message: Message) -> MessageWidget:
        """Show one more stored message (e.g. the user's, just sent)."""
        widget = self._message_widget(message, {})
        self._follow = True
        self._append_item(widget)
        self._update_actions()
        return widget

    def clear(self) -> None:
        """Show nothing (a new chat)."""
        self._render_timer.stop()
        self._backfill_timer.stop()
        self._live = None
        self._streaming = False
        self._unbuilt = []
        self._unbuilt_before = None
        while self._items.count() > 1:
            self._remove_item(0)

    def message_widgets(self) -> list[MessageWidget]:
        """The message widgets, in order."""
        return list(self._messages)

    def card(self, call_id: str) -> ToolCallCard | None:
        """The tool call card of a call."""
        return self._cards.get(call_id)

    def is_streaming(self) -> bool:
        """Between `begin_assistant` and `finish`."""
        return self._streaming

    # --- streaming ---

    def begin_assistant(self, message_id: int | None = None) -> MessageWidget:
        """Start showing an answer; `append_text`/`append_reasoning` fill it, `finish` ends it."""
        if self._live is not None:
            self._finish_live(None)
        self._streaming = True
        self._follow = True
        widget = self._start_live(message_id)
        widget.set_status("Answering…")
        self._update_actions()
        return widget

    def append_text(self, delta: str) -> None:
        """A piece of the answer (rendered within RENDER_INTERVAL_MS, with what else arrived)."""
        if delta:
            self._live_for_stream().append_text(delta)
            self._schedule()

    def append_reasoning(self, delta: str) -> None:
        """A piece of the model's thinking (shown folded)."""
        if delta:
            self._live_for_stream().append_reasoning(delta)
            self._schedule()

    def finish(self, error: str | None = None) -> None:
        """The answer ended; `error` (a failure, "Stopped") shows under it."""
        self._render_timer.stop()
        self._finish_live(error)
        self._streaming = False
        self._update_actions()

    def add_tool_call(self, call_id: str, qualified: str, arguments: dict[str, Any] | str) -> ToolCallCard:
        """Show a tool call and ask; the card's `decided` (and this view's `tool_decided`) carries the answer."""
        live = self._live or self._start_live(None)
        self._render_timer.stop()
        live.refresh(final=True)  # this round's text is complete; more text comes in a new message widget
        card = ToolCallCard(call_id, qualified, arguments)
        card.decided.connect(self.tool_decided)
        self._cards[call_id] = card
        live.add_card(card)
        return card

    def set_tool_result(self, call_id: str, text: str, is_error: bool = False, denied: bool = False) -> None:
        """Show a call's result on its card."""
        card = self._cards.get(call_id)
        if card is not None:
            card.set_result(text, is_error, denied)

    def add_note(self, text: str) -> QLabel:
        """A muted line in the transcript ("Images need a model that takes them: not sent.")."""
        note = plain_label(text)
        note.setObjectName("Muted")
        note.setWordWrap(True)
        note.setAccessibleName("Note")
        note.setTextInteractionFlags(Qt.TextInteractionFlag.TextSelectableByMouse)
        self._append_item(note)
        return note

    def _live_for_stream(self) -> MessageWidget:
        live = self._live
        if live is None or live.cards:
            # After a tool call the next round's text goes under the cards, in a message of its own.
            if live is not None:
                live.finish()
            live = self._start_live(None)
        return live

    def _start_live(self, message_id: int | None) -> MessageWidget:
        widget = MessageWidget("assistant", name=self.assistant_name, message_id=message_id)
        self._connect(widget)
        self._append_item(widget)
        self._live = widget
        return widget

    def _finish_live(self, error: str | None) -> None:
        live, self._live = self._live, None
        # A backlog (text came faster than it was shown) is shown in steps, not in one long stall.
        if live is not None and not live.finish(error, budget_s=RENDER_BUDGET_S):
            self._backfill.append(live)
            self._backfill_timer.start(BACKLOG_STEP_MS)

    def _backfill_step(self, budget_s: float = BACKFILL_BUDGET_S) -> None:
        """Show more of a long conversation (set_messages): the answers shown in part, the last one
        first (it is the one in view), then the earlier messages not made yet, from the end up; again
        after the event loop ran, until all are shown."""
        deadline = time.perf_counter() + budget_s
        while self._backfill and time.perf_counter() < deadline:
            widget = self._backfill[-1]
            if widget.body.advance(max(0.001, deadline - time.perf_counter())):
                self._backfill.pop()
        while not self._backfill and self._unbuilt and time.perf_counter() < deadline:
            message, results = self._unbuilt.pop()
            widget = self._message_widget(message, results, progressive=True)
            above = self._unbuilt_before
            assert above is not None  # set with _unbuilt
            self._messages.insert(self._messages.index(above), widget)
            self._items.insertWidget(self._items.indexOf(above), widget)
            self._unbuilt_before = widget
            widget.show()
            if widget.body.pending():
                self._backfill.append(widget)
        if self._backfill or self._unbuilt:
            self._backfill_timer.start(BACKLOG_STEP_MS)

    def _schedule(self) -> None:
        if not self._render_timer.isActive():
            self._render_timer.start(self.render_interval_ms)

    def _render_live(self) -> None:
        if self._live is None:
            return
        self.renders += 1
        if not self._live.refresh(budget_s=RENDER_BUDGET_S):
            # A backlog: show the rest in steps, letting the event loop (input, painting) run between them.
            self._render_timer.start(BACKLOG_STEP_MS)

    # --- items ---

    def _message_widget(
        self, message: Message, results: dict[str, Message], *, progressive: bool = False
    ) -> MessageWidget:
        name = self.assistant_name if message.role == "assistant" else ""
        widget = MessageWidget(message.role, name=name, message_id=message.id)
        self._connect(widget)
        widget.set_content(message.content, message.reasoning, progressive=progressive)
        if message.attachments:
            widget.set_attachments([_attachment_label(a) for a in message.attachments])
        for call in message.tool_calls:
            function = call.get("function") or {}
            card = ToolCallCard(str(call.get("id", "")), str(function.get("name", "?")), _arguments(function))
            card.decided.connect(self.tool_decided)
            result = results.get(card.call_id)
            if result is None:
                card.set_not_run()
            else:
                card.set_result(result.content, result.error is not None, result.content == DENIED_TEXT)
            self._cards[card.call_id] = card
            widget.add_card(card)
        if message.error:
            widget.set_status(message.error, error=True)
        elif not message.finished:
            widget.set_status("Stopped before the end.")
        widget.key = _key(message, results)
        return widget

    def _connect(self, widget: MessageWidget) -> None:
        widget.copy_clicked.connect(self._copy)
        widget.edit_clicked.connect(self.edit_requested)
        widget.regenerate_clicked.connect(self.regenerate_requested)
        widget.body.code_copied.connect(self.copy_requested)

    def _copy(self, text: str) -> None:
        QGuiApplication.clipboard().setText(text)
        self.copy_requested.emit(text)

    def _append_item(self, widget: QWidget, *, show: bool = True) -> None:
        if isinstance(widget, MessageWidget):
            self._messages.append(widget)
        widget.resize(max(self._content.width() - 8, 200), widget.height())
        self._items.insertWidget(self._items.count() - 1, widget)
        if show:
            widget.show()  # now, not at the layout's queued show: what was added is there when this returns

    def _remove_from(self, first: QWidget) -> None:
        """Remove an item and everything after it."""
        index = self._items.indexOf(first)
        while index >= 0 and self._items.count() - 1 > index:
            self._remove_item(index)

    def _remove_item(self, index: int) -> None:
        item = self._items.takeAt(index)
        widget = item.widget() if item is not None else None
        if widget is None:
            return
        if self._live is not None and widget is self._live:
            self._render_timer.stop()
            self._live = None
            self._streaming = False
        if isinstance(widget, MessageWidget):
            self._messages.remove(widget)
            if widget in self._backfill:
                self._backfill.remove(widget)
            for card in widget.cards:
                self._cards.pop(card.call_id, None)
        widget.hide()
        widget.deleteLater()

    def _update_actions(self) -> None:
        last_user = next((w for w in reversed(self._messages) if w.role == "user"), None)
        last_answer = None
        for widget in reversed(self._messages):
            if widget.role == "user":
                break
            if widget.role == "assistant":
                last_answer = widget
                break
        for widget in self._messages:
            widget.set_actions(
                edit=not self._streaming and widget is last_user and widget.message_id is not None,
                regenerate=not self._streaming and widget is last_answer,
            )

    # --- scrolling: follow the answer while the user is at the bottom ---

    def _range_changed(self, _minimum: int, maximum: int) -> None:
        if self._follow:
            self.scroll_area.verticalScrollBar().setValue(maximum)

    def _scrolled(self, value: int) -> None:
        self._follow = value >= self.scroll_area.verticalScrollBar().maximum() - _FOLLOW_SLACK_PX

    def scroll_to_bottom(self) -> None:
        """Show the end of the conversation and follow it again."""
        self._follow = True
        bar = self.scroll_area.verticalScrollBar()
        bar.setValue(bar.maximum())

    # --- theme ---

    def changeEvent(self, event: QEvent) -> None:
        super().changeEvent(event)
        if event.type() == QEvent.Type.PaletteChange:
            self._apply_theme()

    def _apply_theme(self) -> None:
        dark = theme.is_dark(self.palette())
        if dark == self._dark:
            return
        self._dark = dark
        code = code_formats(code_style_name(self.palette()))
        self.setStyleSheet(
            f"QFrame#ChatUser {{ background: palette(alternate-base); border: 1px solid palette(midlight);"
            f" border-radius: 10px; }}\n"
            f"QFrame#ChatCode {{ background: {code.background}; border: 1px solid palette(mid);"
            " border-radius: 6px; }\n"
            f"QFrame#ChatCode QLabel {{ color: {code.foreground}; }}\n"
            f"QFrame#ChatCode QToolButton {{ color: {code.foreground}; }}\n"
            f"QFrame#ChatTool {{ background: palette(base); border: 1px solid palette(mid); border-radius: 8px; }}\n"
            "QLabel#ChatRole { font-weight: 600; }\n"
            f"QLabel#Muted {{ color: {theme.MUTED}; }}\n"
        )
        for block in self.findChildren(CodeBlockView):
            block.restyle()


def _warm_up_once() -> None:
    global _warmed
    if not _warmed:
        _warmed = True
        workers.run_in_background(warm_up)


def _group(messages: Sequence[Message]) -> list[tuple[Message, dict[str, Message]]]:
    """Messages to show, each with the tool results that answer its calls (shown on its cards, not apart)."""
    groups: list[tuple[Message, dict[str, Message]]] = []
    for message in messages:
        if message.role == "tool" and groups and message.tool_call_id in _call_ids(groups[-1][0]):
            groups[-1][1][str(message.tool_call_id)] = message
        else:
            groups.append((message, {}))
    return groups


def _call_ids(message: Message) -> set[str]:
    return {str(call.get("id")) for call in message.tool_calls}


def _key(message: Message, results: dict[str, Message]) -> tuple[Any, ...]:
    """What a message widget shows: equal keys, nothing to render again."""
    return (
        message.role,
        message.content,
        message.reasoning,
        json.dumps(message.tool_calls, sort_keys=True),
        tuple(sorted((call_id, r.content, r.error) for call_id, r in results.items())),
        tuple(a.name for a in message.attachments),
        message.finished,
        message.error,
    )


def _arguments(function: dict[str, Any]) -> dict[str, Any] | str:
    raw = function.get("arguments", "")
    if isinstance(raw, dict):
        return raw
    if not isinstance(raw, str) or not raw.strip():
        return str(raw)  # blank arguments show as written, not as {}
    parsed = parse_arguments(raw)
    return parsed if parsed is not None else raw


def _attachment_label(attachment: Any) -> str:
    size = attachment.size
    amount = f"{size / 1024:.1f} KB" if size >= 1024 else f"{size} bytes"
    return f"{attachment.name} ({'image' if attachment.kind == 'image' else amount})"


def _pretty(arguments: dict[str, Any] | str) -> str:
    if isinstance(arguments, str):
        return arguments
    return json.dumps(arguments, indent=2, ensure_ascii=False, default=str)


def _shown(text: str) -> str:
    if len(text) <= SHOWN_CHARS:
        return text
    return f"{text[:SHOWN_CHARS]}\n… ({len(text) - SHOWN_CHARS:,} more characters; Copy copies everything)"


def _monospace_box(name: str) -> AutoHeightBrowser:
    box = AutoHeightBrowser()
    box.setAccessibleName(name)
    box.document().setDefaultFont(theme.monospace_font())
    return box


def _button(text: str, accessible_name: str, slot: Any) -> QPushButton:
    button = QPushButton(text)
    button.setAccessibleName(accessible_name)
    button.clicked.connect(slot)
    return button
