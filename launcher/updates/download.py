"""Downloading an update when the user asks: signatures first, then the bytes, then their hash.

Every file of the offer (the app's, and the GPU packs installed here) has its signature checked
with the build's release key before a single byte is requested, so a feed that is not the release's
costs nothing but its own GET. A signature covers the file's name, size and sha256 for this release
and what the file is for (this platform's installer of this kind, or a pack:
`launcher.updates.signing`); the bytes are then hashed on their way to disk and must match that
sha256, or the file is deleted.

The transfer is the model downloads' own (`launcher.catalog.transfer`: resumable with Range,
retried on network errors, hashed on a second thread) with their progress events and cancel, into
`<cache>/updates/`. A transfer that stops keeps what arrived, and the next download resumes it; a
disk that cannot hold the update is refused before the first byte, and one that fills up during the
write is reported as full. Files of an older offer are removed when a new download starts.
"""

from __future__ import annotations

import errno
import shutil
import threading
from dataclasses import dataclass
from pathlib import Path

import httpx2

from launcher.catalog.progress import ProgressCallback, ProgressTracker
from launcher.catalog.transfer import HashMismatch, fetch_verified
from launcher.core import paths
from launcher.core.errors import DownloadCancelled, DownloadTooLarge, LauncherError, UpdateError
from launcher.core.units import format_bytes
from launcher.engines.llamacpp.gpu_packs import file_digest
from launcher.updates import signing
from launcher.updates.check import UpdateOffer
from launcher.updates.current import current_version, update_public_key
from launcher.updates.feed import PackFile

DISK_MARGIN = 64 * 1024 * 1024
"""Free space kept beyond the download itself: a disk filled to the last byte breaks other programs."""
_DISK_FULL = {errno.ENOSPC, getattr(errno, "EDQUOT", errno.ENOSPC)}


@dataclass(frozen=True)
class Downloaded:
    """The verified files of an offer, ready to install."""

    path: Path  # the release file for this installation
    packs: tuple[tuple[PackFile, Path], ...] = ()  # each pack and its verified archive


@dataclass(frozen=True)
class _Item:
    """One file to fetch."""

    name: str  # as the feed names it (messages, progress)
    url: str
    size: int
    sha256: str
    filename: str  # under updates_dir()

    @property
    def partial_name(self) -> str:
        # Keyed by the sha256: bytes of another build of the same file are never resumed into this one.
        return f".{self.filename}-{self.sha256[:16]}.partial"


def updates_dir() -> Path:
    """Where downloaded updates wait to be installed."""
    return paths.cache_dir() / "updates"


def download(
    offer: UpdateOffer,
    *,
    progress: ProgressCallback | None = None,
    cancel: threading.Event | None = None,
) -> Downloaded:
    """Verify the offer's signatures, then download and check its files; UpdateError says what was refused.

    `progress` gets the same events as a model download (on this thread); setting `cancel` stops
    the transfer with DownloadCancelled, keeping what arrived for the next download to resume.
    """
    release = offer.file
    if release is None:
        raise UpdateError(f"launcher {offer.version} has no download for this installation ({offer.installation.how}).")
    public = update_public_key()
    version = offer.feed.version
    purpose = signing.file_purpose(release.platform, release.kind)
    signing.verify(public, release.signature, version, release.name, release.size, release.sha256, purpose=purpose)
    for pack in offer.packs:
        signing.verify(
            public, pack.signature, version, pack.name, pack.size_bytes, pack.sha256, purpose=signing.PACK_PURPOSE
        )

    items = [_Item(release.name, release.url, release.size, release.sha256, release.name)]
    items += [_Item(p.name, p.url, p.size_bytes, p.sha256, f"{p.name}.tar.gz") for p in offer.packs]
    folder = updates_dir()
    try:
        folder.mkdir(parents=True, exist_ok=True)
    except OSError as err:
        raise UpdateError(f"The update cannot be downloaded: {folder} cannot be created ({err}).") from err
    _forget_other_downloads(folder, items)
    _check_free_space(folder, items)

    tracker = ProgressTracker(sum(item.size for item in items), len(items), progress, cancel)
    tracker.start()
    fetched = [_fetch(item, folder, tracker) for item in items]
    tracker.finish()
    return Downloaded(path=fetched[0], packs=tuple(zip(offer.packs, fetched[1:], strict=True)))


def _forget_other_downloads(folder: Path, items: list[_Item]) -> None:
    """Remove files an earlier offer left (a finished older release, a partial of another build)."""
    keep = {item.filename for item in items} | {item.partial_name for item in items}
    for path in folder.iterdir():
        if path.name not in keep and (path.is_file() or path.is_symlink()):
            path.unlink(missing_ok=True)


def _check_free_space(folder: Path, items: list[_Item]) -> None:
    """Refuse up front when the disk cannot hold what is still to come."""
    needed = 0
    for item in items:
        if (folder / item.filename).is_file():
            continue  # already downloaded (its hash is checked before it is used)
        partial = folder / item.partial_name
        on_disk = partial.stat().st_size if partial.is_file() else 0
        needed += max(item.size - on_disk, 0)
    free = shutil.disk_usage(folder).free
    if needed and free < needed + DISK_MARGIN:
        raise UpdateError(
            f"Not enough free disk for the update: it needs {format_bytes(needed + DISK_MARGIN)} in {folder}, and "
            f"{format_bytes(free)} is free there. Free some space and try again; nothing was downloaded."
        )


def _fetch(item: _Item, folder: Path, tracker: ProgressTracker) -> Path:
    """One file into `folder`, resumed from an earlier partial file, checked against its signed sha256."""
    final = folder / item.filename
    if final.is_file():
        tracker.start_file(item.name)
        tracker.verifying()
        if final.stat().st_size == item.size and file_digest(final) == item.sha256:
            tracker.skip_file(item.name, item.size)
            return final
        final.unlink()  # not this release's file: download it again
    partial = folder / item.partial_name
    # More than the file can hold: nothing in it can be trusted.
    if partial.exists() and partial.stat().st_size > item.size:
        partial.unlink()

    def stopped(err: Exception) -> Exception:
        if isinstance(err, DownloadCancelled):
            return DownloadCancelled(
                f"The update download was cancelled; the {format_bytes(_size(partial))} that arrived are kept, "
                "and the next download resumes there."
            )
        # the disk, or an HTTP status (huggingface_hub's HTTP errors are OSErrors)
        if isinstance(err, OSError) and err.errno in _DISK_FULL:
            return UpdateError(
                f"The disk is full: {item.name} could not be written to {folder} ({err.strerror}). Free some "
                "space and download again; what arrived is kept and the download resumes there."
            )
        return _stopped(item, partial, err)  # an HTTP status, the network after the retries, a short answer

    try:
        fetch_verified(
            item.url,
            partial,
            size=item.size,  # the transfer stops before writing past the signed size
            sha256=item.sha256,
            tracker=tracker,
            label=item.name,
            headers={"User-Agent": f"launcher/{current_version()}"},
            stopped=stopped,
        )
    except HashMismatch as err:
        raise UpdateError(
            f"{item.name} was corrupted in transfer: its sha256 is {err.actual[:12]}…, the release signed "
            f"{err.expected[:12]}…. The file was deleted and nothing was installed; download again."
        ) from None
    try:
        partial.replace(final)
    except OSError as err:
        raise UpdateError(f"{item.name} was downloaded but could not be moved into {folder} ({err}).") from err
    tracker.finish_file()
    return final


def _stopped(item: _Item, partial: Path, err: Exception) -> UpdateError:
    """The message for a transfer that stopped: what arrived is kept unless it cannot be right."""
    have = _size(partial)
    if have > item.size or isinstance(err, DownloadTooLarge):
        partial.unlink(missing_ok=True)
        return UpdateError(
            f"The server sent more of {item.name} than the release lists ({format_bytes(have)} of "
            f"{format_bytes(item.size)}); the file was deleted and nothing was installed."
        )
    if not have:
        return UpdateError(f"The download of {item.name} did not start: {_reason(err)}. Try again later.")
    return UpdateError(
        f"The download of {item.name} stopped at {format_bytes(have)} of {format_bytes(item.size)}: "
        f"{_reason(err)}. What arrived is kept; downloading again resumes there."
    )


def _reason(err: Exception) -> str:
    """Why a transfer stopped, in words (the transfer's errors speak of pulls, Hub tokens and partial files)."""
    if isinstance(err, LauncherError):  # the transfer's own check that the whole file came
        return "the server ended the transfer early"
    status = getattr(getattr(err, "response", None), "status_code", None)
    if isinstance(status, int):
        return f"the server answered HTTP {status}"
    if isinstance(err, httpx2.TransportError):
        return f"the connection failed ({err})"
    return str(err) or type(err).__name__


def _size(path: Path) -> int:
    try:
        return path.stat().st_size
    except OSError:
        return 0
