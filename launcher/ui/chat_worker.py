"""`TurnWorker`: one chat turn (`launcher.chat.session.run_turn`) in a QThread, its events sent to the page.

The tool loop blocks: it streams, waits for the user's OK on each tool call, runs the call and
streams again. So it runs here, off the UI thread, and every session event reaches the page
through a queued signal, in order. `confirm` blocks this thread until the page answers with
`decide(call_id, decision)` (the tool card's buttons); Stop sets the cancel event, which ends
the stream at once and ends a pending question (the call is reported as not run).

`TurnRecorder` saves the turn into the `ChatStore` as it goes, from this thread (the store's
connection is shared under a lock): the streamed text at most every `SAVE_EVERY_S` and at each
round's end, each tool result as it comes, so a crash keeps most of an answer and a stopped one
stays marked unfinished.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from PySide6.QtCore import QObject, QThread, Signal

from launcher.chat import session
from launcher.chat.store import ChatSettings, ChatStore, ChatStoreError
from launcher.ui import workers

log = logging.getLogger(__name__)

SAVE_EVERY_S = 0.5
# the host's call(qualified, arguments, cancel=event) -> ToolResult; a set event answers at once
CALL_FUNCTION = Callable[..., Any]


@dataclass(frozen=True)
class TurnOutcome:
    """How a turn ended, for the page's status line (and `ChatPanel.reply_finished`)."""

    text: str  # the last answer's text
    stopped: bool = False
    error: str | None = None
    completion_tokens: int | None = None
    seconds: float = 0.0
    time_to_first_token: float | None = None

    @property
    def tokens_per_second(self) -> float | None:
        """Decode speed seen by the client (tokens after the first / time after the first)."""
        if not self.completion_tokens or self.time_to_first_token is None or self.completion_tokens < 2:
            return None
        decode_time = self.seconds - self.time_to_first_token
        return (self.completion_tokens - 1) / decode_time if decode_time > 0 else None


class TurnRecorder:
    """Writes a turn's events into the store as they arrive (worker thread)."""

    def __init__(self, store: ChatStore, conversation_id: int, *, save_every_s: float = SAVE_EVERY_S) -> None:
        self.store = store
        self.conversation_id = conversation_id
        self.save_every_s = save_every_s
        self.message_id: int | None = None  # the answer streaming now
        self.text: list[str] = []
        self.reasoning: list[str] = []
        self.last_text = ""  # the whole text of the last answer (the outcome's)
        self._saved_at = 0.0
        self.broken: str | None = None  # the store failed: the turn goes on, the page says so
        self._round_just_finished: int | None = None  # the message the previous event completed

    def record(self, event: object) -> None:
        """Save what `event` changes; a store failure is remembered, never raised into the loop."""
        try:
            self._record(event)
        except ChatStoreError as err:
            if self.broken is None:
                log.warning("chat store write failed: %s", err)
            self.broken = str(err)

    def _record(self, event: object) -> None:
        just_finished, self._round_just_finished = self._round_just_finished, None
        if isinstance(event, session.TextDelta | session.ReasoningDelta):
            self._ensure_message()
            (self.text if isinstance(event, session.TextDelta) else self.reasoning).append(event.text)
            if time.monotonic() - self._saved_at >= self.save_every_s:
                self._save_partial()
        elif isinstance(event, session.RoundFinished):
            self._ensure_message()
            assert self.message_id is not None
            content = event.message.get("content")
            self.store.update_message(
                self.message_id,
                content=content if isinstance(content, str) else "".join(self.text),
                reasoning="".join(self.reasoning),
                tool_calls=list(event.message.get("tool_calls") or []),
                finished=True,
            )
            self.last_text = "".join(self.text)
            self._round_just_finished = self.message_id
            self._next_round()
        elif isinstance(event, session.ToolCallResult):
            # `error` marks a failed call (the view shows it as one after a restart); the model reads the text.
            error = "The tool call failed." if event.is_error else None
            self.store.add_message(self.conversation_id, "tool", event.text, tool_call_id=event.call_id, error=error)
        elif isinstance(event, session.Finished):
            if event.finish_reason == "cancelled" and just_finished is not None:
                # The round was cut by Stop: the session hands its text over as a whole message.
                self.store.update_message(just_finished, finished=False)
        elif isinstance(event, session.Failed):
            if self.message_id is not None:  # failed while streaming
                self._save_partial(finished=False, error=event.message)
                self._next_round()
            elif just_finished is not None:  # the stream ended before the reply did
                self.store.update_message(just_finished, finished=False, error=event.message)
            else:  # nothing was said: keep the error in the chat, visible after a restart
                self.store.add_message(self.conversation_id, "assistant", "", finished=False, error=event.message)

    def close(self, *, stopped: bool) -> None:
        """The turn is over: an answer still open was cut short (Stop) and stays marked unfinished."""
        if self.message_id is None:
            return
        try:
            self._save_partial(finished=not stopped)
        except ChatStoreError as err:
            self.broken = str(err)
        self.last_text = "".join(self.text)
        self._next_round()

    def _ensure_message(self) -> None:
        if self.message_id is None:
            message = self.store.add_message(self.conversation_id, "assistant", "", finished=False)
            self.message_id = message.id
            self._saved_at = time.monotonic()

    def _save_partial(self, *, finished: bool = False, error: str | None = None) -> None:
        assert self.message_id is not None
        fields: dict[str, Any] = {"content": "".join(self.text), "reasoning": "".join(self.reasoning)}
        if finished or error is not None:
            fields["finished"] = finished
        if error is not None:
            fields["error"] = error
        self.store.update_message(self.message_id, **fields)
        self._saved_at = time.monotonic()

    def _next_round(self) -> None:
        self.message_id = None
        self.text = []
        self.reasoning = []


class TurnWorker(QThread):
    """Runs one turn; `event(object)` per session event (UI thread), then `outcome(TurnOutcome)`."""

    event = Signal(object)
    outcome = Signal(object)

    def __init__(
        self,
        *,
        endpoint: session.Endpoint,
        messages: list[dict[str, Any]],
        settings: ChatSettings,
        store: ChatStore,
        conversation_id: int,
        tools: list[dict[str, Any]] | None = None,
        call_tool: CALL_FUNCTION | None = None,
        always_allowed: session.Approvals | None = None,
        parent: QObject | None = None,
    ) -> None:
        super().__init__(parent)
        self.endpoint = endpoint
        self.messages = messages
        self.settings = settings
        self.tools = tools or []
        self.call_tool = call_tool
        self.always_allowed = always_allowed if always_allowed is not None else set()
        self.recorder = TurnRecorder(store, conversation_id)
        self._cancel = threading.Event()
        self._decisions: dict[str, session.Decision] = {}
        self._decided = threading.Condition()
        self._asking: str | None = None  # the call waiting for the user, if any
        self._finished: session.Finished | None = None
        self._failed: str | None = None
        workers.track_thread(self)

    # -- UI thread ---------------------------------------------------------------------------
    def decide(self, call_id: str, decision: session.Decision) -> None:
        """The user's answer to a tool call's question (from the card)."""
        with self._decided:
            self._decisions[call_id] = decision
            self._decided.notify_all()

    def stop(self) -> None:
        """End the turn now: the stream closes (the server stops generating) and a pending question ends."""
        self._cancel.set()
        with self._decided:
            self._decided.notify_all()

    @property
    def stopped(self) -> bool:
        """True once Stop was asked for."""
        return self._cancel.is_set()

    @property
    def waiting_for(self) -> str | None:
        """The call id waiting for the user's OK (None: not waiting)."""
        return self._asking

    # -- worker thread -----------------------------------------------------------------------
    def run(self) -> None:
        """The turn: stream, ask, call, stream again, until the answer (worker thread)."""
        began = time.monotonic()
        try:
            session.run_turn(
                self.endpoint,
                self.messages,
                tools=self.tools,
                settings=self.settings,
                on_event=self._on_event,
                confirm=self._confirm,
                call_tool=self._call_tool,
                cancel=self._cancel,
                always_allowed=self.always_allowed,
            )
        except Exception as err:  # the loop reports its own failures; anything else must not kill the thread
            log.exception("chat turn failed")
            self._on_event(session.Failed(f"The chat failed: {workers.error_text(err)}"))
        self.recorder.close(stopped=self._cancel.is_set())
        finished = self._finished
        usage = (finished.usage or {}) if finished is not None else {}
        self.outcome.emit(
            TurnOutcome(
                text=self.recorder.last_text,
                stopped=self._cancel.is_set(),
                error=self._failed or self.recorder.broken,
                completion_tokens=usage.get("completion_tokens"),
                seconds=finished.seconds if finished is not None else time.monotonic() - began,
                time_to_first_token=finished.ttft if finished is not None else None,
            )
        )

    def _on_event(self, event: object) -> None:
        self.recorder.record(event)
        if isinstance(event, session.Finished):
            self._finished = event
        elif isinstance(event, session.Failed):
            self._failed = event.message
        self.event.emit(event)

    def _confirm(self, proposed: session.ToolCallProposed) -> session.Decision:
        """Block until the page answers for this call, or Stop."""
        with self._decided:
            self._asking = proposed.call_id
            try:
                while proposed.call_id not in self._decisions and not self._cancel.is_set():
                    self._decided.wait(0.25)
                if proposed.call_id in self._decisions:
                    return self._decisions.pop(proposed.call_id)
                # Stopped while asking. Not "deny": the model would be told the user refused. The session
                # checks the cancel event after the answer, so the call is reported "not run: stopped".
                return "once"
            finally:
                self._asking = None

    def _call_tool(self, qualified: str, arguments: dict[str, Any]) -> session.ToolOutcome:
        if self.call_tool is None:  # the session reports this to the model as the tool's error
            raise RuntimeError("no MCP server runs it any more")
        # Stop must not wait for a slow tool: the host answers as soon as the cancel event is set (and
        # cancels the call); the session then ends the turn as stopped.
        result: session.ToolOutcome = self.call_tool(qualified, arguments, cancel=self._cancel)
        return result
