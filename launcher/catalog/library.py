"""The local library: every model on disk the launcher can serve.

Three sources, listed together:
- the standard Hugging Face cache (any repo, pulled by us or by any other HF tool), read with
  `huggingface_hub.scan_cache_dir`; only complete files are there (partial downloads live as
  `blobs/*.incomplete` and are never linked into a snapshot);
- files or folders the user imported with `launcher models add PATH`, recorded by absolute
  path in `data_dir()/imported.json` and never copied;
- the embedded starter model.
"""

from __future__ import annotations

import json
import os
import tempfile
import time
from collections.abc import Iterable
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any, Literal

from huggingface_hub import CachedRepoInfo, CachedRevisionInfo, scan_cache_dir
from huggingface_hub.errors import CacheNotFound

from launcher.catalog import starter
from launcher.catalog.gguf_meta import GgufMetadata, read_gguf_metadata
from launcher.catalog.local_formats import detect_directory, gguf_quant_from_name, group_gguf_files
from launcher.catalog.schema import Catalog
from launcher.core import paths
from launcher.core.errors import CatalogError, ModelError, ModelFormatError, ModelNotFoundError, in_context
from launcher.core.model_types import Architecture, LocalModel

Source = Literal["hf-cache", "imported", "starter"]


@dataclass(frozen=True)
class LibraryEntry:
    """One model on disk, with what the list view and the advisor need."""

    model: LocalModel
    source: Source
    size_bytes: int
    repo_id: str | None = None
    commit: str | None = None
    refs: tuple[str, ...] = ()
    architecture: Architecture | None = None
    gguf: GgufMetadata | None = None
    problem: str | None = None  # why it cannot be used as it is ("shard 2 of 3 missing")

    @property
    def name(self) -> str:
        """The name `resolve_model` and clients use."""
        return self.model.name

    @property
    def usable(self) -> bool:
        """False when files are missing or unreadable."""
        return self.problem is None

    @property
    def servable(self) -> bool:
        """True when `launcher serve NAME` can run it: usable, or the starter, which serving assembles."""
        return self.usable or self.source == "starter"


def imported_index_file() -> Path:
    """The JSON index of imported models (absolute paths, linked in place)."""
    return paths.data_dir() / "imported.json"


def _load_catalog() -> Catalog | None:
    from launcher.catalog.catalog import default_catalog

    try:
        return default_catalog()
    except CatalogError:
        return None


def scan_library(*, include_starter: bool = True, catalog: Catalog | None = None) -> list[LibraryEntry]:
    """Everything on disk: HF-cache models, imported models, then the starter."""
    catalog = catalog or _load_catalog()
    entries = [*scan_hf_cache(catalog=catalog), *scan_imported()]
    if include_starter:
        entries.append(starter_entry())
    return entries


def scan_hf_cache(cache_dir: Path | None = None, *, catalog: Catalog | None = None) -> list[LibraryEntry]:
    """Models in the Hugging Face cache (one entry per GGUF quant or per safetensors snapshot)."""
    cache_dir = cache_dir or paths.hf_cache_dir()
    try:
        info = scan_cache_dir(cache_dir)
    except CacheNotFound:
        return []
    entries: list[LibraryEntry] = []
    for repo in sorted(info.repos, key=lambda r: r.repo_id.lower()):
        if repo.repo_type != "model":
            continue
        for revision in sorted(repo.revisions, key=lambda r: r.last_modified, reverse=True):
            entries.extend(_revision_entries(repo, revision, catalog))
    return _unique_names(entries)


def _revision_entries(
    repo: CachedRepoInfo, revision: CachedRevisionInfo, catalog: Catalog | None
) -> list[LibraryEntry]:
    files = {_relative(f.file_path, revision.snapshot_path): f for f in revision.files}
    refs = tuple(sorted(revision.refs))
    out: list[LibraryEntry] = []
    for first, group in group_gguf_files(files).items():
        path = revision.snapshot_path / first
        size = sum(files[name].size_on_disk for name in group)
        entry = gguf_entry(path, source="hf-cache", size_bytes=size)
        quant = entry.model.quant or first
        catalog_id = _catalog_id_for_gguf(catalog, repo.repo_id, first)
        model = replace(entry.model, name=f"{repo.repo_id}:{quant}", catalog_id=catalog_id)
        out.append(replace(entry, model=model, repo_id=repo.repo_id, commit=revision.commit_hash, refs=refs))
    if not out:
        size = sum(f.size_on_disk for f in revision.files)
        detected = detect_directory(revision.snapshot_path, size)
        if detected is not None:
            branch = next((ref for ref in refs if ref != "main"), None)
            name = f"{repo.repo_id}:{branch}" if branch else repo.repo_id
            model = LocalModel(
                path=revision.snapshot_path,
                format=detected.format,
                name=name,
                quant=detected.quant or branch,
                catalog_id=_catalog_id_for_repo(catalog, repo.repo_id, branch),
            )
            out.append(
                LibraryEntry(
                    model=model,
                    source="hf-cache",
                    size_bytes=size,
                    repo_id=repo.repo_id,
                    commit=revision.commit_hash,
                    refs=refs,
                    architecture=detected.architecture,
                    problem=None if (revision.snapshot_path / "config.json").exists() else "config.json missing",
                )
            )
    return out


def _relative(path: Path, root: Path) -> str:
    try:
        return path.relative_to(root).as_posix()
    except ValueError:
        return path.name


def gguf_entry(path: Path, *, source: Source, size_bytes: int | None = None, name: str | None = None) -> LibraryEntry:
    """A library entry for a GGUF file (first shard of a split), with its header metadata."""
    problem = None
    meta: GgufMetadata | None = None
    try:
        meta = read_gguf_metadata(path)
        if meta.shards_present < meta.split_count:
            problem = f"only {meta.shards_present} of {meta.split_count} shards are on disk"
    except ModelError as err:
        problem = str(err)
    # The file name's quant first: it is what repos and the catalog call it ("UD-Q4_K_XL"), and
    # it keeps two files of one repo apart when their headers report the same base type.
    quant = gguf_quant_from_name(path.name) or (meta.quant if meta else None)
    size = size_bytes if size_bytes is not None else (meta.file_bytes if meta else _size(path))
    model = LocalModel(path=path, format="gguf", name=name or _display_stem(path), quant=quant)
    architecture = None
    if meta is not None:
        try:
            architecture = meta.to_architecture()
        except ValueError:
            architecture = None
    return LibraryEntry(
        model=model, source=source, size_bytes=size, architecture=architecture, gguf=meta, problem=problem
    )


def _display_stem(path: Path) -> str:
    stem = path.name.removesuffix(".gguf")
    return stem.rsplit("-00001-of-", 1)[0]


def _size(path: Path) -> int:
    try:
        if path.is_dir():
            return sum(p.stat().st_size for p in path.rglob("*") if p.is_file())
        return path.stat().st_size
    except OSError:
        return 0


def _catalog_id_for_gguf(catalog: Catalog | None, repo_id: str, file_name: str) -> str | None:
    for entry in catalog.models if catalog else ():
        source = entry.gguf
        if source and source.repo == repo_id and any(file_name in q.files for q in source.quants.values()):
            return entry.id
    return None


def _catalog_id_for_repo(catalog: Catalog | None, repo_id: str, branch: str | None) -> str | None:
    for entry in catalog.models if catalog else ():
        if any(v.repo == repo_id for v in entry.mlx.values()):
            return entry.id
        for variants in (entry.exl3, entry.exl2):
            if any(v.repo == repo_id and (branch is None or v.revision == branch) for v in variants.values()):
                return entry.id
    return None


def _unique_names(entries: list[LibraryEntry]) -> list[LibraryEntry]:
    """Older snapshots of the same repo get '@<commit>' so every name resolves to one entry."""
    seen: set[str] = set()
    out = []
    for entry in entries:
        name = entry.name
        if name in seen and entry.commit:
            name = f"{name}@{entry.commit[:8]}"
            entry = replace(entry, model=replace(entry.model, name=name))
        seen.add(name)
        out.append(entry)
    return out


# ----------------------------------------------------------------------------- imported models


def _read_index() -> list[dict[str, Any]]:
    try:
        data = json.loads(imported_index_file().read_text(encoding="utf-8"))
    except FileNotFoundError:
        return []
    except (OSError, ValueError) as err:
        raise ModelError(f"The imported-models index {imported_index_file()} is unreadable ({err}).") from err
    items = data.get("models", []) if isinstance(data, dict) else []
    return [item for item in items if isinstance(item, dict) and isinstance(item.get("path"), str)]


def _write_index(items: list[dict[str, Any]]) -> None:
    """Atomic write (temp file + rename) so a crash never loses the index."""
    target = imported_index_file()
    target.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=target.parent, prefix=".imported.", suffix=".tmp")
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as handle:
            json.dump({"models": items}, handle, indent=2)
        os.replace(tmp, target)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def scan_imported() -> list[LibraryEntry]:
    """Models the user imported, in the order they were added."""
    return [_imported_entry(Path(item["path"]), str(item.get("name") or "")) for item in _read_index()]


def _imported_entry(path: Path, name: str) -> LibraryEntry:
    if not path.exists():
        model = LocalModel(path=path, format="gguf" if path.suffix == ".gguf" else "safetensors", name=name)
        return LibraryEntry(model=model, source="imported", size_bytes=0, problem=f"{path} no longer exists")
    if path.is_file():
        return gguf_entry(path, source="imported", name=name)
    detected = detect_directory(path, _size(path))
    ggufs = group_gguf_files(p.name for p in path.glob("*.gguf"))
    if detected is None and len(ggufs) == 1:
        return gguf_entry(path / next(iter(ggufs)), source="imported", name=name)
    if detected is None:
        model = LocalModel(path=path, format="safetensors", name=name)
        problem = "no .gguf or .safetensors model found" if not ggufs else "several GGUF models: add one file"
        return LibraryEntry(model=model, source="imported", size_bytes=_size(path), problem=problem)
    model = LocalModel(path=path, format=detected.format, name=name, quant=detected.quant)
    return LibraryEntry(model=model, source="imported", size_bytes=_size(path), architecture=detected.architecture)


def add_imported(path: str | Path, name: str | None = None) -> LibraryEntry:
    """Register a GGUF file or model folder in place (never copied) and return its entry."""
    resolved = Path(path).expanduser().resolve()
    if not resolved.exists():
        raise ModelNotFoundError(f"{resolved} does not exist.")
    if resolved.is_file() and resolved.suffix != ".gguf":
        raise ModelFormatError(f"{resolved} is not a .gguf file; add a GGUF file or a model folder.")
    entry = _imported_entry(resolved, name or _default_import_name(resolved))
    if entry.problem and not (entry.gguf and "shards" in entry.problem):
        raise ModelFormatError(in_context(f"Cannot add {resolved}", entry.problem, subject=resolved))
    items = _read_index()
    taken = {str(item.get("name")) for item in items if item["path"] != str(resolved)}
    if entry.name in taken:
        raise ModelError(f"A model named {entry.name!r} is already imported; pass --name to choose another.")
    items = [item for item in items if item["path"] != str(resolved)]
    items.append({"path": str(resolved), "name": entry.name, "added": int(time.time())})
    _write_index(items)
    return entry


def _default_import_name(path: Path) -> str:
    return _display_stem(path) if path.is_file() else path.name


def remove_imported(name_or_path: str) -> bool:
    """Forget an imported model (the user's file is left untouched). True if one was removed."""
    items = _read_index()
    target = str(Path(name_or_path).expanduser().resolve()) if os.sep in name_or_path else None
    kept = [item for item in items if item.get("name") != name_or_path and item["path"] != target]
    if len(kept) == len(items):
        return False
    _write_index(kept)
    return True


# ----------------------------------------------------------------------------- starter


def starter_entry() -> LibraryEntry:
    """The embedded starter (listed even before its first assembly, which happens on first use)."""
    name = starter.starter_name()
    path = starter.starter_path()
    if not path.is_file():
        model = LocalModel(path=path, format="gguf", name=name, quant=starter.STARTER_QUANT, catalog_id=name)
        return LibraryEntry(model=model, source="starter", size_bytes=0, problem="assembled on first use")
    entry = gguf_entry(path, source="starter", name=name)
    return replace(entry, model=replace(entry.model, catalog_id=name))


# ----------------------------------------------------------------------------- lookups and removal


def find_entry(name: str, entries: Iterable[LibraryEntry] | None = None) -> LibraryEntry | None:
    """The entry called `name`; a repo id or catalog id also matches when it names one entry only."""
    entries = list(entries if entries is not None else scan_library())
    exact = [e for e in entries if e.name == name]
    if exact:
        return exact[0]
    for key in ("repo_id", "catalog_id"):
        matches = [e for e in entries if (e.repo_id if key == "repo_id" else e.model.catalog_id) == name]
        usable = [e for e in matches if e.usable]
        if len(usable) == 1 or (usable and key == "catalog_id"):
            return usable[0]
    return None


def delete_hf_entry(entry: LibraryEntry) -> int:
    """Delete a cached snapshot with huggingface_hub's own strategy; returns bytes freed.

    For a GGUF repo holding several quants in one snapshot, only this quant's files are removed
    (blobs still used by another snapshot are kept).
    """
    if entry.source != "hf-cache" or not entry.commit:
        raise ModelError(f"{entry.name} is not in the Hugging Face cache.")
    info = scan_cache_dir(paths.hf_cache_dir())
    siblings = [e for e in scan_hf_cache(catalog=None) if e.commit == entry.commit]
    if entry.model.format != "gguf" or len(siblings) <= 1:
        strategy = info.delete_revisions(entry.commit)
        freed = strategy.expected_freed_size
        strategy.execute()
        return freed
    return _delete_gguf_files(entry, info)


def _delete_gguf_files(entry: LibraryEntry, info: Any) -> int:
    from launcher.catalog.gguf_meta import shard_paths

    doomed = set(shard_paths(entry.model.path))
    revision = next(rev for repo in info.repos for rev in repo.revisions if rev.commit_hash == entry.commit)
    other_blobs = {
        f.blob_path for repo in info.repos for rev in repo.revisions for f in rev.files if f.file_path not in doomed
    }
    freed = 0
    for file in revision.files:
        if file.file_path not in doomed:
            continue
        file.file_path.unlink(missing_ok=True)
        if file.blob_path not in other_blobs and file.blob_path.exists():
            freed += file.size_on_disk
            file.blob_path.unlink()
    return freed
