"""The "GPU engine" card on the machine page: which GPU pack this machine can use, installed or not.

The installed app runs llama.cpp on the CPU until a GPU pack (CUDA or Vulkan backend) is in the
data folder. This card asks the release's pack index which packs fit what detection found, offers
the best one with its size, downloads it with progress when the user presses the button (never
unasked), and says what is wrong with an installed pack the server would pass over.
"""

from __future__ import annotations

import threading

from PySide6.QtCore import QObject, QThread, Signal
from PySide6.QtWidgets import QHBoxLayout, QLabel, QProgressBar, QPushButton, QWidget

from launcher.catalog.progress import ProgressEvent, format_progress_line
from launcher.core.errors import DownloadCancelled, LauncherError
from launcher.core.units import format_bytes
from launcher.engines.llamacpp.gpu_pack_install import install_pack
from launcher.engines.llamacpp.gpu_packs import InstalledPack, PackEntry, PackOffer, pack_offer
from launcher.hardware.machine import Machine
from launcher.ui import workers
from launcher.ui.widgets.card import Card, muted


class PackDownload(QThread):
    """`install_pack` on its own thread; emits progress, then succeeded / failed."""

    progress = Signal(object)  # ProgressEvent
    succeeded = Signal(object)  # InstalledPack
    failed = Signal(str)

    def __init__(self, entry: PackEntry, parent: QObject | None = None) -> None:
        super().__init__(parent)
        self.entry = entry
        self.cancel = threading.Event()
        workers.track_thread(self)

    def run(self) -> None:
        """Download, verify and unpack (worker thread)."""
        try:
            pack = install_pack(self.entry, progress=self.progress.emit, cancel=self.cancel)
        except (DownloadCancelled, LauncherError) as err:
            self.failed.emit(str(err))
        except Exception as err:  # never a silent end: the card says what happened
            self.failed.emit(f"The pack could not be installed: {err}")
        else:
            self.succeeded.emit(pack)


class GpuPackCard(Card):
    """The GPU pack this machine can use, with Download, progress and Cancel."""

    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__("GPU engine", parent)
        self.status = QLabel("Checking which GPU engine fits this machine…")
        self.status.setWordWrap(True)
        self.detail = muted("")
        self.bar = QProgressBar()
        self.bar.setVisible(False)
        self.download_button = QPushButton("Download")
        self.download_button.setVisible(False)
        self.download_button.clicked.connect(self.start_download)
        self.cancel_button = QPushButton("Cancel")
        self.cancel_button.setVisible(False)
        self.cancel_button.clicked.connect(self._cancel)
        buttons = QHBoxLayout()
        buttons.addWidget(self.download_button)
        buttons.addWidget(self.cancel_button)
        buttons.addStretch(1)
        for widget in (self.status, self.detail, self.bar):
            self.body.addWidget(widget)
        self.body.addLayout(buttons)
        self.offer: PackOffer | None = None
        self.download: PackDownload | None = None
        self._machine: Machine | None = None

    def set_machine(self, machine: Machine) -> None:
        """Look up the packs for `machine` in the background."""
        self._machine = machine
        workers.run_in_background(pack_offer, machine, on_done=self.show_offer, on_failed=self.status.setText)

    def show_offer(self, offer: PackOffer) -> None:
        """Fill the card from `offer`."""
        self.offer = offer
        intact = [pack for pack in offer.installed if pack.problem is None]
        names = {pack.name for pack in intact}
        missing = [entry for entry in offer.suitable if entry.name not in names]
        if intact:
            text = f"Installed: {', '.join(pack.name for pack in intact)}. `launcher serve` loads it for the GPU."
        elif missing:
            best = missing[0]
            gpu = self._machine.gpus[0].name if self._machine and self._machine.gpus else "this GPU"
            text = (
                f"llama.cpp runs on the CPU. The {best.label or best.backend} pack ({format_bytes(best.size_bytes)}) "
                f"lets it use the {gpu}."
            )
        else:
            text = offer.note or "llama.cpp runs on the CPU."
        self.status.setText(text)
        problems = [pack.problem for pack in offer.installed if pack.problem]
        self.detail.setText("\n".join(f"⚠ {problem}" for problem in problems if problem))
        self.download_button.setVisible(bool(missing) and not intact and self.download is None)
        if missing:
            self.download_button.setText(f"Download {missing[0].label or missing[0].name}")

    def start_download(self) -> None:
        """Install the best pack that is not installed yet."""
        if self.offer is None or self.download is not None:
            return
        installed = {pack.name for pack in self.offer.installed if pack.problem is None}
        entry = next((e for e in self.offer.suitable if e.name not in installed), None)
        if entry is None:
            return
        self.download = PackDownload(entry, self)
        self.download.progress.connect(self._progress)
        self.download.succeeded.connect(self._done)
        self.download.failed.connect(self._failed)
        self.download.finished.connect(self._thread_ended)
        self.download_button.setVisible(False)
        self.cancel_button.setVisible(True)
        self.bar.setVisible(True)
        self.bar.setValue(0)
        self.download.start()

    def _progress(self, event: ProgressEvent) -> None:
        self.bar.setValue(int(event.fraction * 100))
        self.detail.setText(format_progress_line(event, 0))

    def _done(self, pack: InstalledPack) -> None:
        self.detail.setText(pack.problem or f"{pack.name} is installed; the next server start uses it.")

    def _failed(self, text: str) -> None:
        self.detail.setText(text)

    def _cancel(self) -> None:
        if self.download is not None:
            self.download.cancel.set()

    def _thread_ended(self) -> None:
        download, self.download = self.download, None
        if download is not None:
            download.deleteLater()
        self.bar.setVisible(False)
        self.cancel_button.setVisible(False)
        if self._machine is not None:
            self.set_machine(self._machine)

    def shutdown(self) -> None:
        """Cancel a running download and wait for its thread (app quit)."""
        if self.download is not None:
            self.download.cancel.set()
            self.download.wait()
