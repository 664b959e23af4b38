"""Installing a GPU pack: download with progress, check the sha256, unpack, and only then make it visible.

The archive goes to a partial file in the packs folder (a download that stops resumes there), is
checked against the index's sha256, and is unpacked into a hidden folder that is renamed into
place last, with `pack.json` recording each file's size and sha256. A failure at any step leaves
no half-installed pack behind: the engine sees either the whole pack or none.
"""

from __future__ import annotations

import shutil
import tarfile
import threading
from pathlib import Path, PurePosixPath

from launcher.catalog.progress import ProgressCallback, ProgressTracker
from launcher.catalog.transfer import HashMismatch, fetch_verified
from launcher.core.errors import ChecksumError, DownloadError, LauncherError
from launcher.engines.llamacpp.gpu_packs import (
    PACK_MANIFEST,
    InstalledManifest,
    InstalledPack,
    PackEntry,
    check_pack,
    file_digest,
    packs_dir,
)

_LIBRARY_SUFFIXES = (".so", ".dll", ".dylib")


def install_pack(
    entry: PackEntry,
    *,
    progress: ProgressCallback | None = None,
    cancel: threading.Event | None = None,
) -> InstalledPack:
    """Download, verify and unpack `entry` into the packs folder, replacing an older copy of it."""
    root = packs_dir()
    root.mkdir(parents=True, exist_ok=True)
    # Keyed by the archive's sha256: a newer release of the pack never resumes an older one's bytes.
    archive = root / f".{entry.name}-{entry.sha256[:16]}.tar.gz.partial"
    tracker = ProgressTracker(entry.size_bytes, 1, progress, cancel)
    tracker.start()
    label = entry.label or entry.name

    def stopped(err: Exception) -> Exception:
        if isinstance(err, LauncherError):
            return err
        # HTTP status, network after the retries, a full disk: one message shape
        return DownloadError(
            f"The {label} pack could not be downloaded ({err}); what arrived is kept, and the next try resumes it."
        )

    try:
        fetch_verified(
            entry.url,
            archive,
            size=entry.size_bytes,
            sha256=entry.sha256,
            tracker=tracker,
            label=entry.url.rsplit("/", 1)[-1],
            stopped=stopped,
        )
    except HashMismatch as err:
        raise ChecksumError(
            f"The {label} pack did not download intact (sha256 {err.actual[:12]}…, expected "
            f"{err.expected[:12]}…); nothing was installed. Try again."
        ) from None
    tracker.finish_file()
    installed = unpack_pack(entry, archive, root)
    archive.unlink(missing_ok=True)
    tracker.finish()
    return installed


def unpack_pack(entry: PackEntry, archive: Path, root: Path) -> InstalledPack:
    """Unpack a downloaded, verified pack archive into `root`, replacing an installed copy of it (also
    what an app update does with the new release's packs, launcher/updates/install.py)."""
    staging = root / f".{entry.name}.unpacking"
    shutil.rmtree(staging, ignore_errors=True)
    staging.mkdir()
    try:
        files = _extract(archive, staging)
        library = _backend_library(files, entry)
        manifest = InstalledManifest(
            entry=entry,
            files={name: (path.stat().st_size, file_digest(path)) for name, path in files.items()},
            library=library,
        )
        (staging / PACK_MANIFEST).write_text(manifest.model_dump_json(indent=2), encoding="utf-8")
        target = root / entry.name
        old = root / f".{entry.name}.old"
        shutil.rmtree(old, ignore_errors=True)
        if target.exists():
            target.rename(old)
        try:
            staging.rename(target)
        except OSError:
            if old.exists():
                old.rename(target)  # the working pack stays where the engine looks for it
            raise
        shutil.rmtree(old, ignore_errors=True)
    except OSError as err:
        shutil.rmtree(staging, ignore_errors=True)
        raise DownloadError(f"The {entry.name} pack could not be put in place ({err}); nothing was changed.") from err
    except BaseException:
        shutil.rmtree(staging, ignore_errors=True)
        raise
    return check_pack(target)


def _extract(archive: Path, into: Path) -> dict[str, Path]:
    """Regular files only, and none outside `into` (an archive cannot write elsewhere)."""
    files: dict[str, Path] = {}
    try:
        with tarfile.open(archive, "r:gz") as tar:
            for member in tar.getmembers():
                name = PurePosixPath(member.name)
                if member.isdir() or name.name == PACK_MANIFEST:
                    continue
                if not member.isfile() or name.is_absolute() or ".." in name.parts:
                    raise DownloadError(f"{archive.name} holds {member.name!r}, which a GPU pack may not")
                files[str(name)] = _write_member(tar, member, into / str(name))
    except (tarfile.TarError, OSError) as err:
        raise DownloadError(f"The GPU pack could not be unpacked ({err}); nothing was installed.") from err
    return files


def _write_member(tar: tarfile.TarFile, member: tarfile.TarInfo, target: Path) -> Path:
    """A regular file's bytes, with plain permissions (executable or not; never setuid or others-writable).

    Copied by hand rather than with `extract(filter="data")`: Debian 12's Python 3.11.2 has no
    extraction filters, and a pack holds nothing but regular files, checked above."""
    source = tar.extractfile(member)
    if source is None:
        raise DownloadError(f"{member.name!r} in the GPU pack has no contents")
    target.parent.mkdir(parents=True, exist_ok=True)
    with source, target.open("wb") as out:
        shutil.copyfileobj(source, out)
    target.chmod(0o755 if member.mode & 0o111 else 0o644)
    return target


def _backend_library(files: dict[str, Path], entry: PackEntry) -> str:
    """The ggml backend library of the pack (libggml-cuda.so, ggml-vulkan.dll, ...)."""
    for name in files:
        base = PurePosixPath(name).name
        if f"ggml-{entry.backend}" in base and base.endswith(_LIBRARY_SUFFIXES):
            return name
    raise DownloadError(f"The {entry.name} pack has no ggml-{entry.backend} library; nothing was installed.")
