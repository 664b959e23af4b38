"""One HTTP GET into a partial file: resumable (Range), retried on transient errors, hashed on the fly.

Uses huggingface_hub's own HTTP session (its transport, proxies and user agent) and error
mapping, but reads the body as the network delivers it instead of re-chunking it into 10 MB
blocks as `http_get` does: that copy costs more than verifying the sha256, which runs on a
second thread (hashlib releases the GIL), so a verified pull is as fast as a bare one.

`fetch_verified` is the whole verified transfer of one file with a known size and sha256 (the app's
updates and GPU packs): resume, progress, the hash check, and the partial file deleted on a mismatch.
"""

from __future__ import annotations

import contextlib
import hashlib
import logging
import queue
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import httpx2
from huggingface_hub import constants
from huggingface_hub.utils import get_session, hf_raise_for_status  # type: ignore[attr-defined]  # lazily exported

from launcher.catalog.progress import ProgressTracker
from launcher.core.errors import ChecksumError, DownloadError, DownloadTooLarge, LauncherError

logger = logging.getLogger(__name__)

_RETRIES = 5  # consecutive failures without any new byte, as huggingface_hub does
_TRANSIENT = (httpx2.NetworkError, httpx2.TimeoutException, httpx2.RemoteProtocolError)
_READ_BLOCK = 8 * 1024 * 1024


class HashMismatch(ChecksumError):
    """The bytes that arrived do not hash to the expected sha256; the partial file was deleted."""

    def __init__(self, name: str, actual: str, expected: str) -> None:
        super().__init__(
            f"{name} did not download intact (sha256 {actual[:12]}…, expected {expected[:12]}…); it was deleted."
        )
        self.actual = actual
        self.expected = expected


def _unchanged(err: Exception) -> Exception:
    return err


def fetch_verified(
    url: str,
    partial: Path,
    *,
    size: int,
    sha256: str,
    tracker: ProgressTracker,
    label: str,
    headers: dict[str, str] | None = None,
    stopped: Callable[[Exception], Exception] = _unchanged,
) -> Path:
    """Download `url` into `partial`, resuming what an earlier try left there, and check its sha256; return `partial`.

    Progress goes to `tracker` as the file `label`. An error that stops the transfer (cancel
    included) is kept with the partial file for the next try, and is passed to `stopped`, which
    returns the error to raise in its place (the same one to let it through). Bytes that do not
    hash to `sha256` are deleted and raise HashMismatch, for the caller to word.
    """
    on_disk = partial.stat().st_size if partial.exists() else 0
    tracker.start_file(label, already_on_disk=on_disk)
    hasher = BackgroundHasher.sha256(resume_from=partial if on_disk else None, resume_bytes=on_disk)
    try:
        stream_to_file(url, partial, headers=headers or {}, expected_size=size, hasher=hasher, on_bytes=tracker.advance)
    except Exception as err:
        hasher.abort()  # on every way out: the hashing thread must not outlive the transfer
        replacement = stopped(err)
        if replacement is err:
            raise
        raise replacement from err
    except BaseException:
        hasher.abort()
        raise
    tracker.verifying()
    digest = hasher.hexdigest()
    if digest != sha256:
        partial.unlink(missing_ok=True)
        raise HashMismatch(partial.name, digest, sha256)
    return partial


def stream_to_file(
    url: str,
    partial: Path,
    *,
    headers: dict[str, str],
    expected_size: int | None,
    hasher: BackgroundHasher,
    on_bytes: Callable[[int], None],
) -> int:
    """Append the rest of the file at `url` to `partial` (starting from its current size); return its size.

    `on_bytes` is called after each piece is on disk and hashed; raising from it (cancel) stops the
    transfer and leaves a consistent, resumable partial file.
    """
    retries = _RETRIES
    while True:
        position = partial.stat().st_size if partial.exists() else 0
        if expected_size is not None and position >= expected_size:
            return position
        request_headers = {**headers, "Accept-Encoding": "identity"}
        if position:
            request_headers["Range"] = f"bytes={position}-"
        try:
            position = _get(url, partial, position, request_headers, hasher, on_bytes, expected_size)
            break
        except _TRANSIENT as err:
            if retries <= 0:
                raise
            retries -= 1
            logger.warning("Download of %s interrupted (%s); resuming", partial.name, err)
            time.sleep(1)
    if expected_size is not None and position != expected_size:
        raise DownloadError(
            f"The server sent {position} bytes of {partial.name} instead of {expected_size}. "
            "Run the pull again to resume."
        )
    return position


def _get(
    url: str,
    partial: Path,
    position: int,
    headers: dict[str, str],
    hasher: BackgroundHasher,
    on_bytes: Callable[[int], None],
    expected_size: int | None = None,
) -> int:
    timeout = constants.HF_HUB_DOWNLOAD_TIMEOUT
    with get_session().stream("GET", url, headers=headers, timeout=timeout, follow_redirects=True) as response:
        hf_raise_for_status(response)
        with partial.open("r+b" if position else "wb") as handle:
            if position and response.status_code != 206:  # the server ignored Range: start over
                handle.truncate(0)
                hasher.restart()
                on_bytes(-position)
                position = 0
            handle.seek(position)
            for chunk in response.iter_bytes():
                if expected_size is not None and position + len(chunk) > expected_size:
                    # A broken or hostile server sending more than the file's known size must not fill the disk.
                    raise DownloadTooLarge(
                        f"The server sent more than the {expected_size} bytes {partial.name} has; the download "
                        "was stopped."
                    )
                handle.write(chunk)
                hasher.feed(chunk)
                position += len(chunk)
                on_bytes(len(chunk))
    return position


class BackgroundHasher:
    """Hashes the bytes on their way to disk on another thread, so the check costs no extra pass.

    When resuming, the bytes an earlier attempt left in the partial file are read and hashed first.
    """

    _RESTART = b""

    def __init__(self, digest: Any, resume_from: Path | None = None, resume_bytes: int = 0) -> None:
        self._digest = digest
        self._initial = digest.copy()
        self._queue: queue.Queue[bytes | None] = queue.Queue(maxsize=256)
        self._aborted = threading.Event()
        self._error: BaseException | None = None
        self._thread = threading.Thread(target=self._run, args=(resume_from, resume_bytes), name="hash", daemon=True)
        self._thread.start()

    @classmethod
    def sha256(cls, resume_from: Path | None = None, resume_bytes: int = 0) -> BackgroundHasher:
        """For LFS files: the Hub's sha256."""
        return cls(hashlib.sha256(), resume_from, resume_bytes)

    @classmethod
    def git_blob(cls, size: int, resume_from: Path | None = None, resume_bytes: int = 0) -> BackgroundHasher:
        """For small files: git's blob id, sha1 over 'blob <size>\\0' + content."""
        return cls(hashlib.sha1(b"blob %d\0" % size), resume_from, resume_bytes)

    def _run(self, resume_from: Path | None, resume_bytes: int) -> None:
        try:
            if resume_from is not None and resume_bytes:
                with resume_from.open("rb") as handle:
                    left = resume_bytes
                    while left and not self._aborted.is_set():
                        block = handle.read(min(_READ_BLOCK, left))
                        if not block:
                            break
                        self._digest.update(block)
                        left -= len(block)
            while True:
                item = self._queue.get()
                if item is None:
                    return
                if item is self._RESTART:
                    self._digest = self._initial.copy()
                    continue
                self._digest.update(item)
        except BaseException as err:  # reported by hexdigest()
            self._error = err

    def feed(self, data: bytes) -> None:
        """Queue bytes to hash (blocks when the hasher is far behind, bounding memory)."""
        if data:
            self._queue.put(data)

    def restart(self) -> None:
        """Forget everything hashed so far (the file restarts from byte 0)."""
        self._queue.put(self._RESTART)

    def hexdigest(self) -> str:
        """Wait for the queued bytes and return the digest."""
        self._queue.put(None)
        self._thread.join()
        if self._error is not None:
            raise LauncherError(f"Could not check the downloaded file: {self._error}")
        result: str = self._digest.hexdigest()
        return result

    def abort(self) -> None:
        """Stop without a result (the thread ends even if the queue was full)."""
        self._aborted.set()
        while True:
            try:
                self._queue.put_nowait(None)
                break
            except queue.Full:
                with contextlib.suppress(queue.Empty):
                    self._queue.get_nowait()
        self._thread.join(timeout=5)
