"""Download the files of a pull plan into the standard Hugging Face cache, resumably and verified.

The cache layout is huggingface_hub's own (blobs/<etag>, snapshots/<commit>/<path> -> blob,
refs/<branch>), so every HF tool sees what we pulled and we see what they pulled. The bytes
go through huggingface_hub's HTTP session (see transfer.py) into a partial file with a stable
name, `blobs/<etag>.incomplete`: huggingface_hub 2.x writes to a per-process name and deletes
it on failure, so a killed process would restart from zero. Here a later run (or the same one
after a cancel) resumes from the bytes on disk with a Range request.

A blob is renamed into place only after its hash matches the Hub's (sha256 from the LFS
metadata; git blob sha1 for small files), and only then is it linked into the snapshot:
nothing half-written or corrupted ever counts as a model.
"""

from __future__ import annotations

import errno
import os
import re
import shutil
import threading
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, NamedTuple
from urllib.parse import urlparse

from huggingface_hub import get_hf_file_metadata, hf_hub_url, scan_cache_dir
from huggingface_hub.errors import CacheNotFound
from huggingface_hub.file_download import HfFileMetadata, repo_folder_name
from huggingface_hub.utils import WeakFileLock, build_hf_headers  # type: ignore[attr-defined]  # lazily exported

from launcher.catalog.hub_client import (
    HUB_EXCEPTIONS,
    HubContext,
    is_offline,
    models_cache_dir,
    offline_error,
    translate_hub_error,
)
from launcher.catalog.progress import ProgressCallback, ProgressTracker
from launcher.catalog.transfer import BackgroundHasher, stream_to_file
from launcher.core.errors import ChecksumError, DiskFullError, DownloadError
from launcher.core.model_types import LocalModel, ModelFormat
from launcher.core.units import format_bytes

DiskUsage = Callable[[str], Any]  # shutil.disk_usage's shape: .free in bytes
_SHA256 = re.compile(r"^[0-9a-f]{64}$")
_GIT_OID = re.compile(r"^[0-9a-f]{40}$")
_READ_BLOCK = 8 * 1024 * 1024


@dataclass(frozen=True)
class RemoteFile:
    """One file of a repo as model_info(files_metadata=True) describes it."""

    path: str
    size: int | None
    sha256: str | None = None  # LFS files
    git_oid: str | None = None  # every file's git blob id


@dataclass(frozen=True)
class PullPlan:
    """Exactly what to fetch: repo, the commit its revision points at, and the files."""

    repo_id: str
    revision: str  # what was asked for: "main", an EXL branch like "4.0bpw"
    commit: str  # the commit `revision` resolved to when planning
    files: tuple[RemoteFile, ...]
    format: ModelFormat
    quant: str | None = None
    catalog_id: str | None = None
    entry_file: str | None = None  # the GGUF to load (shard 1); None: the snapshot folder is the model

    @property
    def total_bytes(self) -> int:
        """Sum of the file sizes (unknown sizes count as 0)."""
        return sum(f.size or 0 for f in self.files)

    @property
    def name(self) -> str:
        """The library name the pulled model will have."""
        if self.format == "gguf":
            return f"{self.repo_id}:{self.quant or self.entry_file}"
        return f"{self.repo_id}:{self.revision}" if self.revision != "main" else self.repo_id


class _Paths(NamedTuple):
    storage: Path
    locks: Path


def pull(
    plan: PullPlan,
    *,
    ctx: HubContext | None = None,
    progress: ProgressCallback | None = None,
    cancel: threading.Event | None = None,
    disk_usage: DiskUsage = shutil.disk_usage,
) -> LocalModel:
    """Download every file of `plan` not yet in the cache; returns the model ready to serve."""
    ctx = ctx or HubContext.from_env()
    folder = repo_folder_name(repo_id=plan.repo_id, repo_type="model")
    where = _Paths(storage=ctx.cache_dir / folder, locks=ctx.cache_dir / ".locks" / folder)
    missing = [f for f in plan.files if not _pointer(where.storage, plan, f).exists()]
    if missing and is_offline():
        raise offline_error(f"HF_HUB_OFFLINE is set, so {plan.name} cannot be downloaded.")
    check_free_space(plan, missing, where.storage, ctx.cache_dir, disk_usage)
    # Every HEAD first: a gated repo or a missing file fails before any progress is shown.
    metadata = {remote.path: file_metadata(plan, remote, ctx) for remote in missing}
    tracker = ProgressTracker(plan.total_bytes, len(plan.files), progress, cancel)
    tracker.start()
    for remote in plan.files:
        fetch_file(plan, remote, metadata.get(remote.path), where, ctx, tracker)
    _write_ref(where.storage, plan.revision, plan.commit)
    tracker.finish()
    snapshot = where.storage / "snapshots" / plan.commit
    path = snapshot / plan.entry_file if plan.entry_file else snapshot
    return LocalModel(path=path, format=plan.format, name=plan.name, quant=plan.quant, catalog_id=plan.catalog_id)


def _pointer(storage: Path, plan: PullPlan, remote: RemoteFile) -> Path:
    return storage.joinpath("snapshots", plan.commit, *remote.path.split("/"))


def _partial_size(storage: Path, remote: RemoteFile) -> int:
    etag = remote.sha256 or remote.git_oid
    partial = storage / "blobs" / f"{etag}.incomplete"
    return partial.stat().st_size if etag and partial.exists() else 0


def check_free_space(
    plan: PullPlan, missing: list[RemoteFile], storage: Path, cache_dir: Path, disk_usage: DiskUsage
) -> None:
    """Raise DiskFullError before starting when the files still to fetch do not fit."""
    needed = sum(max((f.size or 0) - _partial_size(storage, f), 0) for f in missing)
    if not needed:
        return
    probe = cache_dir
    while not probe.exists() and probe != probe.parent:
        probe = probe.parent
    free = int(disk_usage(str(probe)).free)
    if needed > free:
        raise DiskFullError(
            f"Not enough disk space for {plan.name}: it needs {format_bytes(needed)} more and "
            f"{cache_dir} has "
            f"{format_bytes(free)} free. Free up {format_bytes(needed - free)}, or point models_dir in the "
            "settings (or HF_HUB_CACHE) at a bigger disk."
        )


def file_metadata(plan: PullPlan, remote: RemoteFile, ctx: HubContext) -> HfFileMetadata:
    """HEAD /resolve at the planned commit: etag (the blob name), size, download location."""
    url = hf_hub_url(plan.repo_id, remote.path, revision=plan.commit, endpoint=ctx.endpoint)
    try:
        meta = get_hf_file_metadata(url, token=ctx.token, endpoint=ctx.endpoint)
    except HUB_EXCEPTIONS as err:
        raise translate_hub_error(err, plan.repo_id, ctx, file=remote.path) from None
    if not meta.etag:
        raise DownloadError(f"{ctx.endpoint} sent no ETag for {remote.path}; cannot store it safely.")
    return meta


def fetch_file(
    plan: PullPlan,
    remote: RemoteFile,
    meta: HfFileMetadata | None,
    where: _Paths,
    ctx: HubContext,
    tracker: ProgressTracker,
) -> Path:
    """One file into the cache: resumable download, hash check, link (meta: its HEAD answer)."""
    pointer = _pointer(where.storage, plan, remote)
    if pointer.exists():
        tracker.skip_file(remote.path, remote.size or 0)
        return pointer
    meta = meta or file_metadata(plan, remote, ctx)
    assert meta.etag is not None  # checked by file_metadata
    url = hf_hub_url(plan.repo_id, remote.path, revision=plan.commit, endpoint=ctx.endpoint)
    size = meta.size if meta.size is not None else remote.size
    blob = where.storage / "blobs" / meta.etag
    if blob.exists():
        tracker.skip_file(remote.path, size or 0)
    else:
        blob.parent.mkdir(parents=True, exist_ok=True)
        where.locks.mkdir(parents=True, exist_ok=True)
        # The same lock file huggingface_hub takes, so it and we never write one blob at once.
        with WeakFileLock(where.locks / f"{meta.etag}.lock"):
            if blob.exists():
                tracker.skip_file(remote.path, size or 0)
            else:
                source = meta.location if meta.location and meta.location != url else url
                headers = build_hf_headers(token=ctx.token)
                if urlparse(source).netloc != urlparse(url).netloc:
                    headers.pop("authorization", None)  # never send the token to a CDN
                _download_blob(plan, remote, source, headers, size, meta.etag, blob, tracker, ctx)
                tracker.finish_file()
    _link(blob, pointer)
    return pointer


def _download_blob(
    plan: PullPlan,
    remote: RemoteFile,
    url: str,
    headers: dict[str, str],
    size: int | None,
    etag: str,
    blob: Path,
    tracker: ProgressTracker,
    ctx: HubContext,
) -> None:
    partial = blob.with_name(f"{etag}.incomplete")
    already = partial.stat().st_size if partial.exists() else 0
    if size is not None and already > size:  # not ours to trust: start over
        partial.unlink()
        already = 0
    expected_sha256 = remote.sha256 or (etag if _SHA256.match(etag) else None)
    expected_oid = None if expected_sha256 else (remote.git_oid or (etag if _GIT_OID.match(etag) else None))
    if expected_sha256 or size is None:
        hasher = BackgroundHasher.sha256(partial, already)
    else:
        hasher = BackgroundHasher.git_blob(size, partial, already)
    tracker.start_file(remote.path, already_on_disk=already)
    try:
        stream_to_file(url, partial, headers=headers, expected_size=size, hasher=hasher, on_bytes=tracker.advance)
    except OSError as err:
        hasher.abort()
        if err.errno == errno.ENOSPC:
            raise DiskFullError(
                f"The disk filled up while downloading {remote.path}; free some space and run the pull again to resume."
            ) from None
        if isinstance(err, HUB_EXCEPTIONS):
            raise translate_hub_error(err, plan.repo_id, ctx, file=remote.path) from None
        raise DownloadError(f"Downloading {remote.path} failed: {err}. Run the pull again to resume.") from None
    except HUB_EXCEPTIONS as err:
        hasher.abort()
        raise translate_hub_error(err, plan.repo_id, ctx, file=remote.path) from None
    except BaseException:
        hasher.abort()
        raise
    tracker.verifying()
    digest = hasher.hexdigest()
    expected = expected_sha256 or expected_oid
    if expected and digest != expected:
        partial.unlink(missing_ok=True)
        kind = "sha256" if expected_sha256 else "git hash"
        raise ChecksumError(
            f"{remote.path} from {plan.repo_id} is corrupted: its {kind} is {digest[:16]}… but the Hub says "
            f"{expected[:16]}…. The bad file was deleted; run the pull again."
        )
    os.replace(partial, blob)


def _link(blob: Path, pointer: Path) -> None:
    """snapshots/<commit>/<path> -> ../../blobs/<etag>, relative like huggingface_hub's links."""
    pointer.parent.mkdir(parents=True, exist_ok=True)
    if pointer.is_symlink() or pointer.exists():
        return
    relative = os.path.relpath(blob, pointer.parent)
    try:
        os.symlink(relative, pointer)
    except OSError:  # no symlinks (Windows without developer mode): a hard link still shares the bytes
        try:
            os.link(blob, pointer)
        except OSError:
            shutil.copy2(blob, pointer)


def _write_ref(storage: Path, revision: str, commit: str) -> None:
    """refs/<branch> holds the commit, as huggingface_hub writes it (nothing for a commit revision)."""
    if revision == commit:
        return
    ref = storage.joinpath("refs", *revision.split("/"))
    ref.parent.mkdir(parents=True, exist_ok=True)
    if not ref.exists() or ref.read_text() != commit:
        ref.write_text(commit)


@dataclass(frozen=True)
class PartialDownload:
    """An interrupted download kept for resuming (ours, or another HF tool's leftover)."""

    repo_id: str
    path: Path
    size_bytes: int


def partial_downloads(cache_dir: Path | None = None) -> list[PartialDownload]:
    """`blobs/*.incomplete` files in the cache, as huggingface_hub's scan reports them."""
    cache_dir = cache_dir or models_cache_dir()
    try:
        info = scan_cache_dir(cache_dir)
    except CacheNotFound:
        return []
    found = []
    for item in info.incomplete_files:
        folder = item.file_path.parent.parent.name  # models--owner--name
        kind, _, name = folder.partition("--")
        if kind == "models":
            found.append(PartialDownload(name.replace("--", "/"), item.file_path, item.size_on_disk))
    return sorted(found, key=lambda p: (p.repo_id, p.path.name))


def discard_partial_downloads(repo_id: str | None = None, cache_dir: Path | None = None) -> int:
    """Delete partial downloads (of one repo, or all); returns the bytes freed."""
    freed = 0
    for partial in partial_downloads(cache_dir):
        if repo_id is None or partial.repo_id == repo_id:
            partial.path.unlink(missing_ok=True)
            freed += partial.size_bytes
    return freed
