"""Connect an agent: for each agent the launcher knows (`integrations.AGENTS`), the exact settings
for the running endpoint with copy buttons, a config-file writer (backup first) and a live "Test";
whether the agent's program is installed (and its version), and a Launch button that asks for the
project folder and opens `launcher launch AGENT` there in a new terminal window (an agent works on
the folder it starts in; a terminal opens in HOME). The folder chosen is kept in the settings the
window owns (`Settings.last_project_dir`), which the window saves, so the next Launch starts there.

Everything agent-specific comes from `launcher.integrations` (Qt-free); this page only shows it.
Finding the installed agents runs each one's `--version`, so it runs off the UI thread.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

from PySide6.QtCore import Qt, Signal
from PySide6.QtGui import QBrush, QColor, QGuiApplication
from PySide6.QtWidgets import (
    QComboBox,
    QFileDialog,
    QHBoxLayout,
    QLabel,
    QListWidget,
    QMessageBox,
    QPlainTextEdit,
    QPushButton,
    QScrollArea,
    QTreeWidget,
    QTreeWidgetItem,
    QVBoxLayout,
    QWidget,
)

from launcher.core.errors import LauncherError
from launcher.core.settings import Settings
from launcher.ui import theme, workers
from launcher.ui.server_process import ServerEndpoint
from launcher.ui.widgets.card import Card, CopyField, muted

if TYPE_CHECKING:
    from launcher.integrations import Agent, AgentSetup, ConfigEdit, EditResult, Endpoint, LiveTestReport
    from launcher.integrations.installed import InstalledAgent


def _api() -> Any:
    """`launcher.integrations`, imported on first use so it does not slow the window's start."""
    import launcher.integrations

    return launcher.integrations


def _installed_api() -> Any:
    """`launcher.integrations.installed`, imported on first use like `_api()`."""
    import launcher.integrations.installed

    return launcher.integrations.installed


def _terminal_api() -> Any:
    """`launcher.integrations.terminal`, imported on first use like `_api()`."""
    import launcher.integrations.terminal

    return launcher.integrations.terminal


def install_text(agent: Agent, found: InstalledAgent | None) -> str:
    """What the page says about the agent's program: "installed 1.2.3", "not installed — npm install -g ..."."""
    if agent.binary is None:
        return "No command-line program: it runs inside your editor."
    if found is None:
        return "Checking whether it is installed…"
    if found.installed:
        return f"installed {found.version}" if found.version else "installed (it did not say its version)"
    how = found.install_command or f"put `{agent.binary}` on your PATH"
    return f"not installed — {how}"


STATUS_STYLE = {
    "pass": ("✔ pass", theme.GOOD),
    "fail": ("✖ fail", theme.BAD),
    "warn": ("! warn", theme.WARN),
    "skip": ("– skip", theme.MUTED),
}


def endpoint_for(server: ServerEndpoint) -> Endpoint:
    """The integrations' Endpoint for a running server."""
    return _api().Endpoint(server.base_url, server.api_key, server.model, server.context_length or None)


def _code_box(text: str) -> QPlainTextEdit:
    box = QPlainTextEdit(text)
    box.setReadOnly(True)
    box.setFont(theme.monospace_font())
    box.setLineWrapMode(QPlainTextEdit.LineWrapMode.NoWrap)
    lines = max(2, min(12, text.count("\n") + 2))
    box.setFixedHeight(box.fontMetrics().lineSpacing() * lines + 12)
    return box


def _copy_button(text_source, label: str = "Copy") -> QPushButton:  # type: ignore[no-untyped-def]
    button = QPushButton(label)
    button.clicked.connect(lambda: QGuiApplication.clipboard().setText(text_source()))
    return button


class AgentsPanel(QWidget):
    """Agent list on the left; the selected agent's settings, writer and test on the right."""

    config_written = Signal(object)  # EditResult
    test_finished = Signal(object)  # LiveTestReport
    installed_checked = Signal(object)  # dict[str, InstalledAgent]
    launched = Signal(object)  # the TerminalCommand that opened the agent

    def __init__(
        self, parent: QWidget | None = None, *, home: Path | None = None, settings: Settings | None = None
    ) -> None:
        super().__init__(parent)
        self.home = home or Path.home()
        # The window's settings object: this page only changes `last_project_dir`; the window saves it.
        self.settings = settings if settings is not None else Settings()
        self.endpoint: Endpoint | None = None
        self.setup: AgentSetup | None = None
        self._testing = False
        layout = QVBoxLayout(self)
        layout.setContentsMargins(20, 16, 20, 16)
        title = QLabel("Connect a coding agent")
        title.setObjectName("PageTitle")
        self.info = muted("Start the server first: the settings below are for the running endpoint.")
        layout.addWidget(title)
        layout.addWidget(self.info)
        row = QHBoxLayout()
        self.agent_list = QListWidget()
        self.agent_list.setAccessibleName("Agents")
        self.agent_list.setObjectName("AgentList")
        self.agent_list.setFixedWidth(self.fontMetrics().horizontalAdvance("M") * 11)
        self.agent_list.currentRowChanged.connect(self._render)
        row.addWidget(self.agent_list, 0, Qt.AlignmentFlag.AlignTop)
        self._scroll = QScrollArea()
        self._scroll.setWidgetResizable(True)
        self._scroll.setFrameShape(QScrollArea.Shape.NoFrame)
        row.addWidget(self._scroll, 1)
        layout.addLayout(row, 1)
        self.detail: QWidget | None = None
        self.write_buttons: list[QPushButton] = []
        self.test_button: QPushButton | None = None
        self.results: QTreeWidget | None = None
        self.status: QLabel | None = None
        self.installed: dict[str, InstalledAgent] | None = None  # None until the first check is done
        self._checking_installed = False
        self.install_label: QLabel | None = None
        self.launch_button: QPushButton | None = None
        self.launch_status: QLabel | None = None
        self._agents_loaded = False

    def _ensure_agents(self) -> None:
        if self._agents_loaded:
            return
        self._agents_loaded = True
        for agent in _api().AGENTS.values():
            self.agent_list.addItem(agent.name)
        self.agent_list.setCurrentRow(0)
        self.check_installed()

    def showEvent(self, event: object) -> None:
        """Load the agent list the first time the page is shown; look for installed agents every time."""
        if self._agents_loaded:
            self.check_installed()  # the user may have installed one since (the install line says how)
        self._ensure_agents()
        super().showEvent(event)

    # -- public ----------------------------------------------------------------------------
    def set_endpoint(self, server: ServerEndpoint | None) -> None:
        """Render the settings for this server (None: not running)."""
        self._ensure_agents()
        self.endpoint = endpoint_for(server) if server is not None else None
        self.info.setText(
            f"Settings for {server.model} at {server.base_url}."
            if server
            else "Start the server first: the settings below are for the running endpoint."
        )
        self._render(self.agent_list.currentRow())

    def select_agent(self, agent_id: str) -> None:
        """Show one agent by id ("claude-code", "codex", ...)."""
        self._ensure_agents()
        self.agent_list.setCurrentRow(list(_api().AGENTS).index(agent_id))

    def check_installed(self) -> None:
        """Find which agents are installed, and their versions, in the background."""
        if self._checking_installed:
            return
        self._checking_installed = True
        workers.run_in_background(
            _installed_api().installed_agents,
            list(_api().AGENTS.values()),
            on_done=self._installed_done,
            on_failed=self._installed_failed,
        )

    @property
    def agent_id(self) -> str:
        """The agent shown."""
        self._ensure_agents()
        return list(_api().AGENTS)[max(0, self.agent_list.currentRow())]

    # -- rendering -------------------------------------------------------------------------
    def _render(self, index: int) -> None:
        if index < 0:
            return
        agents = _api().AGENTS
        agent = agents[list(agents)[index]]
        content = QWidget()
        body = QVBoxLayout(content)
        body.setContentsMargins(4, 0, 4, 0)
        body.setSpacing(12)
        head = Card(agent.name)
        head.body.addWidget(QLabel(agent.summary))
        link = QLabel(f"<a href='{agent.docs_url}'>{agent.docs_url}</a>")
        link.setOpenExternalLinks(True)
        head.body.addWidget(link)
        self._add_launch_row(head, agent)
        body.addWidget(head)
        self.write_buttons = []
        self.test_button = None
        self.results = None
        if self.endpoint is None:
            head.body.addWidget(muted(f"Needs at least {agent.min_context:,} tokens of context."))
            self.setup = None
        else:
            self.setup = agent.setup_for(self.endpoint)
            self._render_setup(body, self.setup)
        body.addStretch(1)
        self._scroll.setWidget(content)
        self.detail = content

    def _add_launch_row(self, head: Card, agent: Agent) -> None:
        row = QHBoxLayout()
        self.install_label = muted()
        self.install_label.setTextInteractionFlags(Qt.TextInteractionFlag.TextSelectableByMouse)
        row.addWidget(self.install_label, 1)
        self.launch_button = QPushButton("Launch")
        self.launch_button.setToolTip(
            f"Asks for the project folder, then opens a terminal window there running: launcher launch {agent.id}"
        )
        self.launch_button.clicked.connect(lambda: self.launch_agent(agent.id))
        self.launch_button.setVisible(agent.binary is not None)
        row.addWidget(self.launch_button, 0, Qt.AlignmentFlag.AlignRight)
        head.body.addLayout(row)
        self.launch_status = muted()
        self.launch_status.hide()
        head.body.addWidget(self.launch_status)
        self._show_installed(agent)

    def _show_installed(self, agent: Agent) -> None:
        """The shown agent's install line and Launch button, from the last check (if any is done)."""
        found = None if self.installed is None else self.installed.get(agent.id)
        if self.install_label is not None:
            self.install_label.setText(install_text(agent, found))
            self.install_label.setToolTip(str(found.path) if found is not None and found.path else "")
        if self.launch_button is not None:
            self.launch_button.setEnabled(found is not None and found.installed)

    def _render_setup(self, body: QVBoxLayout, setup: AgentSetup) -> None:
        if setup.warnings:
            warn = Card("Before you start")
            for text in setup.warnings:
                label = QLabel(f"⚠ {text}")
                label.setWordWrap(True)
                label.setStyleSheet(f"color: {theme.WARN};")
                warn.body.addWidget(label)
            body.addWidget(warn)
        fields = Card("Settings")
        for field in setup.fields:
            fields.body.addWidget(muted(field.label, wrap=False))
            fields.body.addWidget(CopyField(field.value))
        for note in setup.notes:
            fields.body.addWidget(muted(note))
        body.addWidget(fields)
        if setup.env or setup.command:
            env = Card("Environment")
            shell = QComboBox()
            shell.addItems(list(_api().SHELLS))
            snippet = _code_box(setup.shell_snippet("bash"))
            shell.currentTextChanged.connect(lambda name: snippet.setPlainText(setup.shell_snippet(name)))
            top = QHBoxLayout()
            top.addWidget(muted("Shell", wrap=False))
            top.addWidget(shell)
            top.addStretch(1)
            top.addWidget(_copy_button(snippet.toPlainText))
            env.body.addLayout(top)
            env.body.addWidget(snippet)
            body.addWidget(env)
        for edit in setup.config_edits:
            body.addWidget(self._edit_card(edit))
        test = Card("Test the connection")
        test.body.addWidget(muted("Makes real calls the way this agent does: streaming text and a tool call."))
        self.test_button = QPushButton("Test")
        self.test_button.setObjectName("Primary")
        self.test_button.clicked.connect(self.run_test)
        self.test_button.setEnabled(not self._testing)
        test.body.addWidget(self.test_button, 0, Qt.AlignmentFlag.AlignLeft)
        self.results = QTreeWidget()
        self.results.setHeaderLabels(["Check", "Result", "Details"])
        self.results.setRootIsDecorated(False)
        self.results.setMinimumHeight(self.fontMetrics().height() * 12)
        self.results.hide()
        test.body.addWidget(self.results)
        body.addWidget(test)

    def _edit_card(self, edit: ConfigEdit) -> Card:
        path = edit.path(self.home)
        card = Card(f"Config file: ~/{edit.relative_path}")
        if edit.description:
            card.body.addWidget(muted(edit.description))
        preview = _code_box(edit.fragment_text())
        card.body.addWidget(preview)
        row = QHBoxLayout()
        row.addWidget(_copy_button(preview.toPlainText))
        write = QPushButton(f"Write to {path.name}")
        write.setToolTip(f"Merges these settings into {path}; the old file is kept as a .bak copy first.")
        write.clicked.connect(lambda: self.write_config(edit))
        self.write_buttons.append(write)
        row.addWidget(write)
        row.addStretch(1)
        card.body.addLayout(row)
        self.status = muted()
        card.body.addWidget(self.status)
        return card

    def scroll_to_test(self) -> None:
        """Bring the live-test results into view."""
        if self.results is not None and self.results.isVisible():
            self._scroll.ensureWidgetVisible(self.results, 0, 0)

    # -- actions ---------------------------------------------------------------------------
    def write_config(self, edit: ConfigEdit, *, confirm: bool = True) -> EditResult | None:
        """Show the change, ask, then merge into the agent's config file (backup first)."""
        plan = _api().plan_edit(edit, home=self.home)
        if not plan.changed:
            if self.status:
                self.status.setText(f"{plan.path} already has these settings.")
            return None
        if confirm:
            answer = QMessageBox.question(
                self,
                "Write agent settings",
                f"Update {plan.path}?\n\n{plan.diff[:3000]}",
                QMessageBox.StandardButton.Yes | QMessageBox.StandardButton.Cancel,
            )
            if answer != QMessageBox.StandardButton.Yes:
                return None
        result = _api().apply_edit(edit, home=self.home)
        if self.status:
            self.status.setText(str(result))
        self.config_written.emit(result)
        return result

    def choose_project_folder(self, agent_name: str) -> Path | None:
        """Ask which folder the agent works on, starting at the last one (else HOME); None when cancelled."""
        last = self.settings.last_project_dir
        start = last if last and Path(last).is_dir() else str(self.home)
        chosen = QFileDialog.getExistingDirectory(self, f"Open {agent_name} in which project folder?", start)
        return Path(chosen) if chosen else None

    def launch_agent(self, agent_id: str, folder: Path | None = None) -> None:
        """Open a new terminal window running `launcher launch AGENT_ID` in a project folder.

        Without `folder` the user is asked for one; cancelling does nothing. A failure is shown on the page.
        """
        name = _api().AGENTS[agent_id].name
        if folder is None:
            folder = self.choose_project_folder(name)
            if folder is None:
                return
        # Remembered even when no terminal opens: it is the user's choice, and the next try starts there.
        self.settings.last_project_dir = str(folder)
        try:
            server = self.endpoint  # the app's own server, when it runs: launch uses it, with its key
            command = _terminal_api().open_launch(
                agent_id,
                folder,
                url=server.base_url if server else None,
                api_key=server.api_key if server else None,
            )
        except LauncherError as err:
            self._show_launch_status(str(err), theme.BAD)
            return
        self._show_launch_status(
            f"Opened {name} in {folder} ({command.terminal}: launcher launch {agent_id})", theme.MUTED
        )
        self.launched.emit(command)

    def _show_launch_status(self, text: str, colour: str) -> None:
        if self.launch_status is not None:
            self.launch_status.setText(text)
            self.launch_status.setStyleSheet(f"color: {colour};")
            self.launch_status.show()

    def _installed_done(self, installed: dict[str, InstalledAgent]) -> None:
        self._checking_installed = False
        self.installed = installed
        self._show_installed(_api().AGENTS[self.agent_id])
        self.installed_checked.emit(installed)

    def _installed_failed(self, message: str) -> None:
        self._checking_installed = False
        if self.install_label is not None:
            self.install_label.setText(f"Could not check whether it is installed: {message}")

    def run_test(self) -> None:
        """Run the live test for the shown agent in the background."""
        if self.endpoint is None or self._testing:
            return
        self._testing = True
        if self.test_button:
            self.test_button.setEnabled(False)
            self.test_button.setText("Testing…")
        workers.run_in_background(
            _api().run_live_test,
            self.endpoint,
            _api().AGENTS[self.agent_id],
            on_done=self._test_done,
            on_failed=self._test_failed,
        )

    def _test_done(self, report: LiveTestReport) -> None:
        self._testing = False
        self.test_finished.emit(report)
        if report.agent_id != self.agent_id:
            return  # the user moved on to another agent meanwhile
        if self.test_button is not None:
            self.test_button.setEnabled(True)
            self.test_button.setText("Test again")
        if self.results is not None:
            self.results.clear()
            for check in report.checks:
                label, colour = STATUS_STYLE.get(check.status, (check.status, theme.MUTED))
                item = QTreeWidgetItem([check.title, label, check.message])
                item.setForeground(1, QBrush(QColor(colour)))
                item.setToolTip(2, check.message)
                self.results.addTopLevelItem(item)
            self.results.resizeColumnToContents(0)
            self.results.resizeColumnToContents(1)
            self.results.show()

    def _test_failed(self, message: str) -> None:
        self._testing = False
        if self.test_button is not None:
            self.test_button.setEnabled(True)
            self.test_button.setText("Test")
        if self.status is not None:
            self.status.setText(message)
