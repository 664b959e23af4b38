"""App updates in the window: the note that a newer release exists, the download with its progress, the
install, and the restart into the new version.

`launcher.updates` does the work: `check` reads the release feed (one GET, nothing about the user),
`download` fetches and verifies the release file (size, sha256 and the release key's signature;
resumable), `install` replaces this installation and keeps the old one until the new one starts.
This module decides when to ask and shows what happened; every network call and install step runs
off the UI thread, and nothing is downloaded before the user presses "Download and install".

When the app checks: after the window shows (`UpdateController.start`) and then every hour it asks
`check.due(settings)`, which says yes once a day unless the check is off in Settings, the user chose
offline (HF_HUB_OFFLINE), or the build knows no feed (a failed check is asked again at the next
hourly look, three times, then daily). When it is not due, the release the last check found is shown
again without asking the feed (`check.remembered_offer`), unless the user pressed "Later" for it
since. A failed check is not the user's problem: it is logged, and the Settings page shows it as
"failed (reason)", never as an error box. "Check now" always gets an answer: pressed while a
scheduled look is running, it asks the feed once that look ends, if the look did not.

Installing: the app's own server is stopped first; a failure before the new version is in place
leaves the running version as it was (the server started again). Once it is in place the install
counts as done, whatever follows (a GPU pack or another server that does not come back is a line of
the report: `launcher.updates.apply`), and the downloaded file leaves the cache. The new executable
is started on the same page and, when a server was running, with `--serve` so it serves the same
model and settings again; then this app quits. If the new version cannot be started, the window
says so and stays. A .deb install, a source checkout and a pip install are not replaced by the app:
the note says how to update them instead of offering a download.
"""

from __future__ import annotations

import dataclasses
import html
import logging
import subprocess
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING

from PySide6.QtCore import QObject, Qt, QThread, QTimer, Signal
from PySide6.QtWidgets import (
    QFrame,
    QHBoxLayout,
    QLabel,
    QMessageBox,
    QPlainTextEdit,
    QProgressDialog,
    QPushButton,
    QVBoxLayout,
    QWidget,
)

from launcher.core.child_process import own_process_group
from launcher.core.config import ServeConfig
from launcher.core.errors import DownloadCancelled, UpdateError
from launcher.core.settings import Settings
from launcher.core.units import format_bytes
from launcher.ui import theme, workers
from launcher.ui.download_progress import progress_text
from launcher.ui.server_process import ServerProcess
from launcher.updates import current

if TYPE_CHECKING:  # the check, download and install (HTTP client, catalog, engines) load when first used
    from launcher.catalog.progress import ProgressEvent
    from launcher.updates.check import UpdateOffer
    from launcher.updates.download import Downloaded
    from launcher.updates.install import InstallResult

log = logging.getLogger(__name__)

DUE_POLL_MS = 3600 * 1000
"""How often the open app asks whether the daily check is due."""
PREVIEW_LINES = 4
"""Lines of the release notes the note shows before "What's new"."""
FULL_NOTES_LINES = 12
"""Lines "What's new" shows before the notes scroll."""

NOTE_STYLE = f"""
QFrame#UpdateNote {{ background: palette(base); border: 1px solid palette(mid);
                     border-left: 4px solid {theme.ACCENT.name()}; border-radius: 8px; }}
"""


@dataclass(frozen=True)
class CheckResult:
    """What one check found: `checked` False when it was not due (nothing was sent; `offer` is then
    the one the last check found, if it is still to be shown). `status` is the Settings page's line."""

    checked: bool
    offer: UpdateOffer | None = None
    at: float = 0.0
    status: str = ""


def scheduled_check(settings: Settings) -> CheckResult:
    """The daily check (worker thread): reads the feed only when `check.due(settings)`, else says what
    the last check found; a failure is counted (a feed that keeps failing is then asked daily)."""
    from launcher.updates import check

    if not check.due(settings):
        result = CheckResult(checked=False, offer=check.remembered_offer(settings))
        return dataclasses.replace(result, status=status_text(result))
    try:
        return _read_feed()
    except Exception:
        check.record_failure()
        raise


def requested_check() -> CheckResult:
    """ "Check now" (worker thread): reads the feed whatever the schedule, but never while offline."""
    from launcher.catalog.hub_client import is_offline

    if is_offline():
        raise UpdateError("offline mode is on (HF_HUB_OFFLINE), so the feed was not read")
    return _read_feed()


def _read_feed() -> CheckResult:
    from launcher.updates import check

    offer = check.check()
    check.record_check(offer=offer)
    result = CheckResult(checked=True, offer=offer, at=time.time())
    return dataclasses.replace(result, status=status_text(result))


def remember_later(version: str) -> None:
    """The user pressed "Later" on `version`'s note (worker thread): not shown again until a check reads the feed."""
    from launcher.updates import check

    check.record_later(version)


def new_app_command(restart_argv: list[str], *, page: str | None, serve: bool) -> list[str]:
    """The new version's command line: its executable, the page shown now, and `--serve` when a server ran."""
    argv = [*restart_argv, "gui"]
    if page:
        argv += ["--page", page]
    if serve:
        argv.append("--serve")
    return argv


def install_update(offer: UpdateOffer, downloaded: Downloaded) -> InstallResult:
    """Install the downloaded release (worker thread; the app's own server is already stopped).

    Servers that other commands started from this installation (`launcher serve` in a terminal) run
    the old files too: they are stopped first and started again from the new version, with their own
    command lines; after a failure, from the old one. The GPU packs follow the app, so the old app
    never loads a pack built for the new engine. Raises only when the new version is NOT installed
    (`launcher.updates.apply`)."""
    # Everything used after the swap is imported before it (apply imports what it needs): from then on
    # the old app's executable path holds the new version, and a frozen app imports from that path.
    from launcher.updates import servers
    from launcher.updates.apply import apply_update

    stopped = servers.stop(servers.servers_of(offer.installation))
    return apply_update(offer.installation, downloaded, offer.version, stopped)


def start_new_app(argv: list[str]) -> None:
    """Start the new version, not tied to this process: it must outlive the app that quits now."""
    # Imported by the install already (nothing may be imported after the swap): the environment an
    # independent new version needs (the system's library path, not this bundle's; PyInstaller told
    # it is a program of its own, not a child reusing this one's bundle paths).
    from launcher.updates.install import new_version_environment

    process = subprocess.Popen(
        argv,
        env=new_version_environment(),
        stdin=subprocess.DEVNULL,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        close_fds=True,
        **own_process_group(),  # a session of its own: the old app's quit does not reach it
    )
    # Reaped by a thread while this app still runs, so it never lingers as a zombie child.
    threading.Thread(target=process.wait, name="new app reaper", daemon=True).start()


def status_text(result: CheckResult | None = None, *, failure: str | None = None) -> str:
    """The Settings page's line about the last check (without a result: what is known before any)."""
    from launcher.updates import check

    if failure is not None:
        return f"Last check {_when(time.time())}: failed ({failure.rstrip('.')})."
    if result is None or not result.checked:
        if not current.feed_url():
            return f"This build has no update feed ({current.detect_installation().how})."
        last = check.last_check()
        if last is None:
            return "Not checked yet."
        if result is not None and result.offer is not None:
            offer = result.offer
            return f"Last check {_when(last)}: launcher {offer.version} is available (you have {offer.current})."
        return f"Last check: {_when(last)}."
    if result.offer is None:
        return f"Last check {_when(result.at)}: up to date (launcher {current.current_version()})."
    offer = result.offer
    return f"Last check {_when(result.at)}: launcher {offer.version} is available (you have {offer.current})."


def _when(timestamp: float) -> str:
    return time.strftime("%Y-%m-%d %H:%M", time.localtime(timestamp))


def preview(notes: str, lines: int = PREVIEW_LINES) -> tuple[str, bool]:
    """The first `lines` non-empty lines of the notes, and whether there is more."""
    kept = [line.rstrip() for line in notes.strip().splitlines() if line.strip()]
    return "\n".join(kept[:lines]), len(kept) > lines


class UpdateNote(QFrame):
    """The banner at the top of the window: version, date, size and notes, "Download and install", "Later"."""

    install_requested = Signal()
    later_requested = Signal()

    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.setObjectName("UpdateNote")
        self.setStyleSheet(NOTE_STYLE)
        self.setAccessibleName("Update available")
        outer = QVBoxLayout(self)
        outer.setContentsMargins(14, 10, 14, 10)
        outer.setSpacing(4)
        self.title = QLabel()
        self.title.setObjectName("CardTitle")
        self.detail = QLabel()
        self.detail.setObjectName("Muted")
        self.notes = QLabel()
        self.notes.setTextFormat(Qt.TextFormat.PlainText)  # release notes are text, never markup to render
        self.notes.setWordWrap(True)
        self.notes.setTextInteractionFlags(Qt.TextInteractionFlag.TextSelectableByMouse)
        self.full_notes = QPlainTextEdit()
        self.full_notes.setReadOnly(True)
        self.full_notes.setVisible(False)
        self.notes_link = QLabel()
        self.notes_link.setOpenExternalLinks(True)
        self.notes_link.setVisible(False)
        self.how = QLabel()
        self.how.setObjectName("Muted")
        self.how.setWordWrap(True)
        self.how.setTextInteractionFlags(Qt.TextInteractionFlag.TextSelectableByMouse)
        self.status = QLabel()
        self.status.setObjectName("Muted")
        self.status.setWordWrap(True)
        self.more_button = QPushButton("What's new")
        self.more_button.setCheckable(True)
        self.more_button.toggled.connect(self._show_all_notes)
        self.install_button = QPushButton("Download and install")
        self.install_button.setObjectName("Primary")
        self.install_button.clicked.connect(self.install_requested)
        self.later_button = QPushButton("Later")
        self.later_button.clicked.connect(self.later_requested)
        buttons = QHBoxLayout()
        buttons.addWidget(self.install_button)
        buttons.addWidget(self.later_button)
        buttons.addWidget(self.more_button)
        buttons.addStretch(1)
        for widget in (self.title, self.detail, self.notes, self.full_notes, self.notes_link, self.how, self.status):
            outer.addWidget(widget)
        outer.addLayout(buttons)
        self.setVisible(False)

    def show_offer(self, offer: UpdateOffer) -> None:
        """Fill the note from `offer` and show it."""
        feed, installation = offer.feed, offer.installation
        self.title.setText(f"Launcher {feed.version} is available")
        size = f" · {format_bytes(offer.size)} download" if offer.file is not None else ""
        self.detail.setText(f"Released {feed.date.isoformat()}{size} · you have {offer.current}")
        shown, more = preview(feed.notes)
        self.notes.setText(shown)
        self.notes.setVisible(bool(shown))
        self.full_notes.setPlainText(feed.notes.strip())
        # As tall as the notes, up to FULL_NOTES_LINES; longer notes scroll.
        lines = min(len(feed.notes.strip().splitlines()), FULL_NOTES_LINES) + 1
        self.full_notes.setFixedHeight(self.fontMetrics().lineSpacing() * lines + 2 * self.full_notes.frameWidth() + 8)
        self.more_button.setChecked(False)
        self.more_button.setVisible(more)
        # A link the user clicks opens in their browser: only an https:// page (the feed's parser drops
        # any other already; this is the last line before the desktop hands a URL to some program).
        from launcher.updates.feed import is_https

        link = feed.notes_url if feed.notes_url and is_https(feed.notes_url) else None
        if link:
            self.notes_link.setText(f'<a href="{html.escape(link.strip(), quote=True)}">Release notes</a>')
        else:
            self.notes_link.setText("")
        self.notes_link.setVisible(link is not None)
        can_install = installation.can_update and offer.file is not None
        self.install_button.setVisible(can_install)
        if can_install:
            self.how.setText("")
        elif installation.can_update:
            self.how.setText(
                f"This release has no {installation.kind} file for {installation.platform}; "
                "download it from the project's releases page."
            )
        else:
            how = offer.how  # for a .deb: with the release's own package name
            self.how.setText(how[:1].upper() + how[1:] + ".")
        self.how.setVisible(bool(self.how.text()))
        self.status.setText("")
        self.status.setVisible(False)
        self.setVisible(True)

    def set_status(self, text: str) -> None:
        """A line under the notes (a paused download)."""
        self.status.setText(text)
        self.status.setVisible(bool(text))

    def _show_all_notes(self, on: bool) -> None:
        self.full_notes.setVisible(on)
        self.notes.setVisible(not on and bool(self.notes.text()))


class UpdateDownload(QThread):
    """`download.download(offer)` on its own thread: progress, then succeeded / failed / cancelled."""

    progress = Signal(object)  # ProgressEvent
    succeeded = Signal(object)  # download.Downloaded
    failed = Signal(str)
    cancelled = Signal(str)

    def __init__(self, offer: UpdateOffer, parent: QObject | None = None) -> None:
        super().__init__(parent)
        self.offer = offer
        self.cancel = threading.Event()
        workers.track_thread(self)

    def run(self) -> None:
        """Fetch and verify (worker thread)."""
        from launcher.updates import download

        try:
            downloaded = download.download(self.offer, progress=self.progress.emit, cancel=self.cancel)
        except DownloadCancelled as err:
            self.cancelled.emit(str(err))
        except Exception as err:  # every failure reaches the user, never lost in a thread
            self.failed.emit(workers.error_text(err))
        else:
            self.succeeded.emit(downloaded)


class UpdateController(QObject):
    """The check schedule, the note, and the download → install → restart flow.

    The window supplies what only it knows: the page shown (`current_page`), how to save its state
    and stop everything before the new version starts (`prepare_restart`), and how to quit (`quit_app`).
    """

    status_changed = Signal(str)  # the Settings page's "last check" line
    offer_changed = Signal(object)  # UpdateOffer | None
    check_finished = Signal(object)  # CheckResult, or the failure text (str)

    def __init__(
        self,
        settings: Settings,
        server: ServerProcess,
        note: UpdateNote,
        *,
        window: QWidget,
        current_page: Callable[[], str | None],
        prepare_restart: Callable[[], None],
        quit_app: Callable[[], None],
    ) -> None:
        super().__init__(window)
        self.settings = settings
        self.server = server
        self.note = note
        self.window = window
        self._current_page = current_page
        self._prepare_restart = prepare_restart
        self._quit_app = quit_app
        self.offer: UpdateOffer | None = None
        self.checking = False
        self._check_requested = False  # "Check now" pressed while a scheduled look was running
        self.download: UpdateDownload | None = None
        self.installing = False
        self.progress_dialog: QProgressDialog | None = None
        self.message: QMessageBox | None = None
        self._resume: ServeConfig | None = None
        self.timer = QTimer(self)
        self.timer.setInterval(DUE_POLL_MS)
        self.timer.timeout.connect(self.check_if_due)
        note.install_requested.connect(self.download_and_install)
        note.later_requested.connect(self.later)

    # -- checking ------------------------------------------------------------------------------
    def start(self) -> None:
        """Begin the schedule: a check now (if due) off the UI thread, then the hourly look at `due`."""
        self.timer.start()
        self.check_if_due()

    def check_if_due(self) -> None:
        """Read the feed when the daily check is due (the decision too is made off the UI thread)."""
        if self._busy():
            return
        self.checking = True
        workers.run_in_background(scheduled_check, self.settings, on_done=self._checked, on_failed=self._check_failed)

    def check_now(self) -> None:
        """The Settings page's "Check now": it always ends with a status line (the page waits for one)."""
        if self.download is not None or self.installing:
            self.status_changed.emit("An update is downloading or installing; check again when it is done.")
            return
        if self.checking:
            # A scheduled look is running: it answers if it reads the feed, else the feed is asked
            # once it ends (a look that was not due sends nothing and would leave the page waiting).
            self._check_requested = True
            return
        self._start_requested_check()

    def _start_requested_check(self) -> None:
        self.checking = True
        workers.run_in_background(requested_check, on_done=self._checked, on_failed=self._check_failed)

    def _busy(self) -> bool:
        return self.checking or self.download is not None or self.installing

    def _checked(self, result: CheckResult) -> None:
        self.checking = False
        # A look that was not due brings back the release the last check found (the app was started
        # again): shown once, not again at every hourly look (the user may have read or hidden it).
        remembered = result.offer is not None and (self.offer is None or self.offer.version != result.offer.version)
        if result.checked or remembered:
            self._show(result.offer)
        if self._check_requested and not result.checked:
            self._check_requested = False
            self.check_finished.emit(result)
            self._start_requested_check()
            return
        self._check_requested = False
        self.status_changed.emit(result.status or status_text(result))
        self.check_finished.emit(result)

    def _show(self, offer: UpdateOffer | None) -> None:
        self.offer = offer
        if offer is None:
            self.note.setVisible(False)
        elif self.download is None and not self.installing:
            log.info("update available: %s", offer.summary())
            self.note.show_offer(offer)
        self.offer_changed.emit(offer)

    def _check_failed(self, message: str) -> None:
        self.checking = False
        self._check_requested = False  # the feed was asked: this is the answer
        log.warning("update check failed: %s", message)  # not an error box: a failed check is not the user's problem
        self.status_changed.emit(status_text(failure=message))
        self.check_finished.emit(message)

    def later(self) -> None:
        """Hide the note until a check reads the feed again (a restart meanwhile does not bring it back)."""
        self.note.setVisible(False)
        if self.offer is not None:
            workers.run_in_background(
                remember_later,
                self.offer.version,
                on_failed=lambda text: log.warning("could not remember Later: %s", text),
            )

    # -- download ------------------------------------------------------------------------------
    def download_and_install(self) -> None:
        """Download the offered release with a progress dialog; install it once it is verified."""
        offer = self.offer
        if offer is None or offer.file is None or self._busy() or not offer.installation.can_update:
            return
        self.note.set_status("")
        worker = UpdateDownload(offer, self)
        worker.progress.connect(self._progress)
        worker.succeeded.connect(self._downloaded)
        worker.failed.connect(self._download_failed)
        worker.cancelled.connect(self._download_cancelled)
        worker.finished.connect(self._download_ended)
        self.download = worker
        dialog = QProgressDialog(f"Downloading launcher {offer.version}…", "Cancel", 0, 1000, self.window)
        dialog.setWindowTitle("Updating Launcher")
        dialog.setWindowModality(Qt.WindowModality.WindowModal)
        dialog.setMinimumDuration(0)
        dialog.setAutoClose(False)
        dialog.setAutoReset(False)
        dialog.canceled.connect(self._cancel_download)
        dialog.setValue(0)
        dialog.show()  # at once: the user pressed the button and should see the download begin
        self.progress_dialog = dialog
        worker.start()

    def _progress(self, event: ProgressEvent) -> None:
        dialog = self.progress_dialog
        if dialog is None or self.download is None or self.download.cancel.is_set():
            return
        dialog.setValue(int(event.fraction * 1000))
        dialog.setLabelText(f"Downloading launcher {self.download.offer.version}…\n{progress_line(event)}")

    def _cancel_download(self) -> None:
        if self.download is not None:
            self.download.cancel.set()
        if self.progress_dialog is not None:
            self.progress_dialog.setLabelText("Stopping the download…")

    def _download_cancelled(self, _message: str) -> None:
        self.note.set_status("Download paused; it continues where it stopped when you press the button again.")

    def _download_failed(self, message: str) -> None:
        log.warning("update download failed: %s", message)
        self._tell(
            QMessageBox.Icon.Warning,
            "The update was not downloaded",
            f"{message}\n\nNothing was installed; launcher {self._current_version()} keeps running.",
        )

    def _downloaded(self, downloaded: Downloaded) -> None:
        if self.download is None:
            return
        offer = self.download.offer
        self.installing = True
        dialog = self.progress_dialog
        if dialog is not None:
            dialog.setCancelButton(None)  # type: ignore[arg-type]  # Qt takes None: no cancel while installing
            dialog.setRange(0, 0)
            dialog.setLabelText(f"Installing launcher {offer.version}…")
        self._stop_server_then(lambda: self._install(offer, downloaded))

    def _download_ended(self) -> None:
        worker, self.download = self.download, None
        if worker is not None:
            worker.deleteLater()
        if not self.installing:
            self._close_progress()

    # -- install and restart ---------------------------------------------------------------------
    def _stop_server_then(self, then: Callable[[], None]) -> None:
        """Stop the app's server cleanly (it is the old version's), remembering its config to serve again."""
        if self.server.state == "stopped":
            self._resume = None
            then()
            return
        self._resume = self.server.config

        def stopped(_outcome: object) -> None:
            self.server.finished.disconnect(stopped)
            then()

        self.server.finished.connect(stopped)
        self.server.stop()

    def _install(self, offer: UpdateOffer, downloaded: Downloaded) -> None:
        workers.run_in_background(
            install_update, offer, downloaded, on_done=self._installed, on_failed=self._install_failed
        )

    def _installed(self, result: InstallResult) -> None:
        self.installing = False
        self._close_progress()
        log.info("update installed: %s", result.message)
        config, self._resume = self._resume, None
        argv = (
            new_app_command(result.restart_argv, page=self._current_page(), serve=config is not None)
            if result.restart_argv
            else None
        )
        # The window saves what the new version starts with (its settings) before that one starts.
        self._prepare_restart()
        if argv is not None:
            try:
                start_new_app(argv)
            except Exception as err:  # the window stays, and says so: quitting now would leave no app at all
                log.warning("the new version could not be started: %s", err)
                self._tell(
                    QMessageBox.Icon.Warning,
                    "The new version did not start",
                    f"{result.message}\n\nThe new version is installed, but it could not be started "
                    f"({workers.error_text(err)}). Quit this window and start Launcher again.",
                )
                return
        self._quit_app()

    def _install_failed(self, message: str) -> None:
        self.installing = False
        self._close_progress()
        log.warning("update install failed: %s", message)
        config, self._resume = self._resume, None
        if config is not None:
            self.server.start(config)  # the old version keeps serving as before
        self._tell(
            QMessageBox.Icon.Warning,
            "The update was not installed",
            f"{message}\n\nLauncher {self._current_version()} keeps running as before.",
        )

    # -- helpers ---------------------------------------------------------------------------------
    def _close_progress(self) -> None:
        dialog, self.progress_dialog = self.progress_dialog, None
        if dialog is not None:
            dialog.close()
            dialog.deleteLater()

    def _tell(self, icon: QMessageBox.Icon, title: str, text: str) -> None:
        """A message the user reads and dismisses; opened without a nested event loop."""
        box = QMessageBox(icon, title, text, QMessageBox.StandardButton.Ok, self.window)
        box.setTextInteractionFlags(Qt.TextInteractionFlag.TextSelectableByMouse)
        box.setWindowModality(Qt.WindowModality.WindowModal)
        box.setAttribute(Qt.WidgetAttribute.WA_DeleteOnClose)
        self.message = box
        box.open()

    @staticmethod
    def _current_version() -> str:
        return current.current_version()

    def shutdown(self) -> None:
        """Stop the schedule; cancel a running download and wait for its thread (app quit)."""
        self.timer.stop()
        worker = self.download
        if worker is not None:
            worker.cancel.set()
            worker.wait()
        self._close_progress()


def progress_line(event: ProgressEvent) -> str:
    """'12.0 MiB of 84.0 MiB · 5.1 MiB/s · 0:14 left' (or the verifying step)."""
    if event.kind == "verify":
        return "Verifying the download…"
    return progress_text(event)
