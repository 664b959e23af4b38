"""Which local-library models a server loads by name on request (`launcher serve`, unless `--no-library`).

The library holds every model on disk, the starter among them, so the file a server already serves
under another name (MODEL given by path or with `--alias NAME`, a preset's model) is in it too,
under its library name. That name becomes an alias of the served one: a request for it reaches the
model already loaded, and one file never takes its memory twice.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from launcher.catalog.library import LibraryEntry


def file_key(path: Path) -> Path:
    """One key per file on disk, however it was named (a Hugging Face snapshot's link, a relative path)."""
    return path.resolve()


@dataclass(frozen=True)
class LibraryModels:
    """The library's servable models, split by whether the server serves their file already."""

    names: list[str] = field(default_factory=list)  # loadable by these names
    same_files: dict[str, str] = field(default_factory=dict)  # library name -> the name it is served under


def library_models(served_files: dict[Path, str], entries: list[LibraryEntry] | None = None) -> LibraryModels:
    """The library as a server that serves `served_files` (file_key -> name) loads it (`entries`: a scan
    of it already made; None: scan it now)."""
    from launcher.catalog.library import scan_library

    found = LibraryModels()
    for entry in scan_library() if entries is None else entries:
        if not entry.servable:
            continue
        served_as = served_files.get(file_key(entry.model.path))
        if served_as is None:
            found.names.append(entry.name)
        elif served_as != entry.name:
            found.same_files[entry.name] = served_as
    return found
