"""The Agents page: which agents are installed (found by the real check) and a Launch button per agent.

The agents' programs are fake scripts on a made-up PATH and HOME; the terminal is found by the real
lookup too, and only the final start of its process is replaced, to see the command it is given.
The folder chooser is answered by the test (a modal dialog would wait for a user).
"""

from __future__ import annotations

import sys
from dataclasses import replace
from pathlib import Path

import pytest
from PySide6.QtWidgets import QFileDialog

from launcher.core.settings import Settings
from launcher.integrations import AGENTS, terminal
from launcher.integrations.agents.base import Install
from launcher.ui.panels.agents import AgentsPanel

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="a fake Linux terminal and POSIX scripts")


def executable(path: Path, body: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(f"#!/bin/sh\n{body}\n")
    path.chmod(0o755)


@pytest.fixture
def started(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> list[terminal.TerminalCommand]:
    """A PATH with Claude Code (a fake one saying its version) and xterm, and every terminal start recorded."""
    bin_dir = tmp_path / "bin"
    executable(bin_dir / "launcher-test-claude", "echo '2.1.332 (Claude Code)'")
    executable(bin_dir / "xterm", "exit 0")
    monkeypatch.setenv("PATH", str(bin_dir))
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    # Program names no machine has, so the user's own installs never show up here.
    for agent_id, agent in list(AGENTS.items()):
        binary = None if agent_id == "continue" else f"launcher-test-{agent_id}"
        monkeypatch.setitem(AGENTS, agent_id, replace(agent, binary=binary, install=Install("npm", f"{agent_id}-pkg")))
    monkeypatch.setitem(AGENTS, "claude-code", replace(AGENTS["claude-code"], binary="launcher-test-claude"))
    calls: list[terminal.TerminalCommand] = []
    monkeypatch.setattr(terminal, "start_detached", calls.append)
    return calls


class FolderChooser:
    """Stands in for the folder dialog: answers `answer` ("" is Cancel) and records what it was asked."""

    def __init__(self) -> None:
        self.answer = ""
        self.asked: list[tuple[str, str]] = []

    def __call__(self, _parent: object, title: str, start: str) -> str:
        self.asked.append((title, start))
        return self.answer


@pytest.fixture
def chooser(monkeypatch: pytest.MonkeyPatch) -> FolderChooser:
    choose = FolderChooser()
    monkeypatch.setattr(QFileDialog, "getExistingDirectory", choose)
    return choose


@pytest.fixture
def project(tmp_path: Path) -> Path:
    folder = tmp_path / "my app & 50% it's"
    folder.mkdir()
    return folder


def checked_panel(qtbot, tmp_path: Path, settings: Settings | None = None) -> AgentsPanel:  # type: ignore[no-untyped-def]
    panel = AgentsPanel(home=tmp_path / "home", settings=settings)
    qtbot.addWidget(panel)
    with qtbot.waitSignal(panel.installed_checked, timeout=30_000):
        panel.select_agent("claude-code")
    return panel


def test_installed_agent_shows_its_version_and_launches_in_the_chosen_folder(  # type: ignore[no-untyped-def]
    qtbot, tmp_path, started, chooser, project
) -> None:
    settings = Settings()
    panel = checked_panel(qtbot, tmp_path, settings)
    assert panel.install_label is not None and panel.launch_button is not None and panel.launch_status is not None
    assert panel.install_label.text() == "installed 2.1.332"
    assert panel.install_label.toolTip() == str(tmp_path / "bin" / "launcher-test-claude")
    assert panel.launch_button.isEnabled()
    chooser.answer = str(project)
    with qtbot.waitSignal(panel.launched):
        panel.launch_button.click()
    # No folder chosen before: the dialog starts in HOME.
    assert chooser.asked == [("Open Claude Code in which project folder?", str(tmp_path / "home"))]
    [command] = started
    assert isinstance(command.args, list)
    assert command.args[:2] == [str(tmp_path / "bin" / "xterm"), "-e"]
    assert command.args[2:4] == ["sh", "-c"] and command.args[5:7] == ["sh", str(project)]  # cd'd into first
    # The launcher as this test process runs it (a source checkout): python -m launcher launch claude-code.
    assert command.args[-5:] == [sys.executable, "-m", "launcher", "launch", "claude-code"]
    assert settings.last_project_dir == str(project)
    assert panel.launch_status.text().startswith(f"Opened Claude Code in {project} ")
    assert "launcher launch claude-code" in panel.launch_status.text()
    # The next Launch asks again, starting in the folder chosen last time.
    with qtbot.waitSignal(panel.launched):
        panel.launch_button.click()
    assert chooser.asked[-1] == ("Open Claude Code in which project folder?", str(project))
    assert len(started) == 2


def test_cancelling_the_folder_chooser_launches_nothing(qtbot, tmp_path, started, chooser, project) -> None:  # type: ignore[no-untyped-def]
    settings = Settings(last_project_dir=str(project))
    panel = checked_panel(qtbot, tmp_path, settings)
    chooser.answer = ""
    panel.launch_button.click()  # type: ignore[union-attr]
    assert chooser.asked == [("Open Claude Code in which project folder?", str(project))]
    assert started == []
    assert settings.last_project_dir == str(project)
    assert panel.launch_status is not None and panel.launch_status.isHidden()


def test_a_last_folder_that_is_gone_starts_the_chooser_in_home(qtbot, tmp_path, started, chooser) -> None:  # type: ignore[no-untyped-def]
    panel = checked_panel(qtbot, tmp_path, Settings(last_project_dir=str(tmp_path / "deleted")))
    panel.launch_button.click()  # type: ignore[union-attr]
    assert chooser.asked == [("Open Claude Code in which project folder?", str(tmp_path / "home"))]
    assert started == []


def test_missing_agent_shows_its_install_command_and_cannot_launch(qtbot, tmp_path, started) -> None:  # type: ignore[no-untyped-def]
    panel = checked_panel(qtbot, tmp_path)
    panel.select_agent("codex")
    assert panel.install_label is not None and panel.launch_button is not None
    assert panel.install_label.text() == "not installed — npm install -g codex-pkg"
    assert not panel.launch_button.isEnabled()
    panel.select_agent("continue")  # an editor extension: no program to launch
    assert "No command-line program" in panel.install_label.text()
    assert panel.launch_button.isHidden()
    assert started == []


def test_no_terminal_is_shown_on_the_page(qtbot, tmp_path, started, chooser, project) -> None:  # type: ignore[no-untyped-def]
    panel = checked_panel(qtbot, tmp_path)
    (tmp_path / "bin" / "xterm").unlink()
    chooser.answer = str(project)
    panel.launch_button.click()  # type: ignore[union-attr]
    assert started == []
    assert panel.launch_status is not None and not panel.launch_status.isHidden()
    assert "No terminal program was found" in panel.launch_status.text()
    assert "launch claude-code" in panel.launch_status.text()
