"""Settings > MCP servers, driven as a user drives it: add a server in the form, see it start (or fail, with
its stderr behind "Show log"), disable, remove, import another app's servers, open the file.

The servers are real: the demo server the chat tests define with the SDK (tests/chat/mcp_servers/
demo_server.py), run by a real McpHost. Secrets go to the test keyring (a file standing in for the OS's).
Nothing sleeps to synchronize: each step waits for the state the row shows.
"""

from __future__ import annotations

import json
import sys
from collections.abc import Iterator
from pathlib import Path

import keyring
import psutil
import pytest
from PySide6.QtCore import Qt, QUrl
from PySide6.QtGui import QDesktopServices
from PySide6.QtWidgets import QLabel, QPlainTextEdit, QPushButton

from launcher.chat import mcp_config
from launcher.chat.mcp_config import McpServer
from launcher.chat.mcp_host import McpHost, ServerState
from launcher.ui import workers
from launcher.ui.panels.mcp_servers import NOTHING_RUNS_WITHOUT_ASKING, McpServersSection
from tests.server import keyring_backend

DEMO = Path(__file__).parents[1] / "chat" / "mcp_servers" / "demo_server.py"
START_MS = 90_000  # a cold Python start on a loaded 2-core machine


@pytest.fixture(autouse=True)
def test_keyring(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(keyring_backend.FILE_ENV, str(tmp_path / "keyring.json"))
    monkeypatch.setattr(keyring.core, "_keyring_backend", keyring_backend.FileKeyring())


@pytest.fixture
def hosts() -> Iterator[list[McpHost]]:
    """Hosts a test starts: stopped at the end, after any restart the section queued has run."""
    started: list[McpHost] = []
    yield started
    workers.pool().waitForDone(60_000)
    for host in started:
        host.stop()


def demo(name: str, mode: str = "stdio", **fields: object) -> McpServer:
    return McpServer.model_validate({"name": name, "command": sys.executable, "args": [str(DEMO), mode], **fields})


def section_with_host(qtbot, hosts: list[McpHost], servers: dict[str, McpServer]) -> McpServersSection:  # type: ignore[no-untyped-def]
    mcp_config.save(servers)
    loaded = mcp_config.load()
    section = McpServersSection(loaded)
    qtbot.addWidget(section)
    host = McpHost(loaded, start_timeout_s=START_MS / 1000)
    hosts.append(host)
    section.attach(host)
    host.start()
    return section


def test_an_empty_list_says_what_to_do_and_that_nothing_runs_without_asking(qtbot) -> None:  # type: ignore[no-untyped-def]
    section = McpServersSection({})
    qtbot.addWidget(section)
    section.show()
    texts = [label.text() for label in section.findChildren(type(section.status))]
    assert NOTHING_RUNS_WITHOUT_ASKING in texts
    assert section.empty.isVisible()
    assert str(mcp_config.mcp_file()) in section.file_label.text()


def test_adding_a_server_saves_it_with_its_secret_in_the_keyring_and_starts_it(qtbot, hosts) -> None:  # type: ignore[no-untyped-def]
    section = section_with_host(qtbot, hosts, {})
    saved: list[dict[str, McpServer]] = []
    section.changed.connect(saved.append)
    dialog = section.open_add_dialog()
    dialog.name.setText("demo")
    dialog.command.setText(f"{sys.executable} {DEMO} stdio")
    dialog.env.setPlainText("DEMO_TOKEN=s3cret\nDEMO_MODE=friendly\n")
    dialog.add_button.click()
    assert not dialog.isVisible()

    assert list(saved[-1]) == ["demo"]
    entry = json.loads(mcp_config.mcp_file().read_text())["mcpServers"]["demo"]
    assert entry["command"] == sys.executable and entry["args"] == [str(DEMO), "stdio"]
    assert entry["env"] == {"DEMO_TOKEN": "keyring:", "DEMO_MODE": "friendly"}
    assert section.status.text() == "Added demo."

    qtbot.waitUntil(lambda: section.state_text("demo") == "Ready: 5 tools", timeout=START_MS)
    host = hosts[0]
    assert host.call("demo__echo_env", {"name": "DEMO_TOKEN"}).text == "DEMO_TOKEN=s3cret"


def test_the_form_says_what_is_wrong(qtbot) -> None:  # type: ignore[no-untyped-def]
    section = McpServersSection({"files": demo("files")})
    qtbot.addWidget(section)
    dialog = section.open_add_dialog()
    dialog.add_button.click()
    assert dialog.error.text() == "Give the server a name." and dialog.isVisible()
    dialog.name.setText("files")
    dialog.add_button.click()
    assert dialog.error.text() == "There is already a server named files."
    dialog.name.setText("remote")
    dialog.http.setChecked(True)
    dialog.url.setText("example.com/mcp")
    dialog.add_button.click()
    assert "must start with http:// or https://" in dialog.error.text()
    dialog.url.setText("https://example.com/mcp")
    dialog.headers.setPlainText("Authorization Bearer x")
    dialog.add_button.click()
    assert dialog.error.text() == "'Authorization Bearer x' is not NAME:value."
    dialog.headers.setPlainText("Authorization: Bearer x")
    dialog.add_button.click()
    assert not dialog.isVisible()
    assert section.servers["remote"].headers == {"Authorization": "keyring:"}
    assert keyring.get_password(mcp_config.KEYRING_SERVICE, "remote/header/Authorization") == "Bearer x"


def test_a_failing_server_shows_its_first_stderr_line_and_its_log(qtbot, hosts) -> None:  # type: ignore[no-untyped-def]
    section = section_with_host(qtbot, hosts, {"broken": demo("broken", "broken"), "demo": demo("demo")})
    qtbot.waitUntil(lambda: section.state_text("broken").startswith("Failed"), timeout=START_MS)
    assert section.state_text("broken") == "Failed: demo server: cannot start: DEMO_CONFIG is missing"
    row = section.rows["broken"]
    assert row.log_button.isEnabled()
    row.log_button.click()
    log = section.log_dialog
    assert log is not None and log.isVisible()
    text = log.findChild(QPlainTextEdit)
    assert text is not None and "DEMO_CONFIG is missing" in text.toPlainText()
    log.close()
    qtbot.waitUntil(lambda: section.state_text("demo") == "Ready: 5 tools", timeout=START_MS)


def test_disabling_and_removing_save_the_file_and_restart_the_host(qtbot, hosts) -> None:  # type: ignore[no-untyped-def]
    section = section_with_host(qtbot, hosts, {"one": demo("one"), "two": demo("two")})
    qtbot.waitUntil(lambda: section.state_text("two") == "Ready: 5 tools", timeout=START_MS)
    host = hosts[0]
    pid = int(host.call("two__pid", {}).text)

    section.rows["two"].enabled.click()
    assert json.loads(mcp_config.mcp_file().read_text())["mcpServers"]["two"]["disabled"] is True
    assert section.state_text("two") == "Disabled"
    workers.pool().waitForDone(60_000)  # the restart runs on a worker: the window never waits for it
    qtbot.waitUntil(lambda: host.states()["one"].state == "ready", timeout=START_MS)
    assert host.states()["two"].state == "stopped"
    assert not psutil.pid_exists(pid) or psutil.Process(pid).status() == psutil.STATUS_ZOMBIE
    assert [tool.server for tool in host.tools()] == ["one"] * 5

    section.rows["one"].remove_button.click()
    assert list(json.loads(mcp_config.mcp_file().read_text())["mcpServers"]) == ["two"]
    assert list(section.rows) == ["two"] and section.status.text() == "Removed one."
    workers.pool().waitForDone(60_000)
    assert host.tools() == []

    section.rows["two"].enabled.click()  # on again
    qtbot.waitUntil(lambda: section.state_text("two") == "Ready: 5 tools", timeout=START_MS)


def test_import_offers_the_apps_found_and_adds_only_new_names(qtbot, tmp_path: Path, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    home = tmp_path / "user"
    monkeypatch.setenv("HOME", str(home))
    monkeypatch.delenv("APPDATA", raising=False)
    cursor = home / ".cursor" / "mcp.json"
    cursor.parent.mkdir(parents=True)
    cursor.write_text(
        json.dumps(
            {
                "mcpServers": {
                    "files": {"command": "npx", "args": ["-y", "@modelcontextprotocol/server-filesystem", "/tmp"]},
                    "search": {"url": "https://search.example/mcp", "headers": {"X-API-Key": "k-123"}},
                }
            }
        )
    )
    section = McpServersSection({"files": demo("files")})
    qtbot.addWidget(section)
    assert list(section.import_buttons) == ["Cursor"]  # only the sources that exist here
    buttons = [b.text() for b in section.findChildren(QPushButton) if b.text().startswith("Import")]
    assert buttons == ["Import from Cursor"]
    section.import_buttons["Cursor"].click()
    assert section.status.text() == ("Imported 1 server(s) from Cursor: search; already here, left as they are: files.")
    assert list(section.rows) == ["files", "search"]
    assert section.servers["files"].command == sys.executable  # the user's own entry was kept
    assert "k-123" not in mcp_config.mcp_file().read_text()
    assert section.state_text("search") == "Not started (the chat starts it)"


def test_a_broken_file_is_shown_and_never_overwritten(qtbot) -> None:  # type: ignore[no-untyped-def]
    path = mcp_config.mcp_file()
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("{broken")
    section = McpServersSection.from_file()
    qtbot.addWidget(section)
    assert "is not valid JSON" in section.status.text() and section.rows == {}
    assert not section.add(demo("demo"))
    assert section.status.text().startswith("Could not save:")
    assert path.read_text() == "{broken"


def test_open_file_creates_it_and_opens_it(qtbot, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    opened: list[QUrl] = []
    monkeypatch.setattr(QDesktopServices, "openUrl", lambda url: opened.append(url) or True)
    section = McpServersSection({})
    qtbot.addWidget(section)
    section.open_file_button.click()
    assert [url.toLocalFile() for url in opened] == [str(mcp_config.mcp_file())]
    assert json.loads(mcp_config.mcp_file().read_text()) == {"mcpServers": {}}


def test_server_names_states_and_errors_show_as_text(qtbot, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    """What a server or its config says is never read as rich text: an `<img>` there would load a file."""
    markup = f'<img src="{tmp_path / "picture.png"}"><b>bold</b>'
    server = McpServer.model_validate({"name": "tricky", "command": "run", "args": [markup]})
    section = McpServersSection({"tricky": server})
    qtbot.addWidget(section)
    section._state_changed(ServerState("tricky", "failed", error=f"error {markup}", stderr=f"line {markup}\n"))
    row = section.rows["tricky"]
    assert section.state_text("tricky") == f"Failed: line {markup}"
    assert row.state_label.textFormat() == Qt.TextFormat.PlainText
    assert row.detail.textFormat() == Qt.TextFormat.PlainText and markup in row.detail.text()
    assert "&lt;img" in row.name_label.toolTip() and "<img" not in row.name_label.toolTip()
    section.import_from(tmp_path / "missing.json", f"app {markup}")
    assert markup in section.status.text() and section.status.textFormat() == Qt.TextFormat.PlainText
    log = section.show_log("tricky")
    labels = [label for label in log.findChildren(QLabel) if label.text() == f"error {markup}"]
    assert labels and labels[0].textFormat() == Qt.TextFormat.PlainText
    log.close()
