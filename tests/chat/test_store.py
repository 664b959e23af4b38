"""The Chat page's conversations on disk (launcher/chat/store.py): what a user keeps between runs, what
the page asks of the file (search, edit-and-resend, export), and the clear errors a damaged or busy file gives."""

from __future__ import annotations

import json
import sqlite3
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from launcher.chat.store import (
    SCHEMA_VERSION,
    Attachment,
    ChatSettings,
    ChatStore,
    ChatStoreError,
    auto_title,
    chats_file,
)
from launcher.core import paths
from launcher.core.errors import LauncherError

TOOL_CALL = {"id": "call_1", "type": "function", "function": {"name": "files__read", "arguments": '{"path": "a.txt"}'}}
NOTES = Attachment(name="notes.txt", kind="text", mime="text/plain", text="line one\nline two\n", size=18)
PICTURE = Attachment(name="cat.png", kind="image", mime="image/png", data_base64="iVBORw0KGgo=", size=8)


@pytest.fixture
def store(tmp_path: Path) -> Iterator[ChatStore]:
    with ChatStore(tmp_path / "chats.sqlite3") as opened:
        yield opened


def fill(store: ChatStore) -> int:
    """A chat with every kind of message: attachments, reasoning, a tool call and its result."""
    chat = store.create(
        title="Reading files", model="qwen3-4b", system_prompt="Be brief.", settings=ChatSettings(temperature=0.2)
    )
    store.add_message(chat.id, "user", "Summarise my notes", attachments=[NOTES, PICTURE])
    store.add_message(chat.id, "assistant", "", reasoning="The user wants a summary.", tool_calls=[TOOL_CALL])
    store.add_message(chat.id, "tool", "line one\nline two", tool_call_id="call_1")
    store.add_message(chat.id, "assistant", "Two lines: **one** and **two**.")
    return chat.id


def test_the_default_file_is_in_the_data_folder() -> None:
    assert chats_file() == paths.data_dir() / "chats.sqlite3"
    with ChatStore() as store:
        chat = store.create(title="Default place")
    assert chats_file().is_file()
    with ChatStore() as again:
        assert [c.title for c in again.conversations()] == ["Default place"]
        assert again.get(chat.id) == chat


def test_a_conversation_survives_closing_and_reopening(tmp_path: Path) -> None:
    path = tmp_path / "data" / "chats.sqlite3"  # the folder is created on first use
    with ChatStore(path) as store:
        chat_id = fill(store)
        before = store.get(chat_id), store.messages(chat_id)
    with ChatStore(path) as reopened:
        after = reopened.get(chat_id), reopened.messages(chat_id)
    assert after == before
    conversation, messages = after
    assert conversation.settings == ChatSettings(temperature=0.2) and conversation.system_prompt == "Be brief."
    assert [m.role for m in messages] == ["user", "assistant", "tool", "assistant"]
    assert messages[0].attachments == [NOTES, PICTURE]
    assert messages[1].tool_calls == [TOOL_CALL] and messages[1].reasoning == "The user wants a summary."
    assert messages[2].tool_call_id == "call_1"
    assert all(m.finished and m.error is None for m in messages)


def test_the_file_is_in_wal_mode_with_its_schema_version(store: ChatStore) -> None:
    store.create()
    check = sqlite3.connect(store.path)
    try:
        assert check.execute("PRAGMA journal_mode").fetchone()[0] == "wal"
        assert check.execute("PRAGMA user_version").fetchone()[0] == SCHEMA_VERSION
    finally:
        check.close()


def test_the_most_recently_active_chat_comes_first(store: ChatStore) -> None:
    first = store.create(title="first")
    second = store.create(title="second")
    assert [c.title for c in store.conversations()] == ["second", "first"]
    time.sleep(0.01)
    store.add_message(first.id, "user", "hello again")
    assert [c.title for c in store.conversations()] == ["first", "second"]
    store.rename(second.id, "renamed")  # not activity: the order stays
    assert [c.title for c in store.conversations()] == ["first", "renamed"]
    time.sleep(0.01)
    saved = store.save(second.model_copy(update={"title": "saved", "model": "gemma-3-270m"}))
    assert saved.updated > second.updated
    assert [c.title for c in store.conversations()] == ["saved", "first"]
    assert store.get(second.id).model == "gemma-3-270m"


def test_search_finds_titles_and_message_text_whatever_the_case(store: ChatStore) -> None:
    paris = store.create(title="Trip to Paris")
    code = store.create(title="Code help")
    store.add_message(code.id, "user", "Why does my Über-Parser fail?")
    store.add_message(code.id, "assistant", "Because of the regex.")
    store.create(title="Empty")

    def titles(search: str | None) -> list[str]:
        return [c.title for c in store.conversations(search)]

    assert titles("PAR") == ["Code help", "Trip to Paris"]  # "Über-Parser" in a message, and a title
    assert titles("REGEX") == ["Code help"]
    assert titles("über") == ["Code help"]  # non-ASCII folds too (SQLite's LIKE would not)
    assert titles("100%_") == []  # no wildcards: the text is searched as typed
    assert titles("") == titles(None) == titles("  ") == ["Empty", "Code help", "Trip to Paris"]
    assert paris.id in {c.id for c in store.conversations("trip")}


def test_delete_removes_the_chat_and_its_messages(store: ChatStore) -> None:
    kept = store.create(title="kept")
    store.add_message(kept.id, "user", "stay")
    gone = fill(store)
    store.delete(gone)
    assert [c.title for c in store.conversations()] == ["kept"]
    assert store.messages(gone) == []
    with pytest.raises(ChatStoreError, match=f"no chat with id {gone}"):
        store.get(gone)
    store.delete(gone)  # already gone: nothing to do
    assert [m.content for m in store.messages(kept.id)] == ["stay"]


def test_delete_from_removes_that_message_and_every_later_one(store: ChatStore) -> None:
    chat_id = fill(store)
    other = store.create(title="other")
    other_message = store.add_message(other.id, "user", "untouched")
    messages = store.messages(chat_id)
    store.delete_from(chat_id, messages[1].id)  # regenerate: from the first answer on
    assert store.messages(chat_id) == messages[:1]
    store.delete_from(chat_id, messages[0].id)  # edit-and-resend of the first question
    assert store.messages(chat_id) == []
    store.delete_from(chat_id, other_message.id)  # another chat's message id: nothing of that chat goes
    assert store.messages(other.id) == [other_message]


def test_a_streamed_answer_is_saved_as_it_grows(store: ChatStore) -> None:
    chat = store.create()
    answer = store.add_message(chat.id, "assistant", finished=False)
    assert answer.id > 0 and not answer.finished
    store.update_message(answer.id, content="Hel", reasoning="thinking")
    assert store.messages(chat.id)[0].content == "Hel"
    store.update_message(answer.id, content="Hello", error="The server stopped.")
    saved = store.messages(chat.id)[0]
    assert (saved.content, saved.reasoning, saved.finished) == ("Hello", "thinking", False)
    assert saved.error == "The server stopped."
    store.update_message(answer.id, finished=True, error=None, tool_calls=[TOOL_CALL])  # None clears the error
    saved = store.messages(chat.id)[0]
    assert (saved.content, saved.finished, saved.error, saved.tool_calls) == ("Hello", True, None, [TOOL_CALL])
    store.update_message(answer.id)  # nothing given: nothing changes
    store.delete(chat.id)
    store.update_message(answer.id, content="late")  # the chat was deleted while the answer streamed


def test_missing_chats_are_named_in_the_error(store: ChatStore) -> None:
    ghost = store.create()
    store.delete(ghost.id)
    for action in (
        lambda: store.rename(ghost.id, "x"),
        lambda: store.save(ghost),
        lambda: store.add_message(ghost.id, "user", "hi"),
    ):
        with pytest.raises(ChatStoreError, match=f"no chat with id {ghost.id}"):
            action()


def test_export_json_holds_the_whole_chat(store: ChatStore) -> None:
    chat_id = fill(store)
    document = json.loads(store.export_json(chat_id))
    assert document["format"] == "launcher-chat" and document["version"] == SCHEMA_VERSION
    assert document["conversation"]["title"] == "Reading files"
    assert document["conversation"]["settings"] == {"temperature": 0.2, "top_p": None, "max_tokens": None}
    assert [m["role"] for m in document["messages"]] == ["user", "assistant", "tool", "assistant"]
    assert document["messages"][0]["attachments"][1]["data_base64"] == PICTURE.data_base64
    assert document["messages"][1]["tool_calls"] == [TOOL_CALL]


def test_export_markdown_reads_as_a_document(store: ChatStore) -> None:
    chat_id = fill(store)
    cut = store.add_message(chat_id, "user", "Show code")
    answer = store.add_message(chat_id, "assistant", "Here:\n\n```python\nprint('```')\n```", finished=False)
    store.update_message(answer.id, error="Stopped.")
    text = store.export_markdown(chat_id)
    assert text.startswith("# Reading files\n")
    assert "- Model: qwen3-4b" in text and "## System prompt\n\nBe brief." in text
    sections = [line for line in text.splitlines() if line.startswith("## ")]
    assert sections == [
        "## System prompt",
        "## User",
        "## Assistant",
        "## Tool result (call_1)",
        "## Assistant",
        "## User",
        "## Assistant",
    ]
    assert "<details><summary>Reasoning</summary>\n\nThe user wants a summary.\n\n</details>" in text
    assert "Attached `notes.txt`:\n\n```\nline one\nline two\n```" in text
    assert "Attached image `cat.png` (image/png, 8 bytes)." in text
    assert 'Tool call `files__read` (call_1):\n\n```json\n{\n  "path": "a.txt"\n}\n```' in text
    assert "Two lines: **one** and **two**." in text  # the answer's own markdown, as written
    assert "```python\nprint('```')\n```" in text and "*(this answer was cut short)*" in text
    assert "> Error: Stopped." in text
    assert cut.content in text


def test_a_text_with_backticks_gets_a_longer_fence(store: ChatStore) -> None:
    chat = store.create()
    store.add_message(chat.id, "tool", "a ``` b ```` c", tool_call_id="x")
    assert "`````\na ``` b ```` c\n`````" in store.export_markdown(chat.id)


def test_writes_from_worker_threads_while_the_window_reads(store: ChatStore) -> None:
    chats = [store.create(title=f"chat {n}") for n in range(4)]
    streamed = store.add_message(chats[0].id, "assistant", finished=False)
    failures: list[BaseException] = []
    stop = threading.Event()

    def add_many(chat_id: int) -> None:
        try:
            for n in range(50):
                store.add_message(chat_id, "user", f"message {n}")
        except BaseException as err:  # reported by the assertion below
            failures.append(err)

    def stream() -> None:
        text = ""
        try:
            while not stop.is_set():
                text += "token "
                store.update_message(streamed.id, content=text)
        except BaseException as err:
            failures.append(err)

    writers = [threading.Thread(target=add_many, args=(chat.id,)) for chat in chats]
    streamer = threading.Thread(target=stream)
    for thread in [*writers, streamer]:
        thread.start()
    while any(thread.is_alive() for thread in writers):  # the window keeps reading meanwhile
        store.conversations("message")
        store.messages(chats[0].id)
    stop.set()
    streamer.join()
    for thread in writers:
        thread.join()
    assert failures == []
    for chat in chats:
        contents = [m.content for m in store.messages(chat.id) if m.role == "user"]
        assert contents == [f"message {n}" for n in range(50)]
    assert store.messages(chats[0].id)[0].content.startswith("token token")


def test_a_damaged_file_gives_a_clear_error(tmp_path: Path) -> None:
    path = tmp_path / "chats.sqlite3"
    path.write_bytes(b"this is not a database, just some bytes " * 100)
    with pytest.raises(ChatStoreError) as caught:
        ChatStore(path)
    assert isinstance(caught.value, LauncherError)
    assert str(path) in str(caught.value) and "damaged" in str(caught.value)
    assert "Move it aside" in str(caught.value)


def test_a_damaged_row_gives_a_clear_error(store: ChatStore) -> None:
    chat = store.create()
    store.add_message(chat.id, "user", "hi")
    raw = sqlite3.connect(store.path)
    try:
        raw.execute("UPDATE messages SET role = 'wizard'")
        raw.commit()
    finally:
        raw.close()
    with pytest.raises(ChatStoreError, match="holds a damaged message"):
        store.messages(chat.id)


def test_a_file_locked_by_another_program_gives_a_clear_error(tmp_path: Path) -> None:
    path = tmp_path / "chats.sqlite3"
    with ChatStore(path, busy_timeout_s=0.2) as store:
        chat = store.create()
        other = sqlite3.connect(path, isolation_level=None)
        try:
            other.execute("BEGIN EXCLUSIVE")
            started = time.monotonic()
            with pytest.raises(ChatStoreError, match="locked by another program") as caught:
                store.add_message(chat.id, "user", "hi")
            assert time.monotonic() - started < 5  # it waits the busy timeout, not forever
            assert str(path) in str(caught.value)
            other.execute("ROLLBACK")
        finally:
            other.close()
        store.add_message(chat.id, "user", "hi")  # free again: it works
        assert [m.content for m in store.messages(chat.id)] == ["hi"]


def test_a_file_from_a_newer_app_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "chats.sqlite3"
    ChatStore(path).close()
    raw = sqlite3.connect(path)
    try:
        raw.execute(f"PRAGMA user_version = {SCHEMA_VERSION + 1}")
    finally:
        raw.close()
    with pytest.raises(ChatStoreError, match="newer version of the app"):
        ChatStore(path)


def test_a_closed_store_says_so(tmp_path: Path) -> None:
    store = ChatStore(tmp_path / "chats.sqlite3")
    store.close()
    store.close()  # twice is fine
    with pytest.raises(ChatStoreError, match="is closed"):
        store.conversations()
    with pytest.raises(ChatStoreError, match="is closed"):
        store.create()


@pytest.mark.parametrize(
    ("text", "title"),
    [
        ("What is a GGUF file?", "What is a GGUF file?"),
        ("\n\n   Explain   this:\nsecond line", "Explain this:"),
        ("x" * 80, "x" * 59 + "…"),
        ("", "New chat"),
        ("  \n \t\n", "New chat"),
    ],
)
def test_auto_title_is_the_first_line_cut_to_60_characters(text: str, title: str) -> None:
    assert auto_title(text) == title
    assert len(auto_title(text)) <= 60
