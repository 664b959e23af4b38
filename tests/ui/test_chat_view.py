"""The Chat page's transcript (launcher/ui/chat_view.py) driven as a user would: markdown shown as rich text,
code highlighted and copied, message actions, folded thinking, tool cards, and a 20,000-token answer
streamed without stalling the event loop (measured with a 10 ms heartbeat)."""

from __future__ import annotations

import collections
import gc
import itertools
import json
import os
import re
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest
from PySide6.QtCore import QEventLoop, Qt, QTimer, QUrl
from PySide6.QtGui import QColor, QFont, QGuiApplication, QImage, QTextCursor, QTextDocument
from PySide6.QtWidgets import QAbstractButton

from launcher.chat import session
from launcher.chat.store import Attachment, Message
from launcher.ui import chat_markdown, chat_view, theme
from launcher.ui.chat_markdown import Block, CodeBlockView, ProseView, code_formats, split_stream
from launcher.ui.chat_view import ChatView, ToolCallCard

CODE = (
    'def greet(name: str) -> str:\n    """Say hello."""\n    return f"Hello, {name}!"  # friendly\n\n\n'
    'print(greet("you"))'
)
ANSWER = f"""# A heading

Some **bold words**, *emphasis* and `inline code`.

- first item
- second item

1. one
2. two

```python
{CODE}
```

The end.
"""


def message(message_id: int, role: str, content: str, **fields: Any) -> Message:
    return Message(id=message_id, conversation_id=1, role=role, content=content, created=time.time(), **fields)


def make_view(qtbot: Any) -> ChatView:
    view = ChatView()
    qtbot.addWidget(view)
    view.resize(900, 700)
    view.show()
    qtbot.waitExposed(view)
    return view


def button(widget: Any, name: str) -> QAbstractButton:
    """The visible button a screen reader announces as `name`."""
    found = [b for b in widget.findChildren(QAbstractButton) if b.accessibleName() == name and b.isVisibleTo(widget)]
    assert len(found) == 1, f"{len(found)} visible buttons named {name!r}"
    return found[0]


def buttons(widget: Any, name: str) -> list[QAbstractButton]:
    return [b for b in widget.findChildren(QAbstractButton) if b.accessibleName() == name and b.isVisibleTo(widget)]


def rendered_text(widget: Any) -> str:
    return "\n".join(view.toPlainText() for view in widget.findChildren(ProseView))


def test_markdown_renders_as_rich_text(qtbot) -> None:  # type: ignore[no-untyped-def]
    view = make_view(qtbot)
    view.set_messages([message(1, "user", "Show me"), message(2, "assistant", ANSWER)])
    answer = view.message_widgets()[1]
    text = rendered_text(answer)
    assert "A heading" in text and "bold words" in text and "first item" in text
    assert "**" not in text and "# A" not in text and "- first" not in text  # no raw markdown left
    heading = bold = bullets = numbered = False
    for prose in answer.findChildren(ProseView):
        block = prose.document().begin()
        while block.isValid():
            heading |= block.blockFormat().headingLevel() == 1 and block.text() == "A heading"
            if block.textList() is not None:
                style = block.textList().format().style()
                bullets |= block.text() == "first item" and style.value < 0 and "Decimal" not in style.name
                numbered |= block.text() == "two" and "Decimal" in style.name
            iterator = block.begin()
            while not iterator.atEnd():
                fragment = iterator.fragment()
                if fragment.text() == "bold words":
                    bold = fragment.charFormat().fontWeight() >= QFont.Weight.Bold.value
                iterator += 1
            block = block.next()
    assert heading and bold and bullets and numbered


def test_code_block_is_highlighted_and_copies_exactly_the_code(qtbot) -> None:  # type: ignore[no-untyped-def]
    view = make_view(qtbot)
    view.set_messages([message(1, "assistant", ANSWER)])
    [block] = view.findChildren(CodeBlockView)
    assert block.language == "python"
    document = block.view.document()
    assert document.toPlainText() == CODE
    colours = set()
    cursor = QTextCursor(document)
    for position in range(len(CODE)):
        cursor.setPosition(position + 1)
        colours.add(cursor.charFormat().foreground().color().name())
    assert len(colours) >= 3, colours  # keywords, strings, comments, names: several colours
    copied = []
    view.copy_requested.connect(copied.append)
    QGuiApplication.clipboard().clear()
    qtbot.mouseClick(button(block, "Copy code"), Qt.MouseButton.LeftButton)
    assert QGuiApplication.clipboard().text() == CODE
    assert copied == [CODE]


@pytest.fixture
def themed(qapp):  # type: ignore[no-untyped-def]
    """The app's own look (style, palette, style sheet), put back as it was afterwards."""
    style, palette, sheet = qapp.style().name(), qapp.palette(), qapp.styleSheet()
    theme.apply(qapp, dark=False)
    yield qapp
    qapp.setStyle(style)
    qapp.setPalette(palette)
    qapp.setStyleSheet(sheet)


def test_code_colours_follow_the_theme(qtbot, themed) -> None:  # type: ignore[no-untyped-def]
    view = make_view(qtbot)
    view.set_messages([message(1, "assistant", ANSWER)])
    [block] = view.findChildren(CodeBlockView)

    def colours() -> collections.Counter[str]:
        cursor = QTextCursor(block.view.document())
        found: collections.Counter[str] = collections.Counter()
        for position, char in enumerate(CODE, start=1):
            cursor.setPosition(position)
            if not char.isspace():
                found[cursor.charFormat().foreground().color().name()] += 1
        return found

    light = colours()
    assert QColor(light.most_common(1)[0][0]).lightness() < 128  # dark text on the light block
    assert code_formats("default").background in view.styleSheet()
    theme.apply(themed, dark=True)
    dark = colours()
    assert block.view.document().toPlainText() == CODE and set(light) != set(dark)
    assert QColor(dark.most_common(1)[0][0]).lightness() > 128  # light text on the dark block
    assert code_formats("github-dark").background in view.styleSheet()


def test_message_copy_edit_and_regenerate(qtbot) -> None:  # type: ignore[no-untyped-def]
    view = make_view(qtbot)
    view.set_messages(
        [
            message(1, "user", "first question"),
            message(2, "assistant", "first **answer**"),
            message(3, "user", "second question"),
            message(4, "assistant", ANSWER),
        ]
    )
    widgets = view.message_widgets()
    assert len(buttons(view, "Copy message")) == 4
    qtbot.mouseClick(button(widgets[1], "Copy message"), Qt.MouseButton.LeftButton)
    assert QGuiApplication.clipboard().text() == "first **answer**"  # the raw markdown
    qtbot.mouseClick(button(widgets[3], "Copy message"), Qt.MouseButton.LeftButton)
    assert QGuiApplication.clipboard().text() == ANSWER
    # Edit only on the last user message, Regenerate only on the last answer.
    assert not buttons(widgets[0], "Edit message") and not buttons(widgets[1], "Regenerate answer")
    with qtbot.waitSignal(view.edit_requested) as edit:
        qtbot.mouseClick(button(view, "Edit message"), Qt.MouseButton.LeftButton)
    assert edit.args == [3]
    with qtbot.waitSignal(view.regenerate_requested):
        qtbot.mouseClick(button(widgets[3], "Regenerate answer"), Qt.MouseButton.LeftButton)
    # While an answer streams there is nothing to edit or regenerate; after it, the new answer regenerates.
    view.add_message(message(5, "user", "third"))
    view.begin_assistant()
    assert not buttons(view, "Edit message") and not buttons(view, "Regenerate answer")
    view.append_text("streamed *answer*")
    view.finish()
    assert buttons(view.message_widgets()[-1], "Regenerate answer")
    assert button(view.message_widgets()[-2], "Edit message")


def test_set_messages_keeps_what_is_shown_and_replaces_the_rest(qtbot) -> None:  # type: ignore[no-untyped-def]
    view = make_view(qtbot)
    history = [message(1, "user", "question"), message(2, "assistant", "old answer")]
    view.set_messages(history)
    first = view.message_widgets()[0]
    view.begin_assistant()
    view.append_text("streamed")
    view.finish()
    streamed = view.message_widgets()[-1]
    # The stored conversation after the stream: the streamed widget is adopted, not rendered again.
    view.set_messages([*history, message(3, "assistant", "streamed")])
    assert view.message_widgets()[0] is first and view.message_widgets()[-1] is streamed
    assert streamed.message_id == 3
    # Regenerate: the answers after the question were deleted and a new one stored.
    view.set_messages([history[0], message(4, "assistant", "new answer")])
    widgets = view.message_widgets()
    assert widgets[0] is first and len(widgets) == 2 and widgets[1].text() == "new answer"


def _conversation(count: int, long_answer: str) -> list[Message]:
    """`count` messages, user and assistant in turn, the last answer `long_answer`."""
    messages = [
        message(i + 1, "user" if i % 2 == 0 else "assistant", f"message {i} with **bold** and `code`")
        for i in range(count - 1)
    ]
    return [*messages, message(count, "assistant", long_answer)]


def _open_and_measure(view: ChatView, messages: list[Message]) -> tuple[float, float, float]:
    """set_messages, then the event loop until all is shown: (seconds set_messages took, the biggest
    event-loop stall, the most the UI thread worked within one heartbeat gap)."""
    beats: list[tuple[float, float]] = []
    heartbeat = QTimer()
    heartbeat.setTimerType(Qt.TimerType.PreciseTimer)
    heartbeat.timeout.connect(lambda: beats.append((time.perf_counter(), time.thread_time())))
    loop = QEventLoop()
    check = QTimer()
    check.timeout.connect(lambda: None if view.is_rendering() else loop.quit())
    gc.collect()
    heartbeat.start(HEARTBEAT_MS)
    started = time.perf_counter()
    view.set_messages(messages)
    took = time.perf_counter() - started
    check.start(5)
    QTimer.singleShot(120_000, loop.quit)
    loop.exec()
    heartbeat.stop()
    assert not view.is_rendering()
    stall = max(b[0] - a[0] for a, b in itertools.pairwise(beats)) - HEARTBEAT_MS / 1000
    busy = max(b[1] - a[1] for a, b in itertools.pairwise(beats))
    return took, stall, busy


def test_a_long_conversation_opens_end_first_in_steps(qtbot) -> None:  # type: ignore[no-untyped-def]
    """Opening 60 messages and a 10,000-token answer: set_messages shows the end and returns, the rest
    follows in steps while the event loop runs. The timings are printed, not asserted: a busy machine
    stretches them (see the module's stall notes below)."""
    view = make_view(qtbot)
    long_answer = _long_answer(10_000)
    messages = _conversation(60, long_answer)
    on_return: list[tuple[int | None, bool]] = []
    view.set_messages = _after(  # type: ignore[method-assign]
        view.set_messages, lambda: on_return.append((view.message_widgets()[-1].message_id, view.is_rendering()))
    )
    took, stall, busy = _open_and_measure(view, messages)
    del view.set_messages  # the class's own again
    print(
        f"opened 60 messages and a 10,000-token answer: set_messages {took * 1000:.0f} ms, then a max stall of"
        f" {stall * 1000:.1f} ms (UI thread busy at most {busy * 1000:.1f} ms of a gap)"
    )
    # When set_messages returned, the end (what is in view) was shown and the rest was left to steps.
    assert on_return == [(messages[-1].id, True)]
    widgets = view.message_widgets()
    assert [w.text() for w in widgets] == [m.content for m in messages]
    assert len(widgets[-1].body.code_blocks()) == long_answer.count("```python")
    assert "**" not in rendered_text(widgets[1]) and "bold" in rendered_text(widgets[1])
    assert button(widgets[-2], "Edit message") and button(widgets[-1], "Regenerate answer")
    # Opened again while the first opening is still under way: the second one is what shows.
    view.set_messages([])
    view.set_messages(messages)
    assert view.is_rendering()
    view.set_messages(messages[:3])
    qtbot.waitUntil(lambda: not view.is_rendering())
    assert [w.text() for w in view.message_widgets()] == [m.content for m in messages[:3]]


def test_user_message_is_plain_text_with_its_attachments(qtbot) -> None:  # type: ignore[no-untyped-def]
    view = make_view(qtbot)
    attachment = Attachment(name="notes.txt", kind="text", mime="text/plain", text="x" * 2048, size=2048)
    view.set_messages([message(1, "user", "keep **these** stars", attachments=[attachment])])
    widget = view.message_widgets()[0]
    assert widget.plain is not None and widget.plain.toPlainText() == "keep **these** stars"
    assert "notes.txt (2.0 KB)" in widget.attachments.text()


def test_reasoning_is_folded_then_expands(qtbot) -> None:  # type: ignore[no-untyped-def]
    view = make_view(qtbot)
    view.begin_assistant()
    view.append_reasoning("Let me think about ")
    view.append_reasoning("this carefully.")
    view.append_text("The answer.")
    view.finish()
    fold = view.message_widgets()[-1].reasoning
    assert fold.isVisible() and not fold.body.isVisible()  # folded
    assert fold.toggle.text().startswith("Thought for")
    toggle = button(view, "Reasoning")
    qtbot.mouseClick(toggle, Qt.MouseButton.LeftButton)
    assert fold.body.isVisible() and fold.shown_text() == "Let me think about this carefully."
    qtbot.mouseClick(toggle, Qt.MouseButton.LeftButton)
    assert not fold.body.isVisible()
    # Long thinking streams into boxes of bounded size (each update lays out only the last one).
    view.begin_assistant()
    view.append_reasoning("x")
    view._render_live()
    fold = view.message_widgets()[-1].reasoning
    fold.set_expanded(True)
    endless = " ".join(f"thought{i}" for i in range(1500))
    for start in range(0, len(endless), 400):
        view.append_reasoning(endless[start : start + 400])
        view._render_live()
    view.finish()
    assert len(fold.boxes) >= 5 and fold.shown_text().replace("\n", "") == "x" + endless
    assert all(box.document().characterCount() <= chat_view.REASONING_CHUNK_CHARS + 1 for box in fold.boxes)
    # Stored thinking is folded too.
    view.set_messages([message(1, "assistant", "Answer", reasoning="Because.")])
    assert button(view, "Reasoning") and not view.message_widgets()[0].reasoning.body.isVisible()


@pytest.mark.parametrize(
    ("choice", "decision"), [("Allow once", "once"), ("Always allow files__read", "always"), ("Deny", "deny")]
)
def test_tool_card_asks_then_shows_the_result(qtbot, choice: str, decision: str) -> None:  # type: ignore[no-untyped-def]
    view = make_view(qtbot)
    view.begin_assistant()
    view.append_text("Let me look.")
    card = view.add_tool_call("call_1", "files__read", {"path": "/tmp/notes.txt", "lines": 3})
    assert isinstance(card, ToolCallCard)
    assert json.loads(card.arguments_view.toPlainText()) == {"path": "/tmp/notes.txt", "lines": 3}
    with qtbot.waitSignal(view.tool_decided) as decided:
        qtbot.mouseClick(button(card, choice), Qt.MouseButton.LeftButton)
    assert decided.args == ["call_1", decision]
    assert not buttons(card, "Allow once")  # answered: the question is gone
    if decision == "deny":
        card.set_result("The user denied this call.", denied=True)
        assert "Denied" in card.status.text() and not card.result_view.isVisible()
    else:
        card.set_result("line one\nline two", is_error=False)
        assert card.result_view.toPlainText() == "line one\nline two"
        qtbot.mouseClick(button(card, "Copy result"), Qt.MouseButton.LeftButton)
        assert QGuiApplication.clipboard().text() == "line one\nline two"
    # The next round's text goes under the card, in a message of its own.
    view.append_text("Done.")
    view.finish()
    assert [w.text() for w in view.message_widgets()] == ["Let me look.", "Done."]


def test_tool_error_and_stored_calls(qtbot) -> None:  # type: ignore[no-untyped-def]
    view = make_view(qtbot)
    card = view.add_tool_call("c9", "demo__slow", "not json")
    view.set_tool_result("c9", "demo: the call timed out after 1 s", is_error=True)
    assert card.status.text() == "The call failed:" and "timed out" in card.result_view.toPlainText()
    call = {"id": "c1", "type": "function", "function": {"name": "demo__add", "arguments": '{"a": 1, "b": 2}'}}
    denied = {"id": "c2", "type": "function", "function": {"name": "demo__add", "arguments": "{}"}}
    view.set_messages(
        [
            message(1, "user", "add"),
            message(2, "assistant", "", tool_calls=[call, denied]),
            message(3, "tool", "3", tool_call_id="c1"),
            message(4, "tool", "The user denied this call.", tool_call_id="c2"),
            message(5, "assistant", "It is 3."),
        ]
    )
    assert len(view.message_widgets()) == 3  # tool results show on their cards
    assert view.card("c1").result_view.toPlainText() == "3"
    assert view.card("c2").denied
    assert chat_view.DENIED_TEXT == session.DENIED_TEXT  # how a stored denial is recognised
    assert not buttons(view, "Allow once")  # history asks nothing


def test_note_and_error(qtbot) -> None:  # type: ignore[no-untyped-def]
    view = make_view(qtbot)
    note = view.add_note("Images need a model that takes them: photo.png was not sent.")
    assert note.isVisible() and "photo.png" in note.text()
    view.begin_assistant()
    view.append_text("Partial")
    view.finish("Stopped.")
    widget = view.message_widgets()[-1]
    assert widget.status.text() == "Stopped." and widget.text() == "Partial"


def _red_png(path: Path) -> Path:
    image = QImage(64, 64, QImage.Format.Format_ARGB32)
    image.fill(QColor("#ff0000"))
    assert image.save(str(path))
    return path


def _has_red(widget: Any) -> bool:
    image = widget.grab().toImage()
    step = 4
    return any(
        image.pixelColor(x, y).name() == "#ff0000"
        for x in range(0, image.width(), step)
        for y in range(0, image.height(), step)
    )


LINKS = {
    "web": "https://example.com/docs",
    "share": "smb://fileserver/share",
    "file": "file:///etc/passwd",
    "script": "javascript:alert(1)",
    "settings": "ms-settings:privacy",
    "relative": "notes.md",
}


def test_only_web_links_open_and_the_message_stays(qtbot, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    opened: list[str] = []
    monkeypatch.setattr(chat_markdown, "open_in_browser", lambda url: opened.append(url.toString()), raising=False)
    view = make_view(qtbot)
    answer = "Links: " + ", ".join(f"[{name}]({url})" for name, url in LINKS.items()) + ".\n\nThe end."
    view.set_messages([message(1, "assistant", answer)])
    [prose] = view.findChildren(ProseView)
    before = prose.toPlainText()
    for name, url in LINKS.items():
        prose.anchorClicked.emit(QUrl(url))  # what a click on the link (or Enter on it) sends
        assert prose.toPlainText() == before, f"the {name} link replaced the message"
        assert prose.source().isEmpty()
    assert opened == [LINKS["web"]], opened
    # Qt itself neither hands a link to the system nor follows it inside the box (which blanks it).
    assert not prose.openExternalLinks() and not prose.openLinks()


CHILD_TIMEOUT_S = 30  # a fresh Python with Qt starts in seconds; a render blocked on the FIFO never ends


def _in_child(scenario: str, tmp_path: Path) -> dict[str, Any]:
    """What `scenario(folder)` returns, run in a fresh process: a regression blocks on the FIFO while
    holding the GIL (no timeout in this process could stop it) or aborts on /dev/zero."""
    code = (
        "import json, sys; from tests.ui import test_chat_view as t;"
        f" print('RESULT', json.dumps(t.{scenario}(sys.argv[1])))"
    )
    try:
        done = subprocess.run(
            [sys.executable, "-c", code, str(tmp_path)],
            cwd=Path(__file__).parents[2],
            env={**os.environ, "QT_QPA_PLATFORM": "offscreen"},
            capture_output=True,
            text=True,
            timeout=CHILD_TIMEOUT_S,
        )
    except subprocess.TimeoutExpired:
        pytest.fail(f"{scenario}: rendering did not return within {CHILD_TIMEOUT_S} s (something opened the FIFO)")
    assert done.returncode == 0, f"{scenario} ended with {done.returncode}: {done.stderr[-2000:]}"
    [line] = [line for line in done.stdout.splitlines() if line.startswith("RESULT ")]
    return json.loads(line.removeprefix("RESULT "))  # type: ignore[no-any-return]


def _shown_view() -> ChatView:
    from PySide6.QtWidgets import QApplication

    _app = QApplication.instance() or QApplication([])
    view = ChatView()
    view.resize(900, 700)
    view.show()
    _app.processEvents()
    return view


def answer_with_images(folder: str) -> dict[str, Any]:
    """An answer whose images name a FIFO, /dev/zero, a local picture (as a path, a file URL, relative)."""
    fifo, png = Path(folder) / "fifo", _red_png(Path(folder) / "local.png")
    os.mkfifo(fifo)
    answer = (
        f"A pipe ![pipe]({fifo}), endless zeros ![zero](/dev/zero), a local picture ![local]({png}),"
        f" as a file URL ![url]({png.as_uri()}) and relative ![rel](local.png).\n\nThe end."
    )
    view = _shown_view()
    started = time.monotonic()
    view.set_messages([message(1, "user", "Draw"), message(2, "assistant", answer)])
    widget = view.message_widgets()[1]
    red = _has_red(widget)
    [prose] = widget.findChildren(ProseView)
    loaded = []
    for name in (str(fifo), "/dev/zero", str(png), png.as_uri(), "local.png"):
        for kind in QTextDocument.ResourceType:
            value = prose.document().resource(kind.value, QUrl(name))
            if value and not (hasattr(value, "isNull") and value.isNull()):
                loaded.append(f"{kind.name} {name}")
    return {"seconds": time.monotonic() - started, "red": red, "text": prose.toPlainText(), "loaded": loaded}


def tool_call_with_markup(folder: str) -> dict[str, Any]:
    """A model name, tool name, tool result and error that hold `<img>` tags naming a FIFO and a picture."""
    fifo, png = Path(folder) / "fifo", _red_png(Path(folder) / "local.png")
    os.mkfifo(fifo)
    markup = f'<img src="{fifo}"><img src="{png}" width=64 height=64>'
    view = _shown_view()
    view.assistant_name = f"model {markup}"
    view.begin_assistant()
    view.append_text("Calling.")
    card = view.add_tool_call("c1", f"demo__{markup}", {"x": markup})
    card.mark_decided("always")
    decided = card.status.text()
    view.set_tool_result("c1", markup, is_error=True)
    view.append_text("After.")
    view.finish(f"Failed: {markup}")
    note = view.add_note(f"Note {markup}")
    first, last = view.message_widgets()
    labels = (first.role_label, card.title, card.status, last.status, note)
    return {
        "markup": markup,
        "red": _has_red(view),
        "texts": [first.role_label.text(), card.title.text(), decided, last.status.text(), note.text()],
        "result": card.result_view.toPlainText(),
        "plain": [label.textFormat() == Qt.TextFormat.PlainText for label in labels],
    }


def test_an_answer_never_loads_what_its_images_name(tmp_path: Path) -> None:
    shown = _in_child("answer_with_images", tmp_path)
    assert shown["seconds"] < 10 and not shown["red"] and not shown["loaded"], shown
    assert shown["text"].startswith("A pipe") and shown["text"].endswith("The end.")


def test_model_and_tool_text_in_labels_shows_as_text(tmp_path: Path) -> None:
    shown = _in_child("tool_call_with_markup", tmp_path)
    markup = shown["markup"]
    assert not shown["red"], "a label loaded the local picture"
    assert shown["texts"] == [
        f"model {markup}",
        f"Tool call: demo__{markup}",
        f"Allowed (demo__{markup} is always allowed): running…",
        f"Failed: {markup}",
        f"Note {markup}",
    ]
    assert shown["result"] == markup and all(shown["plain"]), shown


def test_a_backlog_at_the_end_is_shown_in_steps(qtbot) -> None:  # type: ignore[no-untyped-def]
    view = make_view(qtbot)
    view.begin_assistant()
    text = _long_answer(5000)
    view.append_text(text)  # all at once, never rendered: finish has the whole answer to show
    view.finish("Stopped.")
    assert view.is_rendering()  # finish showed a first part and left the rest to steps
    qtbot.waitUntil(lambda: not view.is_rendering())
    widget = view.message_widgets()[-1]
    assert widget.status.text() == "Stopped." and widget.text() == text
    assert len(widget.body.code_blocks()) == text.count("```python") and "```" not in rendered_text(widget)


def test_streamed_markdown_ends_as_the_stored_rendering(qtbot) -> None:  # type: ignore[no-untyped-def]
    view = make_view(qtbot)
    view.begin_assistant()
    for start in range(0, len(ANSWER), 3):
        view.append_text(ANSWER[start : start + 3])
        view._render_live()  # every few characters: the worst case for the incremental split
    view.finish()
    streamed = view.message_widgets()[-1]
    assert streamed.text() == ANSWER
    [block] = streamed.findChildren(CodeBlockView)
    assert block.code() == CODE and block.view.document().toPlainText() == CODE
    assert "```" not in rendered_text(streamed) and "A heading" in rendered_text(streamed)


def _streamed_blocks(text: str, step: int) -> list[Block]:
    """The blocks `split_stream` completes while `text` arrives `step` characters at a time."""
    committed: list[Block] = []
    split = None
    for end in range(0, len(text), step):
        split = split_stream(text[:end], split.offset if split else 0, resume=split)
        committed.extend(split.blocks)
    committed.extend(split_stream(text, split.offset if split else 0, final=True, resume=split).blocks)
    return committed


def test_split_stream_never_changes_a_complete_block() -> None:
    text = _long_answer(3000)
    final = split_stream(text, final=True)
    assert "".join(b.text for b in final.blocks if b.kind == "markdown").count("```") == 0
    committed = _streamed_blocks(text, 37)
    assert [b.text for b in committed if b.kind == "code"] == [b.text for b in final.blocks if b.kind == "code"]
    prose = "".join(b.text for b in committed if b.kind == "markdown")
    assert re.sub(r"\s+", " ", prose).strip() == re.sub(r"\s+", " ", _without_code(text)).strip()


def test_split_stream_bounds_the_tail() -> None:
    # One endless paragraph: cut after sentences, so the part rendered again stays small.
    paragraph = "This sentence goes on. " * 2000
    committed = _streamed_blocks(paragraph, 50)
    assert "".join(b.text for b in committed) == paragraph
    assert max(len(b.text) for b in committed) <= 2 * chat_markdown.HARD_LIMIT
    # One huge code block: read once (resumed, not re-read), complete when its fence closes.
    code = "".join(f"line_{i} = {i}\n" for i in range(5000))
    [block] = _streamed_blocks(f"```python\n{code}```\n", 64)
    assert block.kind == "code" and block.language == "python" and block.text == code.removesuffix("\n")
    # The tail hides a fence still being typed ("``" would flash as text before the block appears).
    assert split_stream("Text\n``").tail == Block("markdown", "Text\n")


# --- the stall measurement -------------------------------------------------------------------------

TOKENS = 20_000
TOKENS_PER_CHUNK = 5
HEARTBEAT_MS = 10


def _long_answer(tokens: int) -> str:
    """A long, varied answer: headings, paragraphs, lists, tables and code blocks."""
    parts, index = [], 0
    while sum(len(p) for p in parts) < tokens * 4:
        index += 1
        parts.append(
            f"## Step {index}: make **it** work\n\n"
            f"This paragraph explains step {index} with *emphasis*, `inline_code({index})` and a "
            f"[link](https://example.com/{index}). It goes on for a while so that the line wraps "
            "across the width of the window, the way a real model writes its explanations.\n\n"
            f"- point {index}.1 with **bold**\n- point {index}.2\n  continued\n- point {index}.3\n\n"
            f"1. first\n2. second\n\n"
            f"| column | value |\n|---|---|\n| a | {index} |\n| b | {index * 2} |\n\n"
            f"```python\ndef step_{index}(values: list[int]) -> int:\n"
            f'    """Sum the values of step {index}."""\n'
            "    total = 0\n    for value in values:\n        total += value  # add\n\n"
            f"    return total * {index}\n```\n\n"
        )
    return "".join(parts)


def _without_code(text: str) -> str:
    return re.sub(r"```[a-z]*\n.*?```\n", "", text, flags=re.S)


def _stream_and_measure(qtbot: Any) -> tuple[float, float, int, float]:
    """Stream a 20,000-token answer as 5-token chunks every 1 ms, the way the worker's queued signals
    arrive, under the app's own event loop. Returns the biggest event-loop stall (the longest gap
    between 10 ms heartbeats, less 10 ms), the most CPU time the UI thread spent within one gap (the
    part of a stall that is this code's, not other processes'), the renders, and the seconds taken."""
    view = make_view(qtbot)
    view.set_messages([message(1, "user", "Explain everything, at length.")])
    # "Tokens" the size a model's are: about four characters.
    tokens = re.findall(r"\s*\S{1,4}|\s+", _long_answer(TOKENS))[:TOKENS]
    chunks = ["".join(tokens[i : i + TOKENS_PER_CHUNK]) for i in range(0, len(tokens), TOKENS_PER_CHUNK)]
    beats: list[tuple[float, float]] = []
    heartbeat = QTimer()
    heartbeat.setTimerType(Qt.TimerType.PreciseTimer)
    heartbeat.timeout.connect(lambda: beats.append((time.perf_counter(), time.thread_time())))
    feeder = QTimer()
    feeder.setTimerType(Qt.TimerType.PreciseTimer)
    loop = QEventLoop()
    sent = 0

    def feed() -> None:
        nonlocal sent
        if sent < len(chunks):
            view.append_text(chunks[sent])
            sent += 1
        else:
            feeder.stop()
            view.finish()
            check.start(5)  # until all is shown: the finish's own work is measured too

    check = QTimer()
    check.timeout.connect(lambda: None if view.is_rendering() else loop.quit())

    feeder.timeout.connect(feed)
    gc.collect()  # the garbage of earlier tests is not this stream's cost
    view.begin_assistant()
    started = time.perf_counter()
    heartbeat.start(HEARTBEAT_MS)
    feeder.start(1)
    QTimer.singleShot(300_000, loop.quit)  # a hang fails below instead of waiting for the test timeout
    loop.exec()
    heartbeat.stop()
    seconds = time.perf_counter() - started
    assert not view.is_rendering()
    view.close()
    widget = view.message_widgets()[-1]
    assert sent == len(chunks) and widget.text() == "".join(chunks)
    assert widget.findChildren(CodeBlockView) and "```" not in rendered_text(widget)
    stall = max(b[0] - a[0] for a, b in itertools.pairwise(beats)) - HEARTBEAT_MS / 1000
    busy = max(b[1] - a[1] for a, b in itertools.pairwise(beats))
    return stall, busy, view.renders, seconds


def _after(method: Any, then: Any) -> Any:
    """`method`, with `then()` called once it returns."""

    def wrapped(*args: Any, **kwargs: Any) -> Any:
        result = method(*args, **kwargs)
        then()
        return result

    return wrapped


@pytest.mark.slow
def test_a_20000_token_answer_streams_without_stalling(qtbot, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    """A stall comes from work that grows with the answer: re-rendering what is already shown. So the
    test asserts the work itself: every render sets at most a tail's worth of markdown or code into a
    widget, and the whole stream renders each character at most a few times over, however long the
    answer grows (re-rendering the whole answer each time would be hundreds of times over).

    The event-loop stall is measured and printed for the record (about 10-20 ms here), not asserted:
    on a busy 2-core machine the scheduler alone can hold the loop for longer.
    """
    sizes: list[int] = []
    prose_set, code_set = ProseView.set_markdown, CodeBlockView._replace_live

    def record_prose(self: ProseView, text: str) -> None:
        sizes.append(len(text))
        prose_set(self, text)

    def record_code(self: CodeBlockView, text: str) -> None:
        sizes.append(len(text))
        code_set(self, text)

    monkeypatch.setattr(ProseView, "set_markdown", record_prose)
    monkeypatch.setattr(CodeBlockView, "_replace_live", record_code)
    stall, busy, renders, seconds = _stream_and_measure(qtbot)
    answer = len(_long_answer(TOKENS))
    print(
        f"max event-loop stall {stall * 1000:.1f} ms (UI thread busy at most {busy * 1000:.1f} ms of a gap;"
        f" {renders} renders in {seconds:.1f} s; load average {os.getloadavg()[0]:.1f}); {len(sizes)} widget"
        f" updates, the largest {max(sizes)} characters, {sum(sizes) / answer:.1f} times the answer's length"
    )
    assert renders > 20  # it streamed: many renders, not one at the end
    assert max(sizes) <= chat_markdown.HARD_LIMIT
    assert sum(sizes) < 3 * answer
