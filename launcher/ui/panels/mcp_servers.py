"""Settings > "MCP servers (tools for the chat)": the servers of mcp.json, their state, and adding, enabling,
disabling, removing and importing them.

The list is `launcher.chat.mcp_config`'s (mcp.json in the app's data folder, the `mcpServers` format
of Claude Desktop, Cursor and LM Studio, secrets in the keyring). Each row shows what the running
`McpHost` says of the server (ready with N tools, starting, failed with the first line it wrote on
stderr, and its whole stderr behind "Show log"). Every change saves the file, emits `changed`, and
restarts the attached host on a worker thread: stopping a stdio server can take seconds, and the
window never waits for a server.
"""

from __future__ import annotations

import html
import shlex
from collections.abc import Mapping
from pathlib import Path

from pydantic import ValidationError
from PySide6.QtCore import QObject, Qt, QUrl, Signal
from PySide6.QtGui import QDesktopServices
from PySide6.QtWidgets import (
    QButtonGroup,
    QCheckBox,
    QDialog,
    QDialogButtonBox,
    QDoubleSpinBox,
    QFormLayout,
    QGridLayout,
    QHBoxLayout,
    QLabel,
    QLineEdit,
    QPlainTextEdit,
    QPushButton,
    QRadioButton,
    QVBoxLayout,
    QWidget,
)

from launcher.chat import mcp_config
from launcher.chat.mcp_config import McpServer
from launcher.chat.mcp_host import McpHost, ServerState
from launcher.core.errors import LauncherError
from launcher.ui import theme, workers
from launcher.ui.widgets.card import Card, muted

NOTHING_RUNS_WITHOUT_ASKING = (
    "Nothing runs without asking: a server starts only when enabled, and every tool call waits for your OK."
)


class _StateBridge(QObject):
    """Carries the host's state changes (made on its own thread) to the UI thread as a queued signal."""

    state_changed = Signal(object)  # ServerState


class McpServersSection(QWidget):
    """The MCP servers card of the Settings page."""

    changed = Signal(object)  # dict[str, McpServer]: the servers as saved to mcp.json

    def __init__(
        self,
        servers: Mapping[str, McpServer],
        parent: QWidget | None = None,
        *,
        path: Path | None = None,
        load_error: str | None = None,
    ) -> None:
        super().__init__(parent)
        self.servers = dict(servers)
        self.path = path or mcp_config.mcp_file()
        self.host: McpHost | None = None
        self.states: dict[str, ServerState] = {}
        self.add_dialog: AddServerDialog | None = None
        self.log_dialog: QDialog | None = None
        self._bridge = _StateBridge(self)
        self._bridge.state_changed.connect(self._state_changed)
        self.rows: dict[str, _ServerRow] = {}

        outer = QVBoxLayout(self)
        outer.setContentsMargins(0, 0, 0, 0)
        card = Card("MCP servers (tools for the chat)")
        card.body.addWidget(muted(NOTHING_RUNS_WITHOUT_ASKING))
        self.empty = muted("No MCP servers yet: add one, or import those of another app.")
        card.body.addWidget(self.empty)
        self.grid = QGridLayout()
        self.grid.setHorizontalSpacing(10)
        self.grid.setColumnStretch(1, 1)
        card.body.addLayout(self.grid)

        buttons = QHBoxLayout()
        self.add_button = QPushButton("Add server…")
        self.add_button.clicked.connect(self.open_add_dialog)
        buttons.addWidget(self.add_button)
        self.import_buttons: dict[str, QPushButton] = {}
        for source in mcp_config.import_sources():
            button = QPushButton(f"Import from {source.label}")
            button.setToolTip(_plain_tooltip(str(source.path)))
            button.clicked.connect(lambda _=False, s=source: self.import_from(s.path, s.label))
            buttons.addWidget(button)
            self.import_buttons.setdefault(source.label, button)
        buttons.addStretch(1)
        card.body.addLayout(buttons)

        file_row = QHBoxLayout()
        self.file_label = _plain(muted(f"Servers file: {self.path}"))
        self.file_label.setTextInteractionFlags(Qt.TextInteractionFlag.TextSelectableByMouse)
        self.open_file_button = QPushButton("Open file")
        self.open_file_button.clicked.connect(self.open_file)
        file_row.addWidget(self.file_label, 1)
        file_row.addWidget(self.open_file_button)
        card.body.addLayout(file_row)
        self.status = _plain(muted(load_error or ""))
        self.status.setAccessibleName("MCP servers status")
        card.body.addWidget(self.status)
        outer.addWidget(card)
        self._rebuild()

    @classmethod
    def from_file(cls, parent: QWidget | None = None, *, path: Path | None = None) -> McpServersSection:
        """The section for mcp.json as it is; a broken file shows its problem and an empty list (saving
        then refuses, so the file is never overwritten before the user fixes it)."""
        try:
            servers = mcp_config.load(path)
        except LauncherError as err:
            return cls({}, parent, path=path, load_error=str(err))
        return cls(servers, parent, path=path)

    # -- the host --------------------------------------------------------------------------------

    def attach(self, host: McpHost) -> None:
        """Show `host`'s server states from now on, and restart it with every change made here."""
        self.host = host
        host.on_change(self._bridge.state_changed.emit)  # emitted on the host's thread, delivered queued
        self.states = host.states()
        self._refresh_states()

    def _state_changed(self, state: ServerState) -> None:
        self.states[state.name] = state
        self._refresh_states()

    # -- changes ---------------------------------------------------------------------------------

    def set_enabled(self, name: str, enabled: bool) -> None:
        """Turn one server on or off (saved, and the host restarted)."""
        server = self.servers.get(name)
        if server is None or server.enabled == enabled:
            return
        servers = dict(self.servers)
        servers[name] = server.model_copy(update={"enabled": enabled})
        if self._commit(servers):
            self.status.setText(f"{name} {'enabled' if enabled else 'disabled'}.")

    def remove(self, name: str) -> None:
        """Forget one server (its secrets leave the keyring too)."""
        servers = {key: value for key, value in self.servers.items() if key != name}
        if self._commit(servers):
            self.status.setText(f"Removed {name}.")

    def add(self, server: McpServer) -> bool:
        """Add (or replace) one server; False, with the reason shown, when it cannot be saved."""
        servers = {**self.servers, server.name: server}
        if self._commit(servers):
            self.status.setText(f"Added {server.name}.")
            return True
        return False

    def import_from(self, path: Path, label: str) -> None:
        """Add the servers of another app's file whose names are new here."""
        try:
            merged, added, skipped = mcp_config.merge(self.servers, mcp_config.read_foreign(path))
        except LauncherError as err:
            self.status.setText(f"Could not import from {label}: {err}")
            return
        if added and not self._commit(merged):
            return
        parts = [f"Imported {len(added)} server(s) from {label}" + (f": {', '.join(added)}" if added else "")]
        if skipped:
            parts.append(f"already here, left as they are: {', '.join(skipped)}")
        self.status.setText("; ".join(parts) + ".")

    def _commit(self, servers: dict[str, McpServer]) -> bool:
        try:
            mcp_config.save(servers, self.path)
            # what the host starts is what the file now says (secrets as placeholders, resolved at start)
            saved = mcp_config.load(self.path)
        except LauncherError as err:
            self.status.setText(f"Could not save: {err}")
            return False
        self.servers = saved
        self._rebuild()
        self.changed.emit(dict(saved))
        if self.host is not None:
            workers.run_in_background(self.host.restart, dict(saved), on_failed=self.status.setText)
        return True

    # -- dialogs and the file --------------------------------------------------------------------

    def open_add_dialog(self) -> AddServerDialog:
        """The Add form (not modal: the window stays usable); "Add" adds the server."""
        dialog = AddServerDialog(set(self.servers), self)
        dialog.accepted_server.connect(self._add_from_dialog)
        self.add_dialog = dialog
        dialog.show()
        return dialog

    def _add_from_dialog(self, server: McpServer) -> None:
        if self.add_dialog is not None and self.add(server):
            self.add_dialog.accept()

    def show_log(self, name: str) -> QDialog:
        """What the server last wrote on stderr, in a window of its own."""
        state = self.states.get(name)
        dialog = QDialog(self)
        dialog.setWindowTitle(f"{name}: server log")
        layout = QVBoxLayout(dialog)
        if state is not None and state.error:
            layout.addWidget(_plain(QLabel(state.error)))
        text = QPlainTextEdit(state.stderr if state is not None and state.stderr else "(nothing on stderr)")
        text.setReadOnly(True)
        text.setFont(theme.monospace_font())
        text.setAccessibleName(f"Log of {name}")
        layout.addWidget(text)
        close = QDialogButtonBox(QDialogButtonBox.StandardButton.Close)
        close.rejected.connect(dialog.reject)
        layout.addWidget(close)
        dialog.resize(640, 360)
        self.log_dialog = dialog
        dialog.show()
        return dialog

    def open_file(self) -> None:
        """Open mcp.json in the system's editor (created, empty, when there is none yet)."""
        if not self.path.exists():
            try:
                mcp_config.save({}, self.path)
            except LauncherError as err:
                self.status.setText(f"Could not create {self.path}: {err}")
                return
        QDesktopServices.openUrl(QUrl.fromLocalFile(str(self.path)))

    # -- the rows --------------------------------------------------------------------------------

    def _rebuild(self) -> None:
        for row in self.rows.values():
            row.remove_from(self.grid)
        self.rows = {}
        for index, (name, server) in enumerate(self.servers.items()):
            row = _ServerRow(self, server)
            row.add_to(self.grid, index)
            self.rows[name] = row
        self.empty.setVisible(not self.servers)
        self._refresh_states()

    def _refresh_states(self) -> None:
        for name, row in self.rows.items():
            row.show_state(self.states.get(name), attached=self.host is not None)

    def state_text(self, name: str) -> str:
        """What the row says of the server's state (for tests and accessibility)."""
        return self.rows[name].state_label.text()


class _ServerRow:
    """One server's widgets in the section's grid."""

    def __init__(self, section: McpServersSection, server: McpServer) -> None:
        name = server.name
        self.server = server
        self.name_label = QLabel(f"<b>{html.escape(name)}</b>")
        self.name_label.setTextFormat(Qt.TextFormat.RichText)
        self.name_label.setToolTip(_plain_tooltip(describe(server)))
        self.detail = _plain(muted(describe(server), wrap=False))
        self.state_label = _plain(QLabel())
        self.state_label.setWordWrap(True)
        self.state_label.setAccessibleName(f"State of {name}")
        self.enabled = QCheckBox("Enabled")
        self.enabled.setAccessibleName(f"Enabled {name}")
        self.enabled.setChecked(server.enabled)
        self.enabled.toggled.connect(lambda on: section.set_enabled(name, on))
        self.log_button = QPushButton("Show log")
        self.log_button.setAccessibleName(f"Show log of {name}")
        self.log_button.clicked.connect(lambda: section.show_log(name))
        self.remove_button = QPushButton("Remove")
        self.remove_button.setAccessibleName(f"Remove {name}")
        self.remove_button.clicked.connect(lambda: section.remove(name))
        self.text_box = QWidget()
        box = QVBoxLayout(self.text_box)
        box.setContentsMargins(0, 0, 0, 0)
        box.setSpacing(0)
        box.addWidget(self.detail)
        box.addWidget(self.state_label)

    def add_to(self, grid: QGridLayout, index: int) -> None:
        grid.addWidget(self.name_label, index, 0, Qt.AlignmentFlag.AlignTop)
        grid.addWidget(self.text_box, index, 1)
        grid.addWidget(self.enabled, index, 2, Qt.AlignmentFlag.AlignTop)
        grid.addWidget(self.log_button, index, 3, Qt.AlignmentFlag.AlignTop)
        grid.addWidget(self.remove_button, index, 4, Qt.AlignmentFlag.AlignTop)

    def remove_from(self, grid: QGridLayout) -> None:
        for widget in (self.name_label, self.text_box, self.enabled, self.log_button, self.remove_button):
            grid.removeWidget(widget)
            widget.deleteLater()

    def show_state(self, state: ServerState | None, *, attached: bool) -> None:
        text, colour = state_summary(self.server, state, attached=attached)
        self.state_label.setText(text)
        self.state_label.setStyleSheet(f"color: {colour};" if colour else "")
        self.log_button.setEnabled(state is not None and bool(state.stderr or state.error))


def state_summary(server: McpServer, state: ServerState | None, *, attached: bool) -> tuple[str, str | None]:
    """The row's state line and its colour: "Ready: 5 tools", "Failed: <first stderr line>", ..."""
    if not server.enabled:
        return "Disabled", theme.MUTED
    if state is None or state.state == "stopped":
        return ("Stopped" if attached else "Not started (the chat starts it)"), theme.MUTED
    if state.state == "starting":
        return "Starting…", theme.WARN
    if state.state == "ready":
        count = len(state.tools)
        return f"Ready: {count} tool{'s' if count != 1 else ''}", theme.GOOD
    first_line = next((line.strip() for line in state.stderr.splitlines() if line.strip()), "")
    reason = first_line or state.error or "it stopped"
    return f"Failed: {reason}", theme.BAD


def describe(server: McpServer) -> str:
    """The server in one line: its command line, or its URL and transport."""
    if server.command is not None:
        return shlex.join([server.command, *server.args])
    return f"{server.url} ({'SSE' if server.transport == 'sse' else 'Streamable HTTP'})"


def _plain(label: QLabel) -> QLabel:
    """`label`, showing its text exactly: a server's name, command, error or stderr line is never read
    as rich text (which could style itself or make the label load an image)."""
    label.setTextFormat(Qt.TextFormat.PlainText)
    return label


def _plain_tooltip(text: str) -> str:
    """`text` as a tooltip that shows it exactly (Qt reads a tooltip that looks like markup as rich text)."""
    return f"<qt>{html.escape(text)}</qt>"


class AddServerDialog(QDialog):
    """A small form for one server: a name, then a command line (+ env) or a URL (+ headers)."""

    accepted_server = Signal(object)  # McpServer

    def __init__(self, taken: set[str], parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.setWindowTitle("Add an MCP server")
        self.taken = taken
        layout = QVBoxLayout(self)
        form = QFormLayout()
        self.name = QLineEdit()
        self.name.setAccessibleName("Server name")
        self.name.setPlaceholderText("files")
        form.addRow("&Name", self.name)
        kinds = QHBoxLayout()
        self.stdio = QRadioButton("&Command (stdio)")
        self.http = QRadioButton("&URL (Streamable HTTP)")
        self.sse = QCheckBox("older HTTP+SSE transport")
        self.stdio.setChecked(True)
        group = QButtonGroup(self)
        group.addButton(self.stdio)
        group.addButton(self.http)
        kinds.addWidget(self.stdio)
        kinds.addWidget(self.http)
        kinds.addWidget(self.sse)
        form.addRow("Kind", kinds)
        self.command = QLineEdit()
        self.command.setAccessibleName("Command line")
        self.command.setPlaceholderText("npx -y @modelcontextprotocol/server-filesystem ~/Documents")
        form.addRow("Co&mmand line", self.command)
        self.env = QPlainTextEdit()
        self.env.setAccessibleName("Environment")
        self.env.setPlaceholderText("NAME=value, one a line (the server gets only these and PATH, HOME, USER…)")
        self.env.setFixedHeight(70)
        form.addRow("&Environment", self.env)
        self.url = QLineEdit()
        self.url.setAccessibleName("URL")
        self.url.setPlaceholderText("https://example.com/mcp")
        form.addRow("U&RL", self.url)
        self.headers = QPlainTextEdit()
        self.headers.setAccessibleName("Headers")
        self.headers.setPlaceholderText("Name: value, one a line (Authorization: Bearer …)")
        self.headers.setFixedHeight(70)
        form.addRow("&Headers", self.headers)
        self.timeout = QDoubleSpinBox()
        self.timeout.setAccessibleName("Tool call timeout")
        self.timeout.setRange(1, 3600)
        self.timeout.setValue(mcp_config.DEFAULT_TIMEOUT_S)
        self.timeout.setSuffix(" s")
        form.addRow("Tool call &timeout", self.timeout)
        layout.addLayout(form)
        layout.addWidget(
            muted(
                "Values whose names say TOKEN, KEY, SECRET, PASSWORD or AUTH (and an Authorization header) are "
                "kept in the system keyring, not in mcp.json."
            )
        )
        self.error = _plain(QLabel())
        self.error.setWordWrap(True)
        self.error.setStyleSheet(f"color: {theme.BAD};")
        self.error.setAccessibleName("Problem")
        layout.addWidget(self.error)
        buttons = QDialogButtonBox(QDialogButtonBox.StandardButton.Cancel)
        self.add_button = buttons.addButton("Add", QDialogButtonBox.ButtonRole.AcceptRole)
        buttons.accepted.connect(self.submit)
        buttons.rejected.connect(self.reject)
        layout.addWidget(buttons)
        self.stdio.toggled.connect(self._kind_changed)
        self._kind_changed()

    def _kind_changed(self) -> None:
        stdio = self.stdio.isChecked()
        for widget in (self.command, self.env):
            widget.setEnabled(stdio)
        for widget in (self.url, self.headers, self.sse):
            widget.setEnabled(not stdio)

    def server(self) -> McpServer:
        """The server the form describes; a ValueError saying what is wrong."""
        name = self.name.text().strip()
        if not name:
            raise ValueError("Give the server a name.")
        if name in self.taken:
            raise ValueError(f"There is already a server named {name}.")
        fields: dict[str, object] = {"name": name, "timeout_s": self.timeout.value()}
        if self.stdio.isChecked():
            try:
                words = shlex.split(self.command.text())
            except ValueError as err:
                raise ValueError(f"The command line cannot be read ({err}).") from err
            if not words:
                raise ValueError("Give the command that starts the server.")
            fields |= {"command": words[0], "args": words[1:], "env": _pairs(self.env.toPlainText(), "=")}
        else:
            fields |= {
                "url": self.url.text().strip(),
                "headers": _pairs(self.headers.toPlainText(), ":"),
                "sse": self.sse.isChecked(),
            }
        try:
            return McpServer.model_validate(fields)
        except ValidationError as err:
            raise ValueError("; ".join(e["msg"].removeprefix("Value error, ") for e in err.errors())) from err

    def submit(self) -> None:
        """Check the form; a valid server goes to the section (which closes the dialog once saved)."""
        try:
            server = self.server()
        except ValueError as err:
            self.error.setText(str(err))
            return
        self.error.setText("")
        self.accepted_server.emit(server)


def _pairs(text: str, separator: str) -> dict[str, str]:
    """`NAME=value` (or `Name: value`) lines as a mapping; a ValueError naming a line without one."""
    pairs: dict[str, str] = {}
    for line in text.splitlines():
        if not line.strip():
            continue
        key, found, value = line.partition(separator)
        if not found or not key.strip():
            raise ValueError(f"{line.strip()!r} is not NAME{separator}value.")
        pairs[key.strip()] = value.strip()
    return pairs
