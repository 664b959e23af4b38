"""App updates in the window, against a real release feed on loopback HTTP (tests/updates/feed_server.py).

The app is made to look like a frozen Linux tar.gz build (`fake_build`: its build info names the
version, the release key and the feed; `sys.executable` is a script in a temp app folder that says its
version, as the real executable does), so the real check, download, verification and install run.
Only the very last step, starting the new executable, is replaced, to see the command it is given.
"""

from __future__ import annotations

import dataclasses
import io
import os
import sys
import tarfile
from collections.abc import Iterator
from pathlib import Path

import pytest
from PySide6.QtWidgets import QMessageBox, QPushButton

from launcher.core import settings as settings_store
from launcher.core.config import ServeConfig
from launcher.core.settings import Settings
from launcher.core.units import format_bytes
from launcher.hardware.recorded import load_recorded
from launcher.ui import updates, workers
from launcher.ui.main_window import MainWindow
from launcher.ui.updates import UpdateNote
from launcher.updates import download, install, signing
from launcher.updates.check import UpdateOffer
from launcher.updates.current import Installation, deb_how
from launcher.updates.feed import FEED_FILE, parse_feed
from tests.updates.feed_server import FeedServer, Served, fake_build

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="the Linux tar.gz layout")

NEW = "0.2.0"
RELEASE = f"launcher-{NEW}-linux-x86_64.tar.gz"
NOTES = "Faster model loading.\nA note when an update exists.\nFixes.\nMore fixes.\nEven more fixes.\n"
READY = (
    'LAUNCHER_READY {"url": "http://127.0.0.1:1", "base_url": "http://127.0.0.1:1/v1", "model": "m",'
    ' "engine": "llamacpp", "engine_reason": "why", "context_length": 2048, "parallel": 3,'
    ' "api_key_required": false, "pid": 1}'
)
PYTHON = sys.executable  # this interpreter, before fake_build points sys.executable at the app folder


def script(version: str) -> bytes:
    """What the app's executable says when asked its version (the install's smoke check asks)."""
    return f"#!/bin/sh\necho 'launcher {version}'\n".encode()


def release_archive(version: str) -> bytes:
    """The tar.gz the release publishes: a folder `launcher/` with the executable and `_internal/`."""
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w:gz") as archive:
        for name, data, mode in (
            ("launcher/launcher", script(version), 0o755),
            ("launcher/_internal/base_library.zip", os.urandom(300_000), 0o644),  # incompressible: real chunks
        ):
            info = tarfile.TarInfo(name)
            info.size, info.mode = len(data), mode
            archive.addfile(info, io.BytesIO(data))
    return buffer.getvalue()


@pytest.fixture
def key() -> tuple[str, str]:
    """The release key pair: (private seed, public key)."""
    return signing.new_key()


@pytest.fixture
def server() -> Iterator[FeedServer]:
    with FeedServer() as feed_server:
        yield feed_server


@pytest.fixture
def app_folder(tmp_path: Path) -> Path:
    """The installed 0.1.0 app: a folder holding the executable `launcher`."""
    folder = tmp_path / "apps" / "launcher"
    folder.mkdir(parents=True)
    (folder / "launcher").write_bytes(script("0.1.0"))
    (folder / "launcher").chmod(0o755)
    (folder / "_internal").mkdir()
    return folder


@pytest.fixture
def started(monkeypatch: pytest.MonkeyPatch) -> list[list[str]]:
    """Every command the app would start as its new version (nothing is started)."""
    calls: list[list[str]] = []
    monkeypatch.setattr(updates, "start_new_app", calls.append)
    return calls


def publish(server: FeedServer, seed: str, monkeypatch: pytest.MonkeyPatch, app_folder: Path, public: str) -> str:
    """Publish 0.2.0 signed with `seed`, and make this process the 0.1.0 build that trusts `public`."""
    url = server.publish(
        NEW, key=seed, files=[Served("linux-x86_64", "tar.gz", RELEASE, release_archive(NEW))], notes=NOTES
    )
    fake_build(monkeypatch, app_folder, version="0.1.0", public_key=public, feed=url)
    return url


def window_for(qtbot, tmp_path: Path, settings: Settings | None = None, **kwargs) -> MainWindow:  # type: ignore[no-untyped-def]
    window = MainWindow(
        settings or Settings(),
        machine=load_recorded("cpu-avx2-laptop-16gb"),
        home=tmp_path / "home",
        check_updates=True,
        **kwargs,
    )
    qtbot.addWidget(window)
    return window


def show_and_check(qtbot, window: MainWindow) -> object:  # type: ignore[no-untyped-def]
    """Show the window; return what the start check found."""
    with qtbot.waitSignal(window.updates.check_finished, timeout=30_000) as finished:
        window.show()
    return finished.args[0]


def serve_fake(qtbot, window: MainWindow, *, port: int = 0, parallel: int = 1, context: int = 0) -> None:  # type: ignore[no-untyped-def]
    """Start the server from the Server page's form, with a child that speaks the ready line in place of
    `launcher serve` (the model is not what is tested)."""
    code = f"import sys\nprint({READY!r}, flush=True)\nsys.stdin.readline()\n"
    window.server._command = lambda _config: (PYTHON, ["-c", code])
    form = window.server_panel
    form.port.setValue(port)
    form.parallel.setValue(parallel)
    form.context.setValue(context)
    with qtbot.waitSignal(window.server.ready, timeout=20_000):
        form.start_button.click()


def file_requests(server: FeedServer) -> list[str]:
    return [request.path for request in server.requests if request.path != FEED_FILE]


def test_the_note_shows_the_new_release_after_the_start_check_and_later_hides_it(  # type: ignore[no-untyped-def]
    qtbot, tmp_path, server, key, app_folder, monkeypatch
) -> None:
    seed, public = key
    publish(server, seed, monkeypatch, app_folder, public)
    window = window_for(qtbot, tmp_path, save_settings=False)
    result = show_and_check(qtbot, window)
    note = window.update_note
    assert isinstance(result, updates.CheckResult) and result.checked and result.offer is not None
    assert note.isVisible()
    assert note.title.text() == "Launcher 0.2.0 is available"
    size = format_bytes(len(server.files[RELEASE]))
    assert note.detail.text() == f"Released 2026-12-02 · {size} download · you have 0.1.0"
    assert note.notes.text() == "Faster model loading.\nA note when an update exists.\nFixes.\nMore fixes."
    assert note.more_button.isVisible() and not note.full_notes.isVisible()
    note.more_button.click()
    assert note.full_notes.isVisible() and "Even more fixes." in note.full_notes.toPlainText()
    assert note.install_button.isVisible() and note.install_button.text() == "Download and install"
    assert "is available (you have 0.1.0)" in window.settings_page.update_status.text()
    # One GET of the feed, nothing else: no byte of the release before the user asks.
    assert [(r.method, r.path) for r in server.requests] == [("GET", FEED_FILE)]
    assert server.requests[0].headers["User-Agent"] == "launcher/0.1.0"

    note.later_button.click()
    assert not note.isVisible()
    assert file_requests(server) == []
    assert (app_folder / "launcher").read_bytes() == script("0.1.0")


def test_download_and_install_replaces_the_app_and_restarts_it_serving_again(  # type: ignore[no-untyped-def]
    qtbot, tmp_path, server, key, app_folder, monkeypatch, started
) -> None:
    seed, public = key
    publish(server, seed, monkeypatch, app_folder, public)
    server.throttle(RELEASE, chunk=16 * 1024, delay_s=0.02)  # several progress events
    window = window_for(qtbot, tmp_path)  # settings are saved: the new version reads them
    window.show_page("agents")
    show_and_check(qtbot, window)
    serve_fake(qtbot, window, port=8555, parallel=3, context=4096)

    window.update_note.install_button.click()
    worker = window.updates.download
    assert worker is not None
    events: list[object] = []
    worker.progress.connect(events.append)
    dialog = window.updates.progress_dialog
    assert dialog is not None and dialog.isVisible()
    qtbot.waitUntil(lambda: bool(started), timeout=60_000)

    size = len(server.files[RELEASE])
    assert any(0 < e.bytes_done < size for e in events)  # type: ignore[attr-defined]
    assert [str(app_folder / "launcher"), "gui", "--page", "agents", "--serve"] == started[0]
    assert (app_folder / "launcher").read_bytes() == script(NEW)  # installed in place
    assert window.server.state == "stopped"  # stopped before the install, served again by the new version
    saved = settings_store.load()
    assert (saved.serve.port, saved.serve.parallel, saved.serve.context) == (8555, 3, 4096)
    assert not window.isVisible()  # this version quit
    assert list(download.updates_dir().iterdir()) == []  # installed: the download left the cache


def test_a_failure_after_the_new_version_is_in_place_is_not_called_a_failed_install(  # type: ignore[no-untyped-def]
    qtbot, tmp_path, server, key, app_folder, monkeypatch, started
) -> None:
    """The packs step (or restarting another server) fails once the folders were swapped: the new
    version IS installed, so it starts; the window does not say "not installed ... keeps running"."""
    seed, public = key
    publish(server, seed, monkeypatch, app_folder, public)

    def packs_fail(_packs: object) -> list[str]:
        raise RuntimeError("the packs folder vanished")

    monkeypatch.setattr(install, "install_packs", packs_fail)
    window = window_for(qtbot, tmp_path, save_settings=False)
    show_and_check(qtbot, window)
    window.update_note.install_button.click()
    qtbot.waitUntil(lambda: bool(started), timeout=60_000)
    assert started[0] == [str(app_folder / "launcher"), "gui", "--page", "models"]
    assert (app_folder / "launcher").read_bytes() == script(NEW)
    assert window.updates.message is None and not window.isVisible()


def test_when_the_new_version_cannot_be_started_the_window_says_so_and_stays(  # type: ignore[no-untyped-def]
    qtbot, tmp_path, server, key, app_folder, monkeypatch
) -> None:
    seed, public = key
    publish(server, seed, monkeypatch, app_folder, public)

    def cannot_start(_argv: list[str]) -> None:
        raise ValueError("embedded null byte")  # not only an OSError: whatever Popen raises

    monkeypatch.setattr(updates, "start_new_app", cannot_start)
    window = window_for(qtbot, tmp_path, save_settings=False)
    show_and_check(qtbot, window)
    window.update_note.install_button.click()
    qtbot.waitUntil(lambda: window.updates.message is not None, timeout=60_000)
    message = window.updates.message
    assert message is not None and message.windowTitle() == "The new version did not start"
    assert "The new version is installed, but it could not be started (ValueError: embedded null byte)" in (
        message.text()
    )
    assert "Quit this window and start Launcher again." in message.text()
    assert window.isVisible()  # not quit: the user reads why and what to do
    assert (app_folder / "launcher").read_bytes() == script(NEW)
    message.close()


def test_a_bad_signature_is_refused_with_a_clear_message_and_nothing_is_installed(  # type: ignore[no-untyped-def]
    qtbot, tmp_path, server, key, app_folder, monkeypatch, started
) -> None:
    _seed, public = key
    other_seed, _other_public = signing.new_key()  # a feed signed by someone else
    publish(server, other_seed, monkeypatch, app_folder, public)
    window = window_for(qtbot, tmp_path, save_settings=False)
    show_and_check(qtbot, window)
    serve_fake(qtbot, window)

    window.update_note.install_button.click()
    qtbot.waitUntil(lambda: window.updates.message is not None and window.updates.download is None, timeout=30_000)
    message = window.updates.message
    assert message is not None and message.icon() == QMessageBox.Icon.Warning
    assert message.windowTitle() == "The update was not downloaded"
    assert f"The signature of {RELEASE} does not verify" in message.text()
    assert "Nothing was installed; launcher 0.1.0 keeps running." in message.text()
    assert file_requests(server) == []  # refused before a byte was fetched
    assert (app_folder / "launcher").read_bytes() == script("0.1.0")
    assert started == []
    assert window.isVisible() and window.server.state == "ready"  # the old version keeps serving
    message.close()
    window.shutdown()


def test_corrupted_bytes_are_refused_and_nothing_is_installed(  # type: ignore[no-untyped-def]
    qtbot, tmp_path, server, key, app_folder, monkeypatch, started
) -> None:
    seed, public = key
    publish(server, seed, monkeypatch, app_folder, public)
    signed = server.files[RELEASE]
    middle = len(signed) // 2
    server.serve_instead(RELEASE, signed[:middle] + bytes([signed[middle] ^ 1]) + signed[middle + 1 :])  # one bit off
    window = window_for(qtbot, tmp_path, save_settings=False)
    show_and_check(qtbot, window)
    window.update_note.install_button.click()
    qtbot.waitUntil(lambda: window.updates.message is not None and window.updates.download is None, timeout=30_000)
    message = window.updates.message
    assert message is not None and f"{RELEASE} was corrupted in transfer" in message.text()
    assert (app_folder / "launcher").read_bytes() == script("0.1.0") and started == []
    assert window.updates.progress_dialog is None
    message.close()


def test_an_install_that_fails_leaves_the_old_version_serving(  # type: ignore[no-untyped-def]
    qtbot, tmp_path, server, key, app_folder, monkeypatch, started
) -> None:
    seed, public = key
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w:gz") as archive:  # its program says another version
        info = tarfile.TarInfo("launcher/launcher")
        data = script("9.9.9")
        info.size, info.mode = len(data), 0o755
        archive.addfile(info, io.BytesIO(data))
    broken = buffer.getvalue()
    url = server.publish(NEW, key=seed, files=[Served("linux-x86_64", "tar.gz", RELEASE, broken)])
    fake_build(monkeypatch, app_folder, version="0.1.0", public_key=public, feed=url)
    window = window_for(qtbot, tmp_path, save_settings=False)
    show_and_check(qtbot, window)
    serve_fake(qtbot, window)

    with qtbot.waitSignal(window.server.ready, timeout=60_000):  # stopped for the install, then serving again
        window.update_note.install_button.click()
    qtbot.waitUntil(lambda: window.updates.message is not None, timeout=30_000)
    message = window.updates.message
    assert message is not None and message.windowTitle() == "The update was not installed"
    assert "launcher 0.2.0 is not installed and this version stays" in message.text()
    assert "Launcher 0.1.0 keeps running as before." in message.text()
    assert (app_folder / "launcher").read_bytes() == script("0.1.0") and started == []
    assert window.isVisible() and window.server.state == "ready"
    message.close()
    window.shutdown()


def test_cancel_pauses_the_download(qtbot, tmp_path, server, key, app_folder, monkeypatch, started) -> None:  # type: ignore[no-untyped-def]
    seed, public = key
    publish(server, seed, monkeypatch, app_folder, public)
    server.throttle(RELEASE, chunk=4 * 1024, delay_s=0.05)
    window = window_for(qtbot, tmp_path, save_settings=False)
    show_and_check(qtbot, window)
    window.update_note.install_button.click()
    worker = window.updates.download
    assert worker is not None
    with qtbot.waitSignal(worker.progress, timeout=30_000):
        pass
    dialog = window.updates.progress_dialog
    assert dialog is not None
    cancel = dialog.findChild(QPushButton)  # its Cancel button
    assert cancel is not None and cancel.text() == "Cancel"
    cancel.click()
    qtbot.waitUntil(lambda: window.updates.download is None, timeout=30_000)
    assert window.update_note.status.text().startswith("Download paused")
    assert window.updates.progress_dialog is None and window.updates.message is None
    assert (app_folder / "launcher").read_bytes() == script("0.1.0") and started == []


@pytest.mark.parametrize("why", ["settings", "offline"])
def test_no_check_when_settings_say_no_or_offline(qtbot, tmp_path, server, key, app_folder, monkeypatch, why) -> None:  # type: ignore[no-untyped-def]
    seed, public = key
    publish(server, seed, monkeypatch, app_folder, public)
    if why == "offline":
        monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    window = window_for(qtbot, tmp_path, Settings(check_for_updates=why != "settings"), save_settings=False)
    result = show_and_check(qtbot, window)
    assert isinstance(result, updates.CheckResult) and not result.checked
    assert server.requests == []
    assert not window.update_note.isVisible()


def test_a_failed_check_is_shown_in_settings_not_as_an_error(  # type: ignore[no-untyped-def]
    qtbot, tmp_path, server, key, app_folder, monkeypatch
) -> None:
    seed, public = key
    publish(server, seed, monkeypatch, app_folder, public)
    server.fail(FEED_FILE, 503)
    window = window_for(qtbot, tmp_path, save_settings=False)
    result = show_and_check(qtbot, window)
    assert isinstance(result, str) and "HTTP 503" in result
    status = window.settings_page.update_status.text()
    assert status.startswith("Last check ") and ": failed (The update feed at " in status and "HTTP 503" in status
    assert window.updates.message is None and not window.update_note.isVisible()

    server.fail(FEED_FILE, None)  # "Check now" asks again, whatever the schedule
    page = window.settings_page
    with qtbot.waitSignal(window.updates.check_finished, timeout=30_000):
        page.check_now_button.click()
        assert page.update_status.text() == "Checking…" and not page.check_now_button.isEnabled()
    assert "launcher 0.2.0 is available (you have 0.1.0)" in page.update_status.text()
    assert page.check_now_button.isEnabled() and window.update_note.isVisible()


def test_check_now_while_a_scheduled_look_runs_that_is_not_due_still_gets_an_answer(  # type: ignore[no-untyped-def]
    qtbot, tmp_path, monkeypatch
) -> None:
    """The start look is not due (the check is off); "Check now" pressed meanwhile must not be left at
    "Checking…" with its button disabled: the feed is asked once the look ends."""
    monkeypatch.setenv("LAUNCHER_UPDATE_FEED", "http://127.0.0.1:9/update-feed.json")  # nothing listens there
    window = window_for(qtbot, tmp_path, Settings(check_for_updates=False), save_settings=False)
    page = window.settings_page
    window.updates.start()  # the start look, running on a worker thread
    assert window.updates.checking
    page.check_now_button.click()
    assert page.update_status.text() == "Checking…" and not page.check_now_button.isEnabled()
    qtbot.waitUntil(page.check_now_button.isEnabled, timeout=30_000)
    assert ": failed (Could not reach the update feed at http://127.0.0.1:9/update-feed.json" in (
        page.update_status.text()
    )
    assert not window.updates.checking
    window.shutdown()


def test_a_restart_the_same_day_shows_the_known_release_without_asking_unless_later(  # type: ignore[no-untyped-def]
    qtbot, tmp_path, server, key, app_folder, monkeypatch
) -> None:
    seed, public = key
    publish(server, seed, monkeypatch, app_folder, public)
    first = window_for(qtbot, tmp_path, save_settings=False)
    show_and_check(qtbot, first)
    assert first.update_note.isVisible() and len(server.requests) == 1
    first.shutdown()

    again = window_for(qtbot, tmp_path, save_settings=False)  # started again, within the day
    result = show_and_check(qtbot, again)
    assert isinstance(result, updates.CheckResult) and not result.checked  # not due: nothing sent
    assert len(server.requests) == 1
    assert again.update_note.isVisible() and again.update_note.title.text() == "Launcher 0.2.0 is available"
    assert "launcher 0.2.0 is available (you have 0.1.0)" in again.settings_page.update_status.text()
    again.update_note.later_button.click()
    workers.pool().waitForDone(10_000)  # "Later" is remembered off the UI thread
    again.shutdown()

    after_later = window_for(qtbot, tmp_path, save_settings=False)
    show_and_check(qtbot, after_later)
    assert not after_later.update_note.isVisible() and len(server.requests) == 1
    after_later.shutdown()


def test_the_settings_checkbox_turns_the_check_off(qtbot, tmp_path) -> None:  # type: ignore[no-untyped-def]
    settings = Settings()
    window = window_for(qtbot, tmp_path, settings, save_settings=False)
    box = window.settings_page.check_updates
    assert box.isChecked() and box.text() == "Check for updates at start and once a day"
    box.click()
    assert settings.check_for_updates is False
    qtbot.waitUntil(lambda: window.settings_page.update_status.text() != "", timeout=10_000)
    # From a source checkout the build names no feed: the page says how this copy is updated instead.
    assert window.settings_page.update_status.text().startswith("This build has no update feed (")


def test_serve_starts_the_saved_server_once_the_models_are_listed(qtbot, tmp_path) -> None:  # type: ignore[no-untyped-def]
    """`launcher gui --serve`, as the new version is started after an update."""
    settings = Settings(serve=ServeConfig(port=8555, parallel=3))
    window = MainWindow(
        settings, machine=load_recorded("cpu-avx2-laptop-16gb"), home=tmp_path, save_settings=False, serve_on_start=True
    )
    qtbot.addWidget(window)
    code = f"import sys\nprint({READY!r}, flush=True)\nsys.stdin.readline()\n"
    window.server._command = lambda _config: (PYTHON, ["-c", code])
    with qtbot.waitSignal(window.server.ready, timeout=30_000):
        pass  # the model list loads, then the server starts with the starter (no model was served before)
    config = window.server.config
    assert config is not None and (config.port, config.parallel) == (8555, 3)
    window.shutdown()


def test_serve_says_so_when_the_last_model_is_gone(qtbot, tmp_path) -> None:  # type: ignore[no-untyped-def]
    settings = Settings(last_model="local:deleted-model")
    window = MainWindow(
        settings, machine=load_recorded("cpu-avx2-laptop-16gb"), home=tmp_path, save_settings=False, serve_on_start=True
    )
    qtbot.addWidget(window)
    with qtbot.waitSignal(window.models_page.rows_changed, timeout=30_000):
        pass
    assert window.status_label.text() == "The server was not started: deleted-model is not in the library any more."
    assert window.server.state == "stopped"


def offer_for(installation: Installation, *, with_file: bool) -> UpdateOffer:
    feed = parse_feed(
        '{"feed": 1, "version": "0.2.0", "date": "2026-12-02", "notes": "Short notes.", "files": []}', "test"
    )
    file = None
    if with_file:
        from launcher.updates.feed import ReleaseFile

        file = ReleaseFile(platform="linux-x86_64", kind="tar.gz", name=RELEASE, url="x", size=5 << 20, sha256="0" * 64)
    return UpdateOffer(feed=feed, current="0.1.0", installation=installation, file=file)


@pytest.mark.parametrize(
    ("installation", "says"),
    [
        (
            Installation("source", "linux-x86_64", None, False, "this is a source checkout: update it with git pull"),
            "This is a source checkout: update it with git pull.",
        ),
        (
            Installation("pip", "linux-x86_64", None, False, "this was installed with pip: pip install -U launcher"),
            "This was installed with pip: pip install -U launcher.",
        ),
        (
            Installation(
                "deb", "linux-x86_64", Path("/opt/launcher"), False, "install it with sudo apt install ./launcher.deb"
            ),
            "Install it with sudo apt install ./launcher.deb.",
        ),
        (
            Installation(
                "setup", "windows-x64", Path("C:/Program Files/Launcher"), False, "run the new installer yourself"
            ),
            "Run the new installer yourself.",
        ),
    ],
)
def test_installations_the_app_does_not_replace_say_how_instead(qtbot, installation, says) -> None:  # type: ignore[no-untyped-def]
    note = UpdateNote()
    qtbot.addWidget(note)
    note.show_offer(offer_for(installation, with_file=False))
    assert note.isVisibleTo(note.parentWidget() or note) or not note.isHidden()
    assert note.install_button.isHidden()
    assert note.how.text() == says
    assert note.notes.text() == "Short notes." and note.more_button.isHidden()
    assert note.detail.text() == "Released 2026-12-02 · you have 0.1.0"


def test_a_deb_note_names_the_releases_own_package(qtbot) -> None:  # type: ignore[no-untyped-def]
    note = UpdateNote()
    qtbot.addWidget(note)
    deb = Installation("deb", "linux-arm64", Path("/opt/launcher"), False, deb_how())
    offer = offer_for(deb, with_file=True)
    assert offer.file is not None
    package = offer.file.model_copy(update={"kind": "deb", "name": "launcher_0.2.0_arm64.deb"})
    note.show_offer(dataclasses.replace(offer, file=package))
    assert note.install_button.isHidden()
    assert note.how.text().endswith("and install it with sudo apt install ./launcher_0.2.0_arm64.deb.")
    assert "<version>" not in note.how.text() and "amd64" not in note.how.text()


@pytest.mark.parametrize(
    ("url", "shown"),
    [
        ("https://github.com/o/r/releases/tag/v0.2.0", True),
        ("file:///etc/passwd", False),
        ("javascript:alert(1)", False),
        ("http://example.org/notes", False),
        ("smb://server/share/setup.exe", False),
    ],
)
def test_only_an_https_release_notes_link_is_shown(qtbot, url, shown) -> None:  # type: ignore[no-untyped-def]
    note = UpdateNote()
    qtbot.addWidget(note)
    tar = Installation("tar.gz", "linux-x86_64", Path("/apps/launcher"), True, "the update replaces the app folder")
    offer = offer_for(tar, with_file=True)
    # As if the feed's parser had let it through (it drops any but https): the note checks again.
    unchecked = offer.feed.model_copy(update={"notes_url": url})
    note.show_offer(dataclasses.replace(offer, feed=unchecked))
    assert note.notes_link.isVisibleTo(note) is shown
    assert (f'href="{url}"' in note.notes_link.text()) is shown


def test_the_note_gives_the_download_size(qtbot) -> None:  # type: ignore[no-untyped-def]
    note = UpdateNote()
    qtbot.addWidget(note)
    tar = Installation("tar.gz", "linux-x86_64", Path("/apps/launcher"), True, "the update replaces the app folder")
    note.show_offer(offer_for(tar, with_file=True))
    assert not note.install_button.isHidden() and note.how.isHidden()
    assert note.detail.text() == "Released 2026-12-02 · 5.0 MiB download · you have 0.1.0"


def test_the_new_app_command_keeps_the_page_and_the_server() -> None:
    assert updates.new_app_command(["/a/launcher"], page="chat", serve=True) == [
        "/a/launcher",
        "gui",
        "--page",
        "chat",
        "--serve",
    ]
    assert updates.new_app_command(["/a/launcher"], page=None, serve=False) == ["/a/launcher", "gui"]
