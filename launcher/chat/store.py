"""The Chat page's conversations on disk: one SQLite file, `data_dir()/chats.sqlite3`.

Stdlib sqlite3 in WAL mode (a reader never waits for the writer), the schema's version in
`PRAGMA user_version`, and one connection shared by the window and the worker thread that saves
a streamed answer, guarded by a lock: sqlite3 objects are not safe to use from two threads at once.
Every SQLite failure (a corrupt file, a database another program holds locked, a disk that is
full) reaches the caller as a `ChatStoreError` whose text names the file and what to do.
"""

from __future__ import annotations

import enum
import json
import re
import sqlite3
import threading
import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, TypeAdapter, ValidationError

from launcher.core import paths
from launcher.core.errors import LauncherError

CHATS_FILE_NAME = "chats.sqlite3"
SCHEMA_VERSION = 1
DEFAULT_TITLE = "New chat"
TITLE_CHARS = 60
EXPORT_FORMAT = "launcher-chat"
# The tool result a Deny stores: the model reads it, and the Chat page recognises a stored denial by it.
DENIED_TEXT = "The user denied this call."

Role = Literal["system", "user", "assistant", "tool"]


class ChatStoreError(LauncherError):
    """The chats file cannot be read or written (corrupt, locked by another program, disk full, no such chat)."""


class ChatSettings(BaseModel):
    """Per-chat sampling settings; None leaves the choice to the server (the model's own defaults)."""

    model_config = ConfigDict(extra="ignore")

    temperature: float | None = None
    top_p: float | None = None
    max_tokens: int | None = None


class Attachment(BaseModel):
    """A file dropped onto the prompt: a text file's text goes into the prompt, an image's bytes go to a
    model that takes images."""

    model_config = ConfigDict(extra="ignore")

    name: str
    kind: Literal["text", "image"]
    mime: str
    text: str | None = None
    data_base64: str | None = None
    size: int


class Message(BaseModel):
    """One message of a conversation, in the shapes the OpenAI chat API uses for tool calls."""

    model_config = ConfigDict(extra="ignore")

    id: int
    conversation_id: int
    role: Role
    content: str
    reasoning: str = ""
    tool_calls: list[dict[str, Any]] = []
    tool_call_id: str | None = None
    attachments: list[Attachment] = []
    created: float
    finished: bool = True
    error: str | None = None


class Conversation(BaseModel):
    """A chat: its title, the model it talks to and how."""

    model_config = ConfigDict(extra="ignore")

    id: int
    title: str
    model: str | None
    system_prompt: str = ""
    settings: ChatSettings = Field(default_factory=ChatSettings)
    created: float
    updated: float


class _Unset(enum.Enum):
    """Marks an `update_message` field the caller did not pass (None is a value: it clears `error`)."""

    UNSET = enum.auto()


UNSET = _Unset.UNSET

_TOOL_CALLS = TypeAdapter(list[dict[str, Any]])
_ATTACHMENTS = TypeAdapter(list[Attachment])

_SCHEMA = (
    """CREATE TABLE conversations (
    id INTEGER PRIMARY KEY AUTOINCREMENT,
    title TEXT NOT NULL,
    model TEXT,
    system_prompt TEXT NOT NULL DEFAULT '',
    settings TEXT NOT NULL DEFAULT '{}',
    created REAL NOT NULL,
    updated REAL NOT NULL
)""",
    """CREATE TABLE messages (
    id INTEGER PRIMARY KEY AUTOINCREMENT,
    conversation_id INTEGER NOT NULL REFERENCES conversations(id) ON DELETE CASCADE,
    role TEXT NOT NULL,
    content TEXT NOT NULL DEFAULT '',
    reasoning TEXT NOT NULL DEFAULT '',
    tool_calls TEXT NOT NULL DEFAULT '[]',
    tool_call_id TEXT,
    attachments TEXT NOT NULL DEFAULT '[]',
    created REAL NOT NULL,
    finished INTEGER NOT NULL DEFAULT 1,
    error TEXT
)""",
    "CREATE INDEX messages_by_conversation ON messages(conversation_id, id)",
    "CREATE INDEX conversations_by_updated ON conversations(updated DESC, id DESC)",
)


def chats_file() -> Path:
    """Where the conversations are kept."""
    return paths.data_dir() / CHATS_FILE_NAME


def auto_title(text: str) -> str:
    """A chat's title from its first user message: the first non-empty line, at most 60 characters."""
    for line in text.splitlines():
        line = " ".join(line.split())
        if line:
            return line if len(line) <= TITLE_CHARS else line[: TITLE_CHARS - 1].rstrip() + "…"
    return DEFAULT_TITLE


def _fold(text: str | None) -> str:
    # SQLite's LIKE and lower() fold ASCII only; search must also find "Über" by "über".
    return (text or "").casefold()


class ChatStore:
    """The conversations file, open for the app's lifetime; safe to use from several threads."""

    def __init__(self, path: Path | None = None, *, busy_timeout_s: float = 5.0) -> None:
        self.path = path if path is not None else chats_file()
        self._lock = threading.RLock()
        self._connection: sqlite3.Connection | None = None
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True)
        except OSError as err:
            raise ChatStoreError(f"Cannot create the folder for the chats file {self.path}: {err}.") from err
        with self._errors_named("open"):
            # isolation_level=None: no implicit transactions; every change below opens its own.
            connection = sqlite3.connect(
                self.path, timeout=busy_timeout_s, isolation_level=None, check_same_thread=False
            )
            try:
                self._prepare(connection)
            except BaseException:
                connection.close()
                raise
            self._connection = connection

    # -- opening ---------------------------------------------------------------------------------

    def _prepare(self, connection: sqlite3.Connection) -> None:
        connection.row_factory = sqlite3.Row
        connection.create_function("launcher_fold", 1, _fold, deterministic=True)
        connection.execute("PRAGMA foreign_keys = ON")  # messages go with their conversation
        version = int(connection.execute("PRAGMA user_version").fetchone()[0])
        if version > SCHEMA_VERSION:
            raise ChatStoreError(
                f"The chats file {self.path} was written by a newer version of the app (schema {version}, "
                f"this version reads up to {SCHEMA_VERSION}). Update the app to open it."
            )
        connection.execute("PRAGMA journal_mode = WAL")
        if version < SCHEMA_VERSION:
            connection.execute("BEGIN IMMEDIATE")
            try:
                # Read again inside the write lock: another process may have created it meanwhile.
                # (Not executescript: it commits first, which would end this transaction.)
                if int(connection.execute("PRAGMA user_version").fetchone()[0]) == 0:
                    for statement in _SCHEMA:
                        connection.execute(statement)
                    connection.execute(f"PRAGMA user_version = {SCHEMA_VERSION}")
                connection.execute("COMMIT")
            except BaseException:
                if connection.in_transaction:
                    connection.execute("ROLLBACK")
                raise

    @contextmanager
    def _errors_named(self, action: str) -> Iterator[None]:
        """Turn SQLite's exceptions into a message that names the file and says what to do."""
        try:
            yield
        except sqlite3.Error as err:
            raise ChatStoreError(self._explain(action, err)) from err

    def _explain(self, action: str, err: sqlite3.Error) -> str:
        text = str(err)
        if isinstance(err, sqlite3.OperationalError) and "locked" in text:
            return (
                f"The chats file {self.path} is locked by another program (is the app open twice?). "
                "Close the other one and try again."
            )
        if isinstance(err, sqlite3.DatabaseError) and ("not a database" in text or "malformed" in text):
            return (
                f"The chats file {self.path} is damaged ({text}). Move it aside to start with no chats; "
                "the app cannot read the conversations in it."
            )
        if isinstance(err, sqlite3.ProgrammingError) and "closed" in text:
            return f"The chats file {self.path} is closed."
        return f"Could not {action} the chats file {self.path}: {text}."

    @contextmanager
    def _reading(self) -> Iterator[sqlite3.Connection]:
        with self._lock, self._errors_named("read"):
            yield self._open_connection()

    @contextmanager
    def _writing(self) -> Iterator[sqlite3.Connection]:
        """One transaction: IMMEDIATE takes the write lock up front, so a busy file waits (the busy
        timeout) instead of failing halfway through."""
        with self._lock, self._errors_named("write"):
            connection = self._open_connection()
            connection.execute("BEGIN IMMEDIATE")
            try:
                yield connection
            except BaseException:
                if connection.in_transaction:
                    connection.execute("ROLLBACK")
                raise
            connection.execute("COMMIT")

    def _open_connection(self) -> sqlite3.Connection:
        if self._connection is None:
            raise ChatStoreError(f"The chats file {self.path} is closed.")
        return self._connection

    def close(self) -> None:
        """Close the file (idempotent); later calls raise ChatStoreError."""
        with self._lock:
            if self._connection is not None:
                self._connection.close()
                self._connection = None

    def __enter__(self) -> ChatStore:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- conversations ---------------------------------------------------------------------------

    def create(
        self,
        *,
        title: str = DEFAULT_TITLE,
        model: str | None = None,
        system_prompt: str = "",
        settings: ChatSettings | None = None,
    ) -> Conversation:
        """A new, empty conversation."""
        now = time.time()
        settings = settings or ChatSettings()
        with self._writing() as db:
            cursor = db.execute(
                "INSERT INTO conversations (title, model, system_prompt, settings, created, updated)"
                " VALUES (?, ?, ?, ?, ?, ?)",
                (title, model, system_prompt, settings.model_dump_json(), now, now),
            )
            conversation_id = cursor.lastrowid
        assert conversation_id is not None
        return Conversation(
            id=conversation_id,
            title=title,
            model=model,
            system_prompt=system_prompt,
            settings=settings,
            created=now,
            updated=now,
        )

    def conversations(self, search: str | None = None) -> list[Conversation]:
        """Every conversation, the most recently active first; `search` keeps those whose title or any
        message's text contains it (case-insensitive)."""
        query = "SELECT * FROM conversations"
        parameters: tuple[str, ...] = ()
        needle = _fold(search).strip()
        if needle:
            query += (
                " WHERE instr(launcher_fold(title), ?) > 0 OR EXISTS (SELECT 1 FROM messages"
                " WHERE messages.conversation_id = conversations.id AND instr(launcher_fold(content), ?) > 0)"
            )
            parameters = (needle, needle)
        with self._reading() as db:
            rows = db.execute(query + " ORDER BY updated DESC, id DESC", parameters).fetchall()
        return [self._conversation(row) for row in rows]

    def get(self, conversation_id: int) -> Conversation:
        """One conversation; ChatStoreError when there is no such chat."""
        with self._reading() as db:
            row = db.execute("SELECT * FROM conversations WHERE id = ?", (conversation_id,)).fetchone()
        if row is None:
            raise self._no_such_chat(conversation_id)
        return self._conversation(row)

    def save(self, conversation: Conversation) -> Conversation:
        """Store a conversation's title, model, system prompt and settings; returns it with `updated` bumped."""
        now = time.time()
        with self._writing() as db:
            cursor = db.execute(
                "UPDATE conversations SET title = ?, model = ?, system_prompt = ?, settings = ?, updated = ?"
                " WHERE id = ?",
                (
                    conversation.title,
                    conversation.model,
                    conversation.system_prompt,
                    conversation.settings.model_dump_json(),
                    now,
                    conversation.id,
                ),
            )
            if cursor.rowcount == 0:
                raise self._no_such_chat(conversation.id)
        return conversation.model_copy(update={"updated": now})

    def rename(self, conversation_id: int, title: str) -> None:
        """Change a chat's title. Not activity: the chat keeps its place in the list."""
        with self._writing() as db:
            cursor = db.execute("UPDATE conversations SET title = ? WHERE id = ?", (title, conversation_id))
            if cursor.rowcount == 0:
                raise self._no_such_chat(conversation_id)

    def delete(self, conversation_id: int) -> None:
        """Delete a chat and its messages; deleting one that is already gone is not an error."""
        with self._writing() as db:
            db.execute("DELETE FROM conversations WHERE id = ?", (conversation_id,))

    # -- messages --------------------------------------------------------------------------------

    def messages(self, conversation_id: int) -> list[Message]:
        """A conversation's messages, oldest first."""
        with self._reading() as db:
            rows = db.execute(
                "SELECT * FROM messages WHERE conversation_id = ? ORDER BY id", (conversation_id,)
            ).fetchall()
        return [self._message(row) for row in rows]

    def add_message(
        self,
        conversation_id: int,
        role: Role,
        content: str = "",
        *,
        reasoning: str = "",
        tool_calls: Sequence[dict[str, Any]] = (),
        tool_call_id: str | None = None,
        attachments: Sequence[Attachment] = (),
        finished: bool = True,
        error: str | None = None,
    ) -> Message:
        """Append a message (an answer about to stream is added with finished=False) and mark the chat active."""
        message = Message(
            id=0,
            conversation_id=conversation_id,
            role=role,
            content=content,
            reasoning=reasoning,
            tool_calls=list(tool_calls),
            tool_call_id=tool_call_id,
            attachments=list(attachments),
            created=time.time(),
            finished=finished,
            error=error,
        )
        with self._writing() as db:
            touched = db.execute(
                "UPDATE conversations SET updated = ? WHERE id = ?", (message.created, conversation_id)
            )
            if touched.rowcount == 0:
                raise self._no_such_chat(conversation_id)
            cursor = db.execute(
                "INSERT INTO messages (conversation_id, role, content, reasoning, tool_calls, tool_call_id,"
                " attachments, created, finished, error) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
                (
                    conversation_id,
                    role,
                    content,
                    reasoning,
                    json.dumps(message.tool_calls, ensure_ascii=False),
                    tool_call_id,
                    _ATTACHMENTS.dump_json(message.attachments).decode(),
                    message.created,
                    int(finished),
                    error,
                ),
            )
            message_id = cursor.lastrowid
        assert message_id is not None
        return message.model_copy(update={"id": message_id})

    def update_message(
        self,
        message_id: int,
        *,
        content: str | _Unset = UNSET,
        reasoning: str | _Unset = UNSET,
        tool_calls: Sequence[dict[str, Any]] | _Unset = UNSET,
        finished: bool | _Unset = UNSET,
        error: str | _Unset | None = UNSET,
    ) -> None:
        """Change the fields given (a streamed answer's text so far, its end, its error).

        A message that is gone (its chat was deleted while the answer streamed) is not an error: the
        worker saving into it has nothing left to keep.
        """
        columns: dict[str, Any] = {}
        if not isinstance(content, _Unset):
            columns["content"] = content
        if not isinstance(reasoning, _Unset):
            columns["reasoning"] = reasoning
        if not isinstance(tool_calls, _Unset):
            columns["tool_calls"] = json.dumps(list(tool_calls), ensure_ascii=False)
        if not isinstance(finished, _Unset):
            columns["finished"] = int(finished)
        if not isinstance(error, _Unset):
            columns["error"] = error
        if not columns:
            return
        assignments = ", ".join(f"{name} = ?" for name in columns)  # names from the fixed set above
        with self._writing() as db:
            db.execute(f"UPDATE messages SET {assignments} WHERE id = ?", (*columns.values(), message_id))

    def delete_from(self, conversation_id: int, message_id: int) -> None:
        """Delete a message and every later one of its chat (edit-and-resend, regenerate)."""
        with self._writing() as db:
            db.execute("DELETE FROM messages WHERE conversation_id = ? AND id >= ?", (conversation_id, message_id))
            db.execute("UPDATE conversations SET updated = ? WHERE id = ?", (time.time(), conversation_id))

    # -- export ----------------------------------------------------------------------------------

    def export_json(self, conversation_id: int) -> str:
        """The whole chat (settings, every message with its attachments) as one JSON document."""
        conversation = self.get(conversation_id)
        document = {
            "format": EXPORT_FORMAT,
            "version": SCHEMA_VERSION,
            "conversation": conversation.model_dump(mode="json"),
            "messages": [message.model_dump(mode="json") for message in self.messages(conversation_id)],
        }
        return json.dumps(document, indent=2, ensure_ascii=False) + "\n"

    def export_markdown(self, conversation_id: int) -> str:
        """The chat as a Markdown document a person reads: a section per message, code kept verbatim."""
        conversation = self.get(conversation_id)
        parts = [f"# {conversation.title}\n"]
        facts = [f"- Model: {conversation.model}" if conversation.model else "- Model: (the server's model)"]
        facts.append(f"- Created: {time.strftime('%Y-%m-%d %H:%M', time.localtime(conversation.created))}")
        parts.append("\n".join(facts) + "\n")
        if conversation.system_prompt:
            parts.append(f"## System prompt\n\n{conversation.system_prompt.strip()}\n")
        for message in self.messages(conversation_id):
            parts.append(_message_markdown(message))
        return "\n".join(parts)

    # -- rows ------------------------------------------------------------------------------------

    def _conversation(self, row: sqlite3.Row) -> Conversation:
        try:
            return Conversation(
                id=row["id"],
                title=row["title"],
                model=row["model"],
                system_prompt=row["system_prompt"],
                settings=ChatSettings.model_validate_json(row["settings"]),
                created=row["created"],
                updated=row["updated"],
            )
        except ValidationError as err:
            raise self._damaged_row("chat", row["id"], err) from err

    def _message(self, row: sqlite3.Row) -> Message:
        try:
            return Message(
                id=row["id"],
                conversation_id=row["conversation_id"],
                role=row["role"],
                content=row["content"],
                reasoning=row["reasoning"],
                tool_calls=_TOOL_CALLS.validate_json(row["tool_calls"]),
                tool_call_id=row["tool_call_id"],
                attachments=_ATTACHMENTS.validate_json(row["attachments"]),
                created=row["created"],
                finished=bool(row["finished"]),
                error=row["error"],
            )
        except ValidationError as err:
            raise self._damaged_row("message", row["id"], err) from err

    def _damaged_row(self, what: str, row_id: int, err: ValidationError) -> ChatStoreError:
        problem = err.errors()[0]["msg"] if err.errors() else str(err)
        return ChatStoreError(f"The chats file {self.path} holds a damaged {what} (id {row_id}): {problem}.")

    def _no_such_chat(self, conversation_id: int) -> ChatStoreError:
        return ChatStoreError(f"There is no chat with id {conversation_id} in {self.path} (it may have been deleted).")


_ROLE_HEADINGS = {"system": "System", "user": "User", "assistant": "Assistant", "tool": "Tool result"}


def parse_arguments(raw: str) -> dict[str, Any] | None:
    """A tool call's arguments text as the JSON object it holds: {} when blank, None when not an object."""
    if not raw.strip():
        return {}
    try:
        value = json.loads(raw)
    except ValueError:
        return None
    return value if isinstance(value, dict) else None


def code_fence(text: str) -> str:
    """The backtick run that fences `text`: at least three, and longer than any run inside it."""
    longest = max((len(run) for run in re.findall(r"`+", text)), default=0)
    return "`" * max(3, longest + 1)


def _fence(text: str, info: str = "") -> str:
    """A fenced block that holds `text` verbatim: longer than any backtick run inside it."""
    fence = code_fence(text)
    return f"{fence}{info}\n{text.rstrip(chr(10))}\n{fence}"


def _message_markdown(message: Message) -> str:
    heading = _ROLE_HEADINGS[message.role]
    if message.role == "tool" and message.tool_call_id:
        heading += f" ({message.tool_call_id})"
    parts = [f"## {heading}\n"]
    if message.reasoning.strip():
        parts.append(f"<details><summary>Reasoning</summary>\n\n{message.reasoning.strip()}\n\n</details>\n")
    if message.role == "tool":
        parts.append(_fence(message.content) + "\n")
    elif message.content.strip():
        parts.append(message.content.strip() + "\n")
    for attachment in message.attachments:
        if attachment.kind == "text" and attachment.text is not None:
            parts.append(f"Attached `{attachment.name}`:\n\n{_fence(attachment.text)}\n")
        else:
            parts.append(f"Attached image `{attachment.name}` ({attachment.mime}, {attachment.size} bytes).\n")
    for call in message.tool_calls:
        function = call.get("function") or {}
        arguments = function.get("arguments", "")
        try:
            arguments = json.dumps(json.loads(arguments), indent=2, ensure_ascii=False)
        except (TypeError, ValueError):
            arguments = str(arguments)  # shown as the model wrote it
        parts.append(
            f"Tool call `{function.get('name', '?')}` ({call.get('id', '')}):\n\n{_fence(arguments, 'json')}\n"
        )
    if not message.finished:
        parts.append("*(this answer was cut short)*\n")
    if message.error:
        parts.append(f"> Error: {message.error}\n")
    return "\n".join(parts)
