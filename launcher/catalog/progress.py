"""Download progress: bytes done/total, speed and ETA as plain events, for the terminal and the app.

One `ProgressTracker` follows a whole pull (several files); the downloader calls `advance` for
every piece written. For transfers driven by huggingface_hub itself (`hf_hub_download`,
`snapshot_download`), `tracker.tqdm_class()` is a `tqdm_class` adapter feeding the same tracker.
Cancellation is a `threading.Event` checked on every update: raising inside the update aborts the
transfer mid-file and leaves the partial file in place, ready to resume.

Callbacks run on the download thread: the app must only emit a signal from them, never touch widgets.
"""

from __future__ import annotations

import sys
import threading
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass
from types import TracebackType
from typing import Any, Literal, TextIO

from launcher.core.errors import DownloadCancelled
from launcher.core.units import format_bytes

EventKind = Literal["start", "file", "progress", "verify", "done"]


@dataclass(frozen=True)
class ProgressEvent:
    """A snapshot of a pull's progress (all byte counts cover the whole pull)."""

    kind: EventKind
    bytes_done: int
    bytes_total: int
    file: str | None = None
    files_done: int = 0
    files_total: int = 0
    speed: float | None = None  # bytes/s over the last few seconds
    eta_s: float | None = None
    resumed_bytes: int = 0  # bytes already on disk from an earlier, interrupted attempt

    @property
    def fraction(self) -> float:
        """0.0 .. 1.0."""
        return min(1.0, self.bytes_done / self.bytes_total) if self.bytes_total else 0.0


ProgressCallback = Callable[[ProgressEvent], None]

_SPEED_WINDOW_S = 5.0


class ProgressTracker:
    """Aggregates bytes over a pull, computes speed and ETA, throttles events, honours cancel."""

    def __init__(
        self,
        bytes_total: int,
        files_total: int,
        callback: ProgressCallback | None = None,
        cancel: threading.Event | None = None,
        *,
        min_interval_s: float = 0.1,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.bytes_total = bytes_total
        self.files_total = files_total
        self.bytes_done = 0
        self.files_done = 0
        self.resumed_bytes = 0
        self.current_file: str | None = None
        self._callback = callback
        self._cancel = cancel
        self._interval = min_interval_s
        self._clock = clock
        self._samples: deque[tuple[float, int]] = deque()
        self._last_emit = 0.0
        self._lock = threading.Lock()

    # -- the pull drives these ----------------------------------------------------------------

    def start(self) -> None:
        """Announce the pull."""
        self.check_cancelled()
        self._emit("start", force=True)

    def start_file(self, name: str, *, already_on_disk: int = 0) -> None:
        """A file begins; `already_on_disk` bytes come from an earlier attempt (resume)."""
        self.check_cancelled()
        with self._lock:
            self.current_file = name
            self.bytes_done += already_on_disk
            self.resumed_bytes += already_on_disk
            self._samples.clear()  # speed measures this transfer only
        self._emit("file", force=True)

    def skip_file(self, name: str, size: int) -> None:
        """A file that is already complete locally."""
        with self._lock:
            self.current_file = name
            self.bytes_done += size
            self.files_done += 1
        self._emit("file", force=True)

    def advance(self, count: int) -> None:
        """`count` new bytes arrived (negative when a server ignored a resume and restarted)."""
        self.check_cancelled()
        with self._lock:
            self.bytes_done += count
        self._emit("progress")

    def verifying(self) -> None:
        """The current file is complete and its checksum is being checked."""
        self._emit("verify", force=True)

    def finish_file(self) -> None:
        """The current file is complete and verified."""
        with self._lock:
            self.files_done += 1
        self._emit("progress", force=True)

    def finish(self) -> None:
        """The whole pull is done."""
        self._emit("done", force=True)

    def check_cancelled(self) -> None:
        """Raise DownloadCancelled when the user asked to stop."""
        if self._cancel is not None and self._cancel.is_set():
            raise DownloadCancelled("Download cancelled. The partial file is kept: run the same pull again to resume.")

    # -- numbers --------------------------------------------------------------------------------

    def speed(self) -> float | None:
        """Bytes/s over the last few seconds, None until two samples exist."""
        with self._lock:
            if len(self._samples) < 2:
                return None
            (t0, b0), (t1, b1) = self._samples[0], self._samples[-1]
        return (b1 - b0) / (t1 - t0) if t1 > t0 else None

    def _event(self, kind: EventKind) -> ProgressEvent:
        speed = self.speed()
        remaining = max(self.bytes_total - self.bytes_done, 0)
        eta = remaining / speed if speed and speed > 0 else None
        return ProgressEvent(
            kind=kind,
            bytes_done=self.bytes_done,
            bytes_total=self.bytes_total,
            file=self.current_file,
            files_done=self.files_done,
            files_total=self.files_total,
            speed=speed,
            eta_s=eta,
            resumed_bytes=self.resumed_bytes,
        )

    def _emit(self, kind: EventKind, *, force: bool = False) -> None:
        now = self._clock()
        with self._lock:
            self._samples.append((now, self.bytes_done))
            while len(self._samples) > 2 and now - self._samples[0][0] > _SPEED_WINDOW_S:
                self._samples.popleft()
            if not force and now - self._last_emit < self._interval:
                return
            self._last_emit = now
        if self._callback is not None:
            self._callback(self._event(kind))

    # -- huggingface_hub adapter ----------------------------------------------------------------

    def tqdm_class(self) -> type[Any]:
        """A tqdm-compatible class huggingface_hub can drive (`tqdm_class=`), bound to this tracker."""
        tracker = self

        class _TrackerBar:
            def __init__(self, *args: Any, **kwargs: Any) -> None:
                self.n = int(kwargs.get("initial") or 0)
                self.total = kwargs.get("total")

            def update(self, n: float | None = 1) -> bool | None:
                count = int(n or 0)
                self.n += count
                tracker.advance(count)
                return None

            def close(self) -> None:
                pass

            def __enter__(self) -> _TrackerBar:
                return self

            def __exit__(
                self, kind: type[BaseException] | None, error: BaseException | None, tb: TracebackType | None
            ) -> None:
                self.close()

        return _TrackerBar


class TerminalBar:
    """A tqdm-style one-line bar on stderr: `[#####     ] 45% 1.1/2.4 GiB 38.2 MiB/s ETA 0:35 file`."""

    def __init__(self, stream: TextIO | None = None, width: int = 28) -> None:
        self.stream = stream or sys.stderr
        self.width = width
        self.interactive = self.stream.isatty()
        self._last_line_len = 0
        self._last_plain = -1

    def __call__(self, event: ProgressEvent) -> None:
        """Render one event (a redrawn line on a terminal, a line per 10% otherwise)."""
        line = format_progress_line(event, self.width)
        if self.interactive:
            padding = " " * max(self._last_line_len - len(line), 0)
            self.stream.write("\r" + line + padding)
            self._last_line_len = len(line)
            if event.kind == "done":
                self.stream.write("\n")
        else:
            decile = int(event.fraction * 10)
            if decile != self._last_plain or event.kind in ("file", "done"):
                self._last_plain = decile
                self.stream.write(line + "\n")
        self.stream.flush()


def format_progress_line(event: ProgressEvent, width: int = 28) -> str:
    """The bar as text (used by the terminal bar and tests)."""
    filled = int(event.fraction * width)
    bar = "#" * filled + " " * (width - filled)
    speed = f"{format_bytes(event.speed)}/s" if event.speed else "--/s"
    eta = format_duration(event.eta_s) if event.eta_s is not None else "--:--"
    done, total = format_bytes(event.bytes_done), format_bytes(event.bytes_total)
    label = {"verify": "verifying ", "done": "done "}.get(event.kind, "")
    name = f" {label}{event.file}" if event.file else ""
    return f"[{bar}] {event.fraction * 100:3.0f}% {done}/{total} {speed} ETA {eta}{name}"


def format_duration(seconds: float) -> str:
    """37 -> '0:37', 3725 -> '1:02:05'."""
    seconds = int(seconds)
    hours, rest = divmod(seconds, 3600)
    minutes, secs = divmod(rest, 60)
    return f"{hours}:{minutes:02d}:{secs:02d}" if hours else f"{minutes}:{secs:02d}"
