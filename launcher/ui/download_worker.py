"""`DownloadWorker`: a pull (plan + download) in its own QThread, with progress signals and cancel.

launcher.catalog's `plan_pull` / `pull` do the work (resumable, verified, into the standard
Hugging Face cache); this thread only forwards their progress events as signals. Progress
callbacks arrive on the download thread, so they emit and never touch widgets. Cancel sets the
event `pull` checks on every chunk; the partial file stays on disk and the next pull resumes it.
"""

from __future__ import annotations

import threading
from functools import partial

from PySide6.QtCore import QObject, QThread, Signal

from launcher.advisor.download_advice import advised_variant
from launcher.catalog.download import pull
from launcher.catalog.progress import ProgressEvent
from launcher.catalog.pull_plan import plan_pull
from launcher.core.errors import DownloadCancelled
from launcher.hardware.machine import Machine
from launcher.ui import workers


class DownloadWorker(QThread):
    """Pull `spec` (catalog id or REPO[:FILE]); emits planned, progress, then succeeded / failed / cancelled."""

    planned = Signal(object)  # PullPlan
    progress = Signal(object)  # ProgressEvent
    succeeded = Signal(object)  # LocalModel
    failed = Signal(str)  # what went wrong, for the user
    cancelled = Signal(str)

    def __init__(
        self,
        spec: str,
        *,
        fmt: str | None = None,
        quant: str | None = None,
        machine: Machine | None = None,
        parent: QObject | None = None,
    ) -> None:
        super().__init__(parent)
        self.spec = spec
        self.fmt = fmt
        self.quant = quant
        self.machine = machine
        self._cancel = threading.Event()
        workers.track_thread(self)

    def run(self) -> None:
        """Plan and download (worker thread)."""
        try:
            advise = partial(advised_variant, machine=self.machine)
            plan = plan_pull(self.spec, fmt=self.fmt, quant=self.quant, advise=advise)  # type: ignore[arg-type]
            self.planned.emit(plan)
            if self._cancel.is_set():
                raise DownloadCancelled("Download cancelled before it started.")
            model = pull(plan, progress=self._forward, cancel=self._cancel)
        except DownloadCancelled as err:
            self.cancelled.emit(str(err))
        except Exception as err:  # every failure is shown to the user, never lost in a thread
            self.failed.emit(workers.error_text(err))
        else:
            self.succeeded.emit(model)

    def _forward(self, event: ProgressEvent) -> None:
        self.progress.emit(event)

    def cancel(self) -> None:
        """Ask the download to stop at the next chunk (the partial file is kept for resume)."""
        self._cancel.set()

    def cancel_and_wait(self) -> None:
        """Cancel and join (app quit)."""
        self.cancel()
        self.wait()
