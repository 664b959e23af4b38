"""Run a blocking function off the UI thread and get its result back as a signal.

`run_in_background(fn, on_done, on_failed)` queues `fn` on the app's own QThreadPool; the result
(or the user-facing error text) comes back through queued signals, so callbacks run on the UI
thread. `pool()` is exposed so the app can wait for workers on quit and tests can check that
none is left running.
"""

from __future__ import annotations

import logging
import weakref
from collections.abc import Callable
from typing import Any

from PySide6.QtCore import QObject, QRunnable, QThread, QThreadPool, Signal

from launcher.core.errors import LauncherError

log = logging.getLogger(__name__)
_POOL: QThreadPool | None = None
_ACTIVE: set[FunctionWorker] = set()
_THREADS: weakref.WeakSet[QThread] = weakref.WeakSet()


def pool() -> QThreadPool:
    """The pool every UI background job runs in."""
    global _POOL
    if _POOL is None:
        _POOL = QThreadPool()
        _POOL.setMaxThreadCount(4)
    return _POOL


def track_thread(thread: QThread) -> QThread:
    """Remember a long-lived worker thread so quit and tests can check none is left running."""
    _THREADS.add(thread)
    return thread


def running_threads() -> list[QThread]:
    """Tracked worker threads that are still running."""
    alive = []
    for thread in list(_THREADS):
        try:
            if thread.isRunning():
                alive.append(thread)
        except RuntimeError:  # the C++ object is gone: it cannot be running
            continue
    return alive


def error_text(err: BaseException) -> str:
    """What the user reads for an exception: our own errors carry their message, others get the type too."""
    if isinstance(err, LauncherError):
        return str(err)
    return f"{type(err).__name__}: {err}"


class _Signals(QObject):
    done = Signal(object)
    failed = Signal(str)


class FunctionWorker(QRunnable):
    """One call of `fn(*args, **kwargs)` in the pool."""

    def __init__(self, fn: Callable[..., Any], *args: Any, **kwargs: Any) -> None:
        super().__init__()
        self.setAutoDelete(False)
        self.signals = _Signals()
        self._call = (fn, args, kwargs)

    def run(self) -> None:
        """Call the function; emit `done(result)` or `failed(text)`."""
        fn, args, kwargs = self._call
        try:
            result = fn(*args, **kwargs)
        except Exception as err:  # every failure becomes text for the user, never a dead worker
            if not isinstance(err, LauncherError):
                log.exception("background job %s failed", getattr(fn, "__name__", fn))
            self._emit(self.signals.failed, error_text(err))
        else:
            self._emit(self.signals.done, result)

    @staticmethod
    def _emit(signal: Any, value: Any) -> None:
        try:
            signal.emit(value)
        except RuntimeError:
            # The app quit while this job ran and its receiver is gone: nobody is left to tell.
            log.debug("background job finished after its receiver was deleted")


def run_in_background(
    fn: Callable[..., Any],
    *args: Any,
    on_done: Callable[[Any], None] | None = None,
    on_failed: Callable[[str], None] | None = None,
    **kwargs: Any,
) -> FunctionWorker:
    """Queue `fn(*args, **kwargs)`; the callbacks run on the UI thread."""
    worker = FunctionWorker(fn, *args, **kwargs)
    _ACTIVE.add(worker)

    def release(*_: object) -> None:
        _ACTIVE.discard(worker)

    if on_done is not None:
        worker.signals.done.connect(on_done)
    if on_failed is not None:
        worker.signals.failed.connect(on_failed)
    worker.signals.done.connect(release)
    worker.signals.failed.connect(release)
    pool().start(worker)
    return worker
