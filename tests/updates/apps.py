"""Stand-ins for built apps in install tests: folders and files whose `launcher` program really runs.

The updater's smoke check runs the new build's `launcher --version` and wants `launcher <version>`
back; a small shell script that prints exactly that (or something else, or fails) stands for the
frozen program at this seam. The real frozen app goes through the same code in
scripts/check-frozen-update.
"""

from __future__ import annotations

import io
import subprocess
import tarfile
from pathlib import Path

from launcher.updates.current import Installation

PLATFORM = "linux-x86_64"


def program(version: str, *, says: str | None = None, exit_code: int = 0) -> bytes:
    """A `launcher` program that answers `--version` with `launcher <version>` (or `says`) and `exit_code`."""
    line = says if says is not None else f"launcher {version}"
    return f"#!/bin/sh\necho '{line}'\nexit {exit_code}\n".encode()


def app_folder(folder: Path, version: str) -> Path:
    """An unpacked tar.gz app of `version`: its program and a library beside it."""
    (folder / "_internal").mkdir(parents=True)
    (folder / "launcher").write_bytes(program(version))
    (folder / "launcher").chmod(0o755)
    (folder / "_internal" / "libpython.so").write_text(f"library of {version}\n")
    return folder


def version_of(program_path: Path) -> str:
    """What `program --version` prints."""
    return subprocess.run(
        [str(program_path), "--version"], capture_output=True, text=True, check=True, timeout=30
    ).stdout.strip()


def installation(kind: str, target: Path) -> Installation:
    """The installation of `kind` at `target`, able to replace itself."""
    return Installation(kind, PLATFORM, target, True, f"the update replaces {target}")  # type: ignore[arg-type]


def add_file(tar: tarfile.TarFile, name: str, data: bytes, mode: int = 0o644) -> None:
    """A regular file member."""
    info = tarfile.TarInfo(name)
    info.size, info.mode = len(data), mode
    tar.addfile(info, io.BytesIO(data))


def add_link(tar: tarfile.TarFile, name: str, target: str, *, hard: bool = False) -> None:
    """A symbolic (or hard) link member."""
    info = tarfile.TarInfo(name)
    info.type = tarfile.LNKTYPE if hard else tarfile.SYMTYPE
    info.linkname = target
    tar.addfile(info)


def release_tarball(path: Path, version: str, *, top: str | None = None, says: str | None = None) -> Path:
    """The release tarball of `version` as scripts/build-app lays it out: one folder holding the program,
    `_internal/` (with a link inside it, as PyInstaller's bundles have) and the menu entry."""
    top = top or f"launcher-{version}"
    with tarfile.open(path, "w:gz") as tar:
        add_file(tar, f"{top}/launcher", program(version, says=says), 0o755)
        add_file(tar, f"{top}/_internal/libpython3.11.so.1.0", f"library of {version}\n".encode())
        add_link(tar, f"{top}/_internal/libpython3.11.so", "libpython3.11.so.1.0")
        add_file(tar, f"{top}/share/applications/launcher.desktop", b"[Desktop Entry]\n")
    return path
