"""Markdown for the Chat page's transcript, rendered a block at a time so long streamed answers stay smooth.

A 20,000-token answer arrives a few characters at a time. Rendering the whole message again on each
delta costs O(length) per delta, O(length²) in all, and stalls the window. So `split_stream` cuts the
text into blocks that never change once complete (prose runs cut at safe paragraph boundaries, and
fenced code blocks) and an unfinished tail. `MarkdownBody` renders each complete block once into its
own small widget and renders only the tail again (the transcript calls `render` at most every ~50 ms).

Prose goes through Qt's own CommonMark/GitHub reader (`QTextDocument.setMarkdown`, raw HTML shown as
text, no images fetched). Code blocks are highlighted with Pygments into character formats and carry
a Copy button that copies exactly the code; a long code block is itself frozen in chunks, so only its
last lines are highlighted again while it streams.
"""

from __future__ import annotations

import html
import math
import re
import time
from collections.abc import Iterator
from dataclasses import dataclass
from functools import cache
from typing import Any, Literal

from PySide6.QtCore import QEvent, Qt, QUrl, Signal
from PySide6.QtGui import (
    QColor,
    QDesktopServices,
    QFont,
    QGuiApplication,
    QImage,
    QPalette,
    QTextCharFormat,
    QTextCursor,
    QTextDocument,
)
from PySide6.QtWidgets import (
    QFrame,
    QHBoxLayout,
    QLabel,
    QSizePolicy,
    QTextBrowser,
    QToolButton,
    QVBoxLayout,
    QWidget,
)

from launcher.ui import theme

# A prose tail longer than this is cut at its last safe paragraph boundary; longer than HARD_LIMIT, at
# its last line break even where that splits a list (rendering cost beats a list's continuity).
SOFT_LIMIT = 1200
HARD_LIMIT = 4000
# A long stored answer is shown this much more at a time (MarkdownBody.advance).
PROGRESSIVE_STEP_CHARS = 3000
# A streaming code block freezes its highlighted lines in chunks of about this size.
CODE_FREEZE_CHARS = 600

MARKDOWN_FEATURES = QTextDocument.MarkdownFeature(
    QTextDocument.MarkdownFeature.MarkdownDialectGitHub.value | QTextDocument.MarkdownFeature.MarkdownNoHTML.value
)
LIGHT_CODE_STYLE = "default"
DARK_CODE_STYLE = "github-dark"
# Warmed up off the UI thread: a Pygments lexer compiles its rules on first use (tens of ms for Python).
COMMON_LANGUAGES = ("python", "javascript", "typescript", "bash", "json", "cpp", "rust", "go", "html", "sql")

_FENCE_OPEN = re.compile(r"^( {0,3})(`{3,}|~{3,})(.*)$")
_FENCE_CLOSE = re.compile(r"^ {0,3}(`{3,}|~{3,})[ \t]*$")
# A last, still unfinished line that may be becoming a fence: hidden until it is complete, so the
# transcript does not flash "``" as text before the code block appears.
_PARTIAL_FENCE = re.compile(r" {0,3}(?:`{1,2}|~{1,2}|(?:`{3,}|~{3,})[^`\n]*)\Z")
# A line that may continue a list or an indented block after a blank line: not a safe place to cut.
_CONTINUES = re.compile(r"^(?:[ \t]|[-+*](?:[ \t]|$)|\d{1,9}[.)](?:[ \t]|$))")


@dataclass(frozen=True)
class Block:
    """A piece of a message: markdown prose, or a fenced code block's code and language."""

    kind: Literal["markdown", "code"]
    text: str
    language: str = ""
    end: int = 0  # where the block's source ends in the message (a complete block's renderer resumes there)


Fence = tuple[str, int, int, int, str]  # an open code fence: (char, length, opener start, code start, language)


@dataclass(frozen=True)
class Split:
    """`blocks` are complete and never change; the tail from `offset` is still growing (shown as `tail`).

    While the tail is an open code fence, `fence` and `scanned` (where its unread lines start) let
    the next call resume there instead of reading the whole block again.
    """

    blocks: list[Block]
    offset: int
    tail: Block | None
    fence: Fence | None = None
    scanned: int = 0


def _lines(text: str, start: int, *, final: bool) -> Iterator[tuple[int, int, int]]:
    """(line start, line end, next line start) of each complete line from `start`; the last one only when final."""
    pos, size = start, len(text)
    while pos < size:
        end = text.find("\n", pos)
        if end == -1:
            if final:
                yield pos, size, size
            return
        yield pos, end, end + 1
        pos = end + 1


def _prose_blocks(text: str, lo: int, hi: int, *, limit: int = SOFT_LIMIT) -> list[Block]:
    """Complete prose text[lo:hi] as blocks of about `limit` characters or more, cut only at safe boundaries."""
    blocks = []
    start = lo
    for cut in _boundaries(text, lo, hi)[0]:
        if cut - start >= limit:
            blocks.append(Block("markdown", text[start:cut], end=cut))
            start = cut
    if text[start:hi].strip():
        blocks.append(Block("markdown", text[start:hi], end=hi))
    return blocks


def _boundaries(text: str, lo: int, hi: int) -> tuple[list[int], int, int]:
    """Places in text[lo:hi] (complete lines) where the prose before them can render on its own.

    Safe: after a blank line, before a line that starts at the margin and is no list item (so it ends
    any list, quote or paragraph before it). Also returned: the last line start after a blank line
    and the last line start (`lo` when none), the fallbacks of an overlong tail.
    """
    safe: list[int] = []
    after_blank = any_line = lo
    previous_blank = False
    for start, end, _next in _lines(text, lo, final=True):
        if end > hi or start >= hi:
            break
        line = text[start:end]
        blank = not line.strip()
        if start > lo:
            any_line = start
            if previous_blank and not blank:
                after_blank = start
                if not _CONTINUES.match(line):
                    safe.append(start)
        previous_blank = blank
    return safe, after_blank, any_line


def _safe_cut(text: str, lo: int, hi: int, *, hard: bool) -> int:
    """The last safe boundary in text[lo:hi]; `hard`: else the last line after a blank line, else the
    last line start. `lo` when there is none."""
    safe, after_blank, any_line = _boundaries(text, lo, hi)
    if safe:
        return safe[-1]
    if not hard:
        return lo
    return after_blank if after_blank > lo else any_line


def _code_text(lines: str) -> str:
    """A fenced block's code: its lines without the line break that ends the last one (not part of the code)."""
    return lines[:-1] if lines.endswith("\n") else lines


def _word_cut(text: str, lo: int) -> int:
    """An overlong paragraph without a line break: after its last sentence, else its last space (the
    rest shows as a new paragraph, which beats rendering the whole paragraph again on every update)."""
    sentence = max(text.rfind(". ", lo), text.rfind("? ", lo), text.rfind("! ", lo))
    if sentence > lo:
        return sentence + 2
    space = text.rfind(" ", lo)
    return space + 1 if space > lo else lo


def _hide_partial_fence(text: str) -> str:
    last_line = text.rfind("\n") + 1
    return text[:last_line] if _PARTIAL_FENCE.match(text, last_line) else text


def split_stream(text: str, start: int = 0, *, final: bool = False, resume: Split | None = None) -> Split:
    """Cut text[start:] into complete blocks and the growing tail (`final`: the text is complete).

    `resume`: the previous call's result for the same text (grown since), to go on where it stopped.
    """
    blocks: list[Block] = []
    prose_start = start
    fence: Fence | None = None
    scanned = start  # the start of the first line not yet complete
    if resume is not None and resume.fence is not None and resume.offset == start:
        fence, scanned = resume.fence, resume.scanned
    for line_start, line_end, next_start in _lines(text, scanned, final=final):
        line = text[line_start:line_end]
        scanned = next_start
        if fence is None:
            opened = _FENCE_OPEN.match(line)
            if opened and not (opened.group(2)[0] == "`" and "`" in opened.group(3)):
                blocks.extend(_prose_blocks(text, prose_start, line_start))
                info = opened.group(3).strip()
                language = info.split()[0] if info else ""
                fence = (opened.group(2)[0], len(opened.group(2)), line_start, next_start, language)
        else:
            closed = _FENCE_CLOSE.match(line)
            if closed and closed.group(1)[0] == fence[0] and len(closed.group(1)) >= fence[1]:
                blocks.append(Block("code", _code_text(text[fence[3] : line_start]), fence[4], next_start))
                fence = None
                prose_start = next_start
    if fence is not None:
        code = text[fence[3] :]
        if final:
            blocks.append(Block("code", _code_text(code), fence[4], len(text)))
            return Split(blocks, len(text), None)
        return Split(blocks, fence[2], Block("code", _hide_partial_fence(code), fence[4]), fence, scanned)
    if final:
        blocks.extend(_prose_blocks(text, prose_start, len(text)))
        return Split(blocks, len(text), None)
    if len(text) - prose_start > SOFT_LIMIT:
        hard = len(text) - prose_start > HARD_LIMIT
        cut = _safe_cut(text, prose_start, scanned, hard=hard)
        if cut <= prose_start and hard:
            cut = _word_cut(text, prose_start)
        if cut > prose_start:
            blocks.append(Block("markdown", text[prose_start:cut], end=cut))
            prose_start = cut
    tail = _hide_partial_fence(text[prose_start:])
    return Split(blocks, prose_start, Block("markdown", tail) if tail.strip() else None)


# --- Pygments -------------------------------------------------------------------------------------


@cache
def _lexer_aliases() -> frozenset[str]:
    from pygments.lexers import get_all_lexers

    # Only the built-in lexers: looking for plugins scans every installed package's metadata (slow).
    return frozenset(alias for _name, aliases, _files, _mimes in get_all_lexers(plugins=False) for alias in aliases)


@cache
def lexer_for(language: str) -> Any | None:
    """The Pygments lexer for a fence's language ("py", "js", "c++"...); None: plain text."""
    name = language.lower().strip().lstrip(".")
    if not name or name not in _lexer_aliases():
        return None
    from pygments.lexers import get_lexer_by_name

    # stripnl/ensurenl off: the highlighted text must be exactly the code (the tokens are inserted as is).
    return get_lexer_by_name(name, stripnl=False, ensurenl=False)


def warm_up() -> None:
    """Load the common lexers (run off the UI thread): the first Python block then costs no stall."""
    for language in COMMON_LANGUAGES:
        lexer = lexer_for(language)
        if lexer is not None:
            for _token in lexer.get_tokens("x = 1\n"):
                pass
    code_formats(LIGHT_CODE_STYLE)
    code_formats(DARK_CODE_STYLE)


@dataclass(frozen=True)
class CodeStyle:
    """A Pygments style as Qt formats: the block's colours and one char format per token type."""

    background: str
    foreground: str
    plain: QTextCharFormat
    formats: dict[Any, QTextCharFormat]

    def format_for(self, token_type: Any) -> QTextCharFormat:
        """The format of a token type (its nearest styled parent's)."""
        while token_type not in self.formats and token_type.parent is not None:
            token_type = token_type.parent
        return self.formats.get(token_type, self.plain)


@cache
def code_formats(style_name: str) -> CodeStyle:
    """A Pygments style's colours as QTextCharFormats (cached: built once per style)."""
    from pygments.styles import get_style_by_name
    from pygments.token import Token

    style = get_style_by_name(style_name)
    dark = QColor(style.background_color).lightness() < 128
    default = style.style_for_token(Token).get("color")
    foreground = f"#{default}" if default else ("#e6edf3" if dark else "#1f2328")
    formats: dict[Any, QTextCharFormat] = {}
    for token_type in style.styles:
        spec = style.style_for_token(token_type)
        fmt = QTextCharFormat()
        fmt.setForeground(QColor(f"#{spec['color']}" if spec["color"] else foreground))
        if spec["bold"]:
            fmt.setFontWeight(QFont.Weight.Bold)
        if spec["italic"]:
            fmt.setFontItalic(True)
        if spec["underline"]:
            fmt.setFontUnderline(True)
        formats[token_type] = fmt
    plain = QTextCharFormat()
    plain.setForeground(QColor(foreground))
    return CodeStyle(style.background_color, foreground, plain, formats)


def code_style_name(palette: QPalette) -> str:
    """The code style that reads on this palette."""
    return DARK_CODE_STYLE if theme.is_dark(palette) else LIGHT_CODE_STYLE


# --- widgets --------------------------------------------------------------------------------------

# The only links a message may open: anything else (file:, smb:, a custom app's scheme, a relative
# path) would hand the model's choice of target to the system, so it is never opened.
WEB_SCHEMES = frozenset({"http", "https"})


def open_in_browser(url: QUrl) -> bool:
    """Open a web link in the system's browser (tests replace this)."""
    return QDesktopServices.openUrl(url)


def plain_label(text: str = "") -> QLabel:
    """A label that shows `text` exactly: never read as rich text, so text from a model or a server
    cannot style itself or make the label load an image."""
    label = QLabel(text)
    label.setTextFormat(Qt.TextFormat.PlainText)
    return label


def plain_tooltip(text: str) -> str:
    """`text` as a tooltip that shows it exactly (Qt reads a tooltip that looks like markup as rich text)."""
    return f"<qt>{html.escape(text)}</qt>" if text else ""


@cache
def _monospace() -> QFont:
    return theme.monospace_font()


class AutoHeightBrowser(QTextBrowser):
    """A read-only rich-text box exactly as tall as its text: the transcript scrolls, never the box.

    Only http and https links open, in the browser; the box never navigates. Nothing an answer names
    is ever loaded (no file or network access on the model's say-so). The wheel goes to the transcript.
    """

    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.setFrameShape(QFrame.Shape.NoFrame)
        self.setVerticalScrollBarPolicy(Qt.ScrollBarPolicy.ScrollBarAlwaysOff)
        self.setHorizontalScrollBarPolicy(Qt.ScrollBarPolicy.ScrollBarAlwaysOff)
        self.setSizePolicy(QSizePolicy.Policy.Expanding, QSizePolicy.Policy.Fixed)
        # Qt would hand any scheme to the system (file:, smb:, ...) and follow a relative link inside the
        # box, replacing the message: links go through `_follow` instead.
        self.setOpenLinks(False)
        self.setOpenExternalLinks(False)
        self.anchorClicked.connect(self._follow)
        self.highlighted.connect(self._hovered)
        self.setUndoRedoEnabled(False)
        self.setFocusPolicy(Qt.FocusPolicy.ClickFocus)  # selectable, but not one Tab stop per paragraph
        palette = self.palette()
        palette.setColor(QPalette.ColorRole.Base, QColor(Qt.GlobalColor.transparent))
        self.setPalette(palette)
        self.viewport().setAutoFillBackground(False)
        document = self.document()
        document.setDocumentMargin(2)
        document.documentLayout().documentSizeChanged.connect(self._fit)
        self.setFixedHeight(8)

    def _fit(self, size: Any) -> None:
        height = math.ceil(size.height()) + 2 * self.frameWidth()
        if height != self.height():
            self.setFixedHeight(height)

    def loadResource(self, kind: int, url: QUrl | str) -> Any:
        # Never None: for an empty answer Qt reads the file itself (a FIFO hangs the window, /dev/zero
        # exhausts memory, a local image shows). A null image, or empty text, is cached and drawn as nothing.
        if kind == QTextDocument.ResourceType.ImageResource.value:
            return QImage()
        return ""

    def _follow(self, url: QUrl) -> None:
        if url.scheme().lower() in WEB_SCHEMES and url.host():
            open_in_browser(url)

    def _hovered(self, url: QUrl) -> None:
        if url.isEmpty():
            self.setToolTip("")
            return
        shown = url.toString()
        if url.scheme().lower() not in WEB_SCHEMES or not url.host():
            shown = f"Not opened (only http and https links open): {shown}"
        self.setToolTip(plain_tooltip(shown))

    def wheelEvent(self, event: Any) -> None:
        event.ignore()


class ProseView(AutoHeightBrowser):
    """One markdown block, rendered by Qt's markdown reader."""

    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.setAccessibleName("Message text")
        self._markdown = ""

    def markdown(self) -> str:
        """The markdown source shown."""
        return self._markdown

    def set_markdown(self, text: str) -> None:
        """Show `text` (skipped when unchanged)."""
        if text != self._markdown:
            self._markdown = text
            self.document().setMarkdown(text, MARKDOWN_FEATURES)


class CodeBlockView(QFrame):
    """A fenced code block: its language, a Copy button (copies exactly the code) and the highlighted code.

    While the block streams, `set_code` is called with the growing code: lines before the last chunk
    boundary are highlighted once and frozen, so each update highlights only the last lines.
    """

    copied = Signal(str)

    def __init__(self, language: str = "", parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.setObjectName("ChatCode")
        self.language = language
        self._code = ""
        self._frozen = ""  # the start of the code that is highlighted and never touched again
        self._frozen_end = 0  # its end in the document
        self._style = ""
        layout = QVBoxLayout(self)
        layout.setContentsMargins(8, 4, 8, 6)
        layout.setSpacing(2)
        header = QHBoxLayout()
        self.language_label = plain_label(language or "code")
        self.language_label.setObjectName("Muted")
        self.copy_button = small_button("Copy", "Copy code", self.copy)
        self.copy_button.setAccessibleDescription(f"Copy the {language or 'code'} block")
        header.addWidget(self.language_label)
        header.addStretch(1)
        header.addWidget(self.copy_button)
        layout.addLayout(header)
        self.view = AutoHeightBrowser(self)
        self.view.setAccessibleName(f"Code ({language})" if language else "Code")
        self.view.setLineWrapMode(QTextBrowser.LineWrapMode.WidgetWidth)
        self.view.setWordWrapMode(self.view.wordWrapMode().WrapAtWordBoundaryOrAnywhere)
        document = self.view.document()
        document.setDefaultFont(_monospace())
        option = document.defaultTextOption()
        option.setTabStopDistance(4 * self.view.fontMetrics().horizontalAdvance(" "))
        document.setDefaultTextOption(option)
        layout.addWidget(self.view)

    def code(self) -> str:
        """The code shown (what Copy copies)."""
        return self._code

    def copy(self) -> None:
        """Put exactly the code on the clipboard."""
        QGuiApplication.clipboard().setText(self._code)
        self.copied.emit(self._code)

    def set_code(self, code: str, *, final: bool = True) -> None:
        """Show `code`; while streaming (`final` False) freeze complete chunks so updates stay small."""
        style = code_style_name(self._theme_palette())
        if style != self._style or not code.startswith(self._frozen):
            self._restart(style)
        self._code = code
        live = code[len(self._frozen) :]
        if not final and len(live) > CODE_FREEZE_CHARS:
            cut = _code_cut(live)
            if cut > 0:
                self._replace_live(live[:cut])
                self._frozen += live[:cut]
                self._frozen_end = self.view.document().characterCount() - 1
                live = live[cut:]
        self._replace_live(live)
        if final:
            self._frozen = code
            self._frozen_end = self.view.document().characterCount() - 1

    def _theme_palette(self) -> QPalette:
        # The transcript's palette: a style sheet gives this frame the code block's own background.
        parent = self.parentWidget()
        return parent.palette() if parent is not None else self.palette()

    def restyle(self) -> None:
        """Highlight again in the current palette's code style (the theme changed)."""
        if self._style and code_style_name(self._theme_palette()) != self._style:
            self.set_code(self._code)

    def changeEvent(self, event: QEvent) -> None:
        super().changeEvent(event)
        if event.type() == QEvent.Type.PaletteChange:
            self.restyle()

    def _restart(self, style: str) -> None:
        self._style = style
        self._frozen = ""
        self._frozen_end = 0
        # Every character gets its colour from the style's formats (the palette's text colour would
        # not follow a theme switch under the app's style sheet).
        self.view.document().clear()

    def _replace_live(self, text: str) -> None:
        document = self.view.document()
        cursor = QTextCursor(document)
        cursor.beginEditBlock()
        cursor.setPosition(self._frozen_end)
        cursor.movePosition(QTextCursor.MoveOperation.End, QTextCursor.MoveMode.KeepAnchor)
        cursor.removeSelectedText()
        colours = code_formats(self._style)
        lexer = lexer_for(self.language)
        if lexer is None:
            cursor.insertText(text, colours.plain)
        else:
            # Runs of the same format go in one call: fewer crossings into Qt.
            run: list[str] = []
            run_format = colours.plain
            for token_type, value in lexer.get_tokens(text):
                fmt = colours.format_for(token_type)
                if fmt is not run_format and run:
                    cursor.insertText("".join(run), run_format)
                    run = []
                run_format = fmt
                run.append(value)
            if run:
                cursor.insertText("".join(run), run_format)
        cursor.endEditBlock()


def _code_cut(live: str) -> int:
    """Where to freeze a streaming code chunk: after its last blank line (lexers are usually back in
    their initial state there), else after its last complete line once the chunk is long."""
    blank = live.rfind("\n\n", 0, len(live) - 1)
    if blank > 0:
        return blank + 2
    return live.rfind("\n") + 1 if len(live) > 2 * CODE_FREEZE_CHARS else 0


def small_button(text: str, accessible_name: str, slot: Any) -> QToolButton:
    """A flat text button with an accessible name (screen readers and tests find it by that name)."""
    button = QToolButton()
    button.setText(text)
    button.setAccessibleName(accessible_name)
    button.setToolTip(accessible_name)
    button.setAutoRaise(True)
    button.setCursor(Qt.CursorShape.PointingHandCursor)
    button.clicked.connect(slot)
    return button


class MarkdownBody(QWidget):
    """A message's markdown, growing by `append` and shown by `refresh` (complete blocks once, the tail again)."""

    code_copied = Signal(str)

    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self._parts: list[str] = []
        self._offset = 0  # text before this is rendered into frozen widgets
        self._split: Split | None = None  # the last split, to resume reading an open code block
        self._upto: int | None = None  # a text set progressively: how much of it is given to `refresh`
        self._caught_up = True  # the last `refresh` showed all it was given
        self._live: ProseView | CodeBlockView | None = None
        self._layout = QVBoxLayout(self)
        self._layout.setContentsMargins(0, 0, 0, 0)
        self._layout.setSpacing(4)

    def text(self) -> str:
        """The whole markdown received so far."""
        if len(self._parts) > 1:
            self._parts = ["".join(self._parts)]
        return self._parts[0] if self._parts else ""

    def append(self, delta: str) -> None:
        """Add streamed text (shown at the next `refresh`)."""
        self._parts.append(delta)

    def set_text(self, text: str, *, progressive: bool = False) -> None:
        """Show a complete text: at once, or (`progressive`) a part per `advance` call, as if it
        streamed in, so a long stored answer never holds the event loop."""
        self.clear()
        self._parts = [text]
        if progressive:
            self._upto = 0
        else:
            self.refresh(final=True)

    def pending(self) -> bool:
        """A text set progressively is not all shown yet."""
        return self._upto is not None

    def finish_in_steps(self) -> None:
        """The text is complete: show what is left of it a step per `advance` call."""
        self._upto = len(self.text())
        self._caught_up = True

    def advance(self, budget_s: float) -> bool:
        """Show the next part of a text set progressively (see `refresh` for `budget_s`); True when
        all of it is shown."""
        if self._upto is None:
            return True
        text = self.text()
        if self._caught_up and len(text) - self._upto <= PROGRESSIVE_STEP_CHARS:
            self._upto = len(text)  # the rest in one go, rendered as final (no tail shown first)
        if self._upto >= len(text):
            if self.refresh(final=True, budget_s=budget_s):
                self._upto = None
                return True
            return False
        if self._caught_up:
            line_end = text.find("\n", self._upto + PROGRESSIVE_STEP_CHARS)
            self._upto = len(text) if line_end < 0 else line_end + 1
        self._caught_up = self.refresh(budget_s=budget_s, upto=self._upto)
        return False

    def clear(self) -> None:
        """Remove everything."""
        self._parts = []
        self._offset = 0
        self._split = None
        self._live = None
        self._upto = None
        self._caught_up = True
        while self._layout.count():
            item = self._layout.takeAt(0)
            widget = item.widget() if item is not None else None
            if widget is not None:
                widget.hide()
                widget.deleteLater()

    def blocks(self) -> list[ProseView | CodeBlockView]:
        """The rendered block widgets, in order."""
        items = (self._layout.itemAt(i) for i in range(self._layout.count()))
        widgets = (item.widget() for item in items if item is not None)
        return [w for w in widgets if isinstance(w, ProseView | CodeBlockView)]

    def code_blocks(self) -> list[CodeBlockView]:
        """The code block widgets, in order."""
        return [w for w in self.blocks() if isinstance(w, CodeBlockView)]

    def refresh(self, *, final: bool = False, budget_s: float | None = None, upto: int | None = None) -> bool:
        """Render what arrived: new complete blocks once, then the tail (`final`: the text is complete).

        With `budget_s`, stop adding blocks once that much time is spent (at least one is added) and
        return False, and leave the tail to the next call when blocks were added: the caller renders
        again soon, and the event loop runs in between. A burst of text (a slow machine, a backlog)
        is then shown over several short steps, never one long stall. `upto`: render as if only
        that much of the text had arrived.
        """
        deadline = None if budget_s is None else time.perf_counter() + budget_s
        text = self.text() if upto is None else self.text()[:upto]
        split = self._split = split_stream(text, self._offset, final=final, resume=self._split)
        for index, block in enumerate(split.blocks):
            if deadline is not None and index and time.perf_counter() > deadline:
                return False  # the tail waits too: it is further on than what is shown
            self._commit(block)
            self._offset = block.end
        self._offset = split.offset
        if deadline is not None and split.blocks:
            return False  # the tail in the next step: one step adds blocks or renders the tail, not both
        tail = split.tail
        if tail is None:
            self._drop_live()
            return True
        elif tail.kind == "code":
            live = self._live
            if not (isinstance(live, CodeBlockView) and live.language == tail.language):
                live = self._new_live(CodeBlockView(tail.language))
            live.set_code(tail.text, final=False)
        else:
            live = self._live
            if not isinstance(live, ProseView):
                live = self._new_live(ProseView())
            live.set_markdown(tail.text)
        return True

    def _commit(self, block: Block) -> None:
        live, self._live = self._live, None
        if block.kind == "code":
            if isinstance(live, CodeBlockView) and live.language == block.language:
                live.set_code(block.text, final=True)  # keeps its frozen chunks
                return
            widget: ProseView | CodeBlockView = CodeBlockView(block.language)
        else:
            if isinstance(live, ProseView):
                live.set_markdown(block.text)
                return
            widget = ProseView()
        if live is not None:
            self._remove(live)
        self._add(widget)
        if isinstance(widget, CodeBlockView):
            widget.set_code(block.text, final=True)
        else:
            widget.set_markdown(block.text)

    def _new_live(self, widget: Any) -> Any:
        self._drop_live()
        self._add(widget)
        self._live = widget
        return widget

    def _drop_live(self) -> None:
        if self._live is not None:
            self._remove(self._live)
            self._live = None

    def _add(self, widget: ProseView | CodeBlockView) -> None:
        if isinstance(widget, CodeBlockView):
            widget.copied.connect(self.code_copied)
        # Laid out at the body's width from the start: no first layout at a default width.
        widget.resize(max(self.width(), 200), widget.height())
        # No show(): showing a child activates every layout above it at once; the layout's own
        # (queued) show happens once per event-loop pass, with the next layout and paint.
        self._layout.addWidget(widget)

    def _remove(self, widget: QWidget) -> None:
        self._layout.removeWidget(widget)
        widget.hide()
        widget.deleteLater()
