"""`MetricsPoller`: a QThread that scrapes /metrics, lists the loaded models (/launcher/models) and
samples the server's memory once a second.

It only emits plain data (`LiveSample`, `LoadedModels`), never touches widgets. `stop()` sets a
flag the loop waits on, so stopping takes at most one HTTP timeout, and then joins the thread.
"""

from __future__ import annotations

import threading
import time

import httpx
from PySide6.QtCore import QObject, QThread, Signal

from launcher.ui import workers
from launcher.ui.loaded_models import error_message, parse_loaded_models
from launcher.ui.metrics import LiveSample, MetricsSnapshot, parse_metrics
from launcher.ui.process_memory import MemorySampler

POLL_INTERVAL_S = 1.0


class MetricsPoller(QThread):
    """Polls `<url>/metrics`, `<url>/launcher/models` and the process `pid`; emits `sample(LiveSample)`
    or `unreachable(str)`, and `models(LoadedModels)` or `models_unreachable(str)`."""

    sample = Signal(object)
    unreachable = Signal(str)
    models = Signal(object)
    models_unreachable = Signal(str)

    def __init__(
        self,
        url: str,
        pid: int,
        *,
        api_key: str | None = None,
        interval_s: float = POLL_INTERVAL_S,
        transport: httpx.BaseTransport | None = None,
        parent: QObject | None = None,
    ) -> None:
        super().__init__(parent)
        self.url = url.rstrip("/") + "/metrics"
        self.models_url = url.rstrip("/") + "/launcher/models"
        self.pid = pid
        self._headers = {"Authorization": f"Bearer {api_key}"} if api_key else {}
        self._interval_s = interval_s
        self._transport = transport
        self._stop_event = threading.Event()
        workers.track_thread(self)

    def run(self) -> None:
        """The polling loop (runs in the worker thread)."""
        sampler = MemorySampler(self.pid)
        previous: MetricsSnapshot | None = None
        try:
            with httpx.Client(transport=self._transport, timeout=2.0, headers=self._headers) as client:
                while not self._stop_event.is_set():
                    began = time.monotonic()
                    try:
                        response = client.get(self.url)
                        response.raise_for_status()
                        snapshot = parse_metrics(response.text, time.monotonic())
                    except (httpx.HTTPError, ValueError) as err:
                        self.unreachable.emit(f"/metrics not reachable: {err}")
                    else:
                        memory = sampler.sample(snapshot.engine_memory)
                        self.sample.emit(LiveSample.between(previous, snapshot, memory))
                        previous = snapshot
                    self._poll_models(client)
                    self._stop_event.wait(max(0.0, self._interval_s - (time.monotonic() - began)))
        finally:
            sampler.close()

    def _poll_models(self, client: httpx.Client) -> None:
        """One listing of the loaded models (its own signals: the gauges stay live if only this fails)."""
        asked = time.monotonic()
        try:
            response = client.get(self.models_url)
            if response.status_code >= 400:
                status = response.status_code
                self.models_unreachable.emit(f"/launcher/models answered {status}: {error_message(response)}")
                return
            listing = parse_loaded_models(response.json(), fetched_at=asked)
        except (httpx.HTTPError, ValueError) as err:
            self.models_unreachable.emit(f"/launcher/models not reachable: {err}")
        else:
            self.models.emit(listing)

    def stop(self) -> None:
        """Ask the loop to end and wait for the thread."""
        self._stop_event.set()
        self.wait()
