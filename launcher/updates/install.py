"""Installing a downloaded, verified release over the running installation.

Each installation is replaced in the shape the user installed it (`launcher.updates.current`):

- tar.gz (Linux, the unpacked folder): the archive is unpacked beside the app folder (same
  filesystem, so the swap is two renames), every member checked first: one top folder, nothing
  absolute, no `..`, no link pointing out of the folder, no device. The new program must answer
  `launcher --version` with the release's version (the smoke check) before anything is touched;
  then the old folder becomes `<folder>.old-<old version>` (another free name when that one is
  taken: nothing the update did not make is ever replaced) and the new one takes its name. If that
  second rename fails the old folder is renamed back.
- appimage: the new AppImage is copied beside the old one, made executable, smoke-checked and
  renamed over it (`os.replace`: the old file stays readable by the running app until it exits).
- dmg (macOS): the disk image is attached read-only, the .app inside copied beside the installed
  one with `ditto` (which keeps the code signature), the image detached, the copy smoke-checked,
  and the bundles swapped as the tar.gz folders are.
- setup (Windows): the new Inno Setup installer runs detached and silently (no admin: the install
  is per-user); it closes the app, replaces its files and starts the new version
  (`/RESTARTAPP=1`, an entry of packaging/windows/launcher.iss). The caller quits at once.
- deb: apt owns the files, so nothing is replaced here: the error says the apt command to run.

A failure at any step raises UpdateError and leaves the old version in place and working. The old
folder or bundle stays until the new version has started: `finish_pending_update()`, called early by
every start of the app and the CLI, removes the copies no running process uses any more. It removes
only what an update made: every folder the updater creates beside the installation (the staging
copy, the old version moved aside) carries a marker file (`UPDATE_MARKER`) naming the folder it was
written into, and a sibling without it (the user's own `launcher.old-backup`) is never touched.

Once the old folder is renamed, the running (old) program must not import anything new: a frozen
app reads its modules from its executable by path, and that path now holds the new version. Callers
import what they need after the install before calling `install`.
"""

from __future__ import annotations

import contextlib
import errno
import json
import os
import posixpath
import shlex
import shutil
import subprocess
import sys
import tarfile
import tempfile
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path, PurePosixPath
from typing import TYPE_CHECKING

import psutil

from launcher.core import paths
from launcher.core.child_process import PARENT_PID_ENV, WINDOWS_NEW_PROCESS_GROUP
from launcher.core.errors import LauncherError, UpdateError
from launcher.updates.current import Installation, current_version, detect_installation

if TYPE_CHECKING:
    from launcher.updates.feed import PackFile

SMOKE_TIMEOUT_S = 60.0
"""How long the new program may take to answer `--version` (a cold start of a frozen app on a slow disk)."""
OLD_MARK = ".old-"
"""`<folder>.old-<version>`: the previous version, kept until the new one has started."""
NEW_MARK = ".new-"
"""`.<folder>.new-XXXX`: the new version while it is unpacked and checked (hidden, beside the target)."""
STALE_STAGING_S = 3600.0
"""A staging copy older than this belongs to an update that died; a younger one may be in progress."""
UPDATE_MARKER = ".launcher-update"
"""The file the updater writes into each folder it creates beside the installation: JSON with the
folder's own name, its role ("old": the previous version; "staging": a new version being unpacked),
the versions and the time. `finish_pending_update` removes only folders holding one that names them."""
PYINSTALLER_RESET_ENV = "PYINSTALLER_RESET_ENVIRONMENT"
"""Tells a frozen program's bootloader that it is a new, independent program, not a child of this
frozen one: it must not take over this process's bundle paths."""
SETUP_RESTART_PARAMETER = "/RESTARTAPP=1"
"""Asks the Windows installer to start the app once it is done (packaging/windows/launcher.iss [Run])."""
MAC_PROGRAM = Path("Contents") / "MacOS" / "launcher"
"""The program inside Launcher.app (packaging/launcher.spec)."""
WINDOWS_DETACHED_PROCESS = 0x00000008
"""subprocess.DETACHED_PROCESS, which only Windows' subprocess defines."""


@dataclass(frozen=True)
class InstallResult:
    """What an install did. `restart_argv` runs the new version (its arguments go after it); None when
    nothing is to be started by the caller (the Windows installer starts the app itself)."""

    restart_argv: list[str] | None
    message: str


def install(installation: Installation, downloaded_path: Path, version: str) -> InstallResult:
    """Replace `installation` with the verified release file `downloaded_path` of `version`; raises
    UpdateError (the old version untouched) when it cannot."""
    if installation.kind == "deb":
        raise UpdateError(deb_message(downloaded_path))
    target = installation.target
    if target is None or not installation.can_update:
        raise UpdateError(f"This installation cannot replace itself: {installation.how}.")
    if not downloaded_path.is_file():
        raise UpdateError(f"The downloaded update {downloaded_path} is gone; download it again.")
    if installation.kind == "tar.gz":
        return _install_folder(target, downloaded_path, version)
    if installation.kind == "appimage":
        return _install_appimage(target, downloaded_path, version)
    if installation.kind == "dmg":
        return _install_app_bundle(target, downloaded_path, version)
    if installation.kind == "setup":
        return _run_setup(target, downloaded_path, version)
    raise UpdateError(f"This installation cannot replace itself: {installation.how}.")


def deb_message(package: Path) -> str:
    """What to tell the user of a .deb installation: apt installs the new package (the app never runs sudo)."""
    return (
        "This app was installed from its .deb package, which apt updates. The new package was downloaded "
        f"and verified; install it with:  sudo apt install {shlex.quote(str(package.absolute()))}"
    )


def install_packs(packs: Sequence[tuple[PackFile, Path]]) -> list[str]:
    """Put downloaded, verified GPU packs in place of the installed ones (after the app itself was
    installed: the old app does not load a pack built for the new engine); one line per pack. A pack
    that cannot be put in place leaves the installed one and says so; the app runs without it.

    The pack installer is imported here, not with this module, so `finish_pending_update` at every
    start stays cheap; a caller that installs packs after the app's swap imports it before the swap."""
    # The pack installer's own unpack step: it checks, unpacks and swaps a verified archive into place.
    from launcher.engines.llamacpp.gpu_pack_install import unpack_pack
    from launcher.engines.llamacpp.gpu_packs import PackEntry, packs_dir

    lines = []
    for pack, archive in packs:
        try:
            entry = PackEntry.model_validate(pack.model_dump())
            root = packs_dir()
            root.mkdir(parents=True, exist_ok=True)
            unpack_pack(entry, archive, root)
        except (LauncherError, ValueError, OSError) as err:
            lines.append(f"The {pack.name} GPU pack was not updated ({err}); `launcher gpu-pack install` retries.")
            continue
        with contextlib.suppress(OSError):
            archive.unlink()
        lines.append(f"Updated the {pack.name} GPU pack.")
    return lines


# -- the environment of the new version --------------------------------------------------------------------


def new_version_environment(base: Mapping[str, str] | None = None, *, frozen: bool | None = None) -> dict[str, str]:
    """The environment to start the new version in, from `base` (default: ours).

    When `base` comes from a frozen app (`frozen`, default: this process is one), its library path
    points into that app's bundle (PyInstaller keeps the user's own in LD_LIBRARY_PATH_ORIG): the user's
    is restored. The app's tie to its parent (PARENT_PID_ENV) is dropped: the new process must outlive
    whoever starts it. And the PyInstaller bootloader is told it is an independent program.
    """
    env = dict(os.environ if base is None else base)
    if paths.is_frozen() if frozen is None else frozen:
        original = env.pop("LD_LIBRARY_PATH_ORIG", None)
        if original:
            env["LD_LIBRARY_PATH"] = original
        else:
            env.pop("LD_LIBRARY_PATH", None)
    env.pop(PARENT_PID_ENV, None)
    env[PYINSTALLER_RESET_ENV] = "1"
    return env


def smoke_check(program: Path, version: str, *, timeout: float = SMOKE_TIMEOUT_S) -> None:
    """Raise UpdateError unless `program --version` prints exactly `launcher <version>` and exits 0."""
    try:
        done = subprocess.run(
            [str(program), "--version"],
            stdin=subprocess.DEVNULL,
            capture_output=True,
            text=True,
            errors="replace",
            timeout=timeout,
            env=new_version_environment(),
        )
    except subprocess.TimeoutExpired as err:
        raise UpdateError(
            f"The new version (launcher {version}) did not answer within {timeout:.0f} s; it is not installed "
            "and this version stays."
        ) from err
    except OSError as err:
        raise UpdateError(
            f"The new version (launcher {version}) could not be started ({err}); it is not installed "
            "and this version stays."
        ) from err
    said = done.stdout.strip()
    if done.returncode == 0 and said == f"launcher {version}":
        return
    detail = said.splitlines()[-1] if said else (done.stderr.strip().splitlines() or ["no output"])[-1]
    raise UpdateError(
        f"The new version does not start here (`launcher --version` exited {done.returncode}: {detail[:200]}); "
        f"launcher {version} is not installed and this version stays."
    )


# -- tar.gz: the unpacked folder ---------------------------------------------------------------------------


def _install_folder(folder: Path, archive: Path, version: str) -> InstallResult:
    staging = staging_folder(folder)
    try:
        new = unpack_app_folder(archive, staging)
        if not (new / "launcher").is_file():
            raise UpdateError(f"{archive.name} holds no `launcher` program in its folder; it is not installed.")
        smoke_check(new / "launcher", version)
        old = _swap(folder, new, version)
    finally:
        shutil.rmtree(staging, ignore_errors=True)
    return InstallResult(
        [str(folder / "launcher")],
        f"Installed launcher {version} in {folder}; the previous version stays in {old} until the new one starts.",
    )


def staging_folder(target: Path) -> Path:
    """A new hidden folder beside `target`, marked as the updater's (a dead update's copy is removed later)."""
    try:
        staging = Path(tempfile.mkdtemp(dir=target.parent, prefix=f".{target.name}{NEW_MARK}"))
    except OSError as err:
        raise UpdateError(f"Cannot write beside {target} ({err}); the update is not installed.") from err
    try:
        write_marker(staging, "staging")
    except OSError as err:
        shutil.rmtree(staging, ignore_errors=True)
        raise UpdateError(_disk_problem(err, f"write beside {target}")) from err
    return staging


def write_marker(folder: Path, role: str, **facts: str) -> None:
    """Mark `folder` as made by the updater (`UPDATE_MARKER`); OSError when it cannot be written."""
    record = {"folder": folder.name, "role": role, "at": time.time(), **facts}
    (folder / UPDATE_MARKER).write_text(json.dumps(record) + "\n", encoding="utf-8")


def read_marker(folder: Path) -> dict[str, object] | None:
    """The updater's marker of `folder`, or None when `folder` is not a real folder the updater made:
    no marker, a marker that is a link or unreadable, or one written into a folder of another name
    (a copy the user made of an old version, under a name of their own, is theirs)."""
    try:
        if folder.is_symlink() or not folder.is_dir():
            return None
        marker = folder / UPDATE_MARKER
        if marker.is_symlink() or not marker.is_file():
            return None
        record = json.loads(marker.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    if not isinstance(record, dict) or record.get("folder") != folder.name:
        return None
    return record


def unpack_app_folder(archive: Path, into: Path) -> Path:
    """Unpack the release tarball into the empty folder `into` and return the app folder it holds.

    Every member is checked before a byte is written (`check_members`), and after unpacking every
    link is resolved on disk once more, so a chain of links cannot reach out of the app folder either."""
    try:
        with tarfile.open(archive, "r:gz") as tar:
            members = tar.getmembers()
            top = check_members(members, archive.name)
            if hasattr(tarfile, "data_filter"):  # Python 3.11.4+: the standard checks, on top of ours
                tar.extractall(into, members=members, filter="data")
            else:
                tar.extractall(into, members=members)  # every member was checked above
    except (tarfile.TarError, EOFError) as err:
        raise UpdateError(
            f"The update archive {archive.name} cannot be unpacked ({err}); it is not installed."
        ) from err
    except OSError as err:
        raise UpdateError(_disk_problem(err, f"unpack {archive.name}")) from err
    folder = into / top
    _check_links(folder, archive.name)
    return folder


def check_members(members: Sequence[tarfile.TarInfo], archive_name: str) -> str:
    """The archive's one top folder; UpdateError when a member could land outside it, is not a plain
    file, folder or link, or when the archive holds anything beside that folder."""
    tops: set[str] = set()
    links: set[PurePosixPath] = set()

    def refuse(member: tarfile.TarInfo, why: str) -> UpdateError:
        return UpdateError(f"The update archive {archive_name} is refused: {member.name!r} {why}.")

    for member in members:
        name = PurePosixPath(member.name)
        parts = [part for part in name.parts if part != "."]
        if name.is_absolute() or "\\" in member.name:
            raise refuse(member, "is an absolute path")
        if ".." in parts:
            raise refuse(member, "climbs out of the folder")
        if not parts:
            continue
        path = PurePosixPath(*parts)
        tops.add(parts[0])
        if any(parent in links for parent in path.parents):
            raise refuse(member, "goes through a link")
        if not (member.isfile() or member.isdir() or member.issym() or member.islnk()):
            raise refuse(member, "is not a file, a folder or a link")
        if member.issym():
            if PurePosixPath(member.linkname).is_absolute():
                raise refuse(member, f"links to the absolute path {member.linkname!r}")
            # A relative link resolves against its own folder; it must stay inside the top folder.
            resolved = PurePosixPath(posixpath.normpath(posixpath.join(str(path.parent), member.linkname)))
            # `launcher/x -> ..` resolves to "." (the unpacking folder itself): outside the top folder too.
            if resolved.parts[:1] != (parts[0],):
                raise refuse(member, f"links out of the folder ({member.linkname!r})")
            links.add(path)
        elif member.islnk():
            # A hard link names another member of the archive.
            linked = PurePosixPath(posixpath.normpath(member.linkname))
            if linked.is_absolute() or ".." in linked.parts or linked.parts[:1] != (parts[0],):
                raise refuse(member, f"links out of the folder ({member.linkname!r})")
    if len(tops) != 1:
        raise UpdateError(
            f"The update archive {archive_name} is refused: it should hold one folder, and holds "
            f"{len(tops)} top-level entries."
        )
    return tops.pop()


def _check_links(folder: Path, archive_name: str) -> None:
    if not folder.is_dir() or folder.is_symlink():
        raise UpdateError(f"The update archive {archive_name} is refused: its top entry is not a folder.")
    root = Path(os.path.realpath(folder))
    for path in folder.rglob("*"):
        if path.is_symlink():
            real = Path(os.path.realpath(path))
            if real != root and root not in real.parents:
                raise UpdateError(
                    f"The update archive {archive_name} is refused: {path.relative_to(folder)} links out of the folder."
                )


def _swap(target: Path, new: Path, version: str) -> Path:
    """Rename `target` aside to `<target>.old-<running version>` and `new` (of `version`) into its
    place; on a failure of the second rename the old one is renamed back. Returns where the old one is.

    The old copy is marked as the updater's once it is aside (not before: a file written into the
    running app's folder, or into a signed macOS bundle, would stay there if the rename failed)."""
    old = _free_old_name(target)
    try:
        os.rename(target, old)
    except OSError as err:
        raise UpdateError(
            f"Cannot move {target} aside ({err}); the update is not installed and this version stays."
        ) from err
    # Unmarked (the write failed), the old copy is never removed by the updater and the user may delete
    # it by hand: not a reason to stop, the new version is checked and ready.
    with contextlib.suppress(OSError):
        write_marker(old, "old", version=current_version(), replaced_by=version)
    try:
        os.rename(new, target)
    except OSError as err:
        try:
            os.rename(old, target)
        except OSError as back:
            raise UpdateError(
                f"The new version could not be put in place ({err}), and the old one could not be moved back "
                f"({back}): rename {old} to {target} to start it again."
            ) from err
        raise UpdateError(
            f"The new version could not be put in place ({err}); the update is not installed and this version stays."
        ) from err
    return old


def _free_old_name(target: Path) -> Path:
    """`<target>.old-<version>`, or `<target>.old-<version>-2`, `-3`, ... when that is taken: what is
    there already (an earlier update's copy not yet removed, or anything of the user's) stays as it is."""
    old = target.with_name(f"{target.name}{OLD_MARK}{current_version()}")
    number = 1
    base = old
    while os.path.lexists(old):
        number += 1
        old = base.with_name(f"{base.name}-{number}")
    return old


def _disk_problem(err: OSError, doing: str) -> str:
    if err.errno == errno.ENOSPC:
        return f"The disk is full: could not {doing}; the update is not installed and this version stays."
    return f"Could not {doing} ({err}); the update is not installed and this version stays."


# -- appimage ----------------------------------------------------------------------------------------------


def _install_appimage(appimage: Path, downloaded: Path, version: str) -> InstallResult:
    # The copy waits in a marked staging folder beside the AppImage (same filesystem: the replace is a rename).
    staging = staging_folder(appimage)
    new = staging / appimage.name
    try:
        try:
            shutil.copyfile(downloaded, new)
            new.chmod(0o755)
        except OSError as err:
            raise UpdateError(_disk_problem(err, f"copy the new AppImage beside {appimage}")) from err
        smoke_check(new, version)
        try:
            os.replace(new, appimage)
        except OSError as err:
            raise UpdateError(
                f"Cannot replace {appimage} ({err}); the update is not installed and this version stays."
            ) from err
    finally:
        shutil.rmtree(staging, ignore_errors=True)
    return InstallResult([str(appimage)], f"Installed launcher {version} in {appimage}.")


# -- dmg: the macOS app bundle ------------------------------------------------------------------------------


def attach_command(dmg: Path, mount: Path) -> list[str]:
    """Open the disk image read-only at `mount`, without showing it in the Finder."""
    return ["hdiutil", "attach", "-nobrowse", "-readonly", "-noautoopen", "-mountpoint", str(mount), str(dmg)]


def detach_command(mount: Path, *, force: bool = False) -> list[str]:
    """Close the disk image mounted at `mount`."""
    return ["hdiutil", "detach", str(mount), "-quiet", *(["-force"] if force else [])]


def copy_bundle_command(source: Path, destination: Path) -> list[str]:
    """Copy an .app bundle as the Finder would: links, extended attributes and the code signature kept."""
    return ["ditto", str(source), str(destination)]


def _install_app_bundle(bundle: Path, dmg: Path, version: str) -> InstallResult:
    staging = staging_folder(bundle)
    try:
        new = staging / bundle.name
        _copy_from_image(dmg, new)
        smoke_check(new / MAC_PROGRAM, version)
        old = _swap(bundle, new, version)
    finally:
        shutil.rmtree(staging, ignore_errors=True)
    return InstallResult(
        [str(bundle / MAC_PROGRAM)],
        f"Installed launcher {version} as {bundle}; the previous version stays in {old} until the new one starts.",
    )


def _copy_from_image(dmg: Path, destination: Path) -> None:
    """Copy the one .app of the disk image `dmg` to `destination`."""
    mount = Path(tempfile.mkdtemp(prefix="launcher-update-"))
    try:
        _run(attach_command(dmg, mount), f"open the disk image {dmg.name}")
        try:
            apps = sorted(mount.glob("*.app"))
            if len(apps) != 1:
                raise UpdateError(f"The disk image {dmg.name} should hold one .app and holds {len(apps)}.")
            _run(copy_bundle_command(apps[0], destination), f"copy {apps[0].name} out of the disk image")
        finally:
            try:
                _run(detach_command(mount), "close the disk image")
            except UpdateError:
                with contextlib.suppress(UpdateError):
                    _run(detach_command(mount, force=True), "close the disk image")
    finally:
        with contextlib.suppress(OSError):
            mount.rmdir()


def _run(command: list[str], doing: str) -> None:
    try:
        done = subprocess.run(command, stdin=subprocess.DEVNULL, capture_output=True, text=True, timeout=600)
    except (OSError, subprocess.TimeoutExpired) as err:
        raise UpdateError(f"Could not {doing} ({err}); the update is not installed.") from err
    if done.returncode != 0:
        detail = (done.stderr.strip() or done.stdout.strip() or f"exit code {done.returncode}").splitlines()[-1]
        raise UpdateError(f"Could not {doing} ({detail}); the update is not installed.")


# -- setup: the Windows installer -------------------------------------------------------------------------


def setup_command(installer: Path, folder: Path, log: Path) -> list[str]:
    """The Inno Setup installer's command line for an update: silent, no questions, into the same
    folder, closing the running app (and its servers) and starting the new version when done."""
    return [
        str(installer),
        "/VERYSILENT",
        "/SUPPRESSMSGBOXES",
        "/NORESTART",
        "/CLOSEAPPLICATIONS",
        SETUP_RESTART_PARAMETER,
        f"/DIR={folder}",
        f"/LOG={log}",
    ]


def _run_setup(folder: Path, installer: Path, version: str) -> InstallResult:
    if installer.suffix.lower() != ".exe":
        raise UpdateError(f"{installer.name} is not a Windows installer; the update is not installed.")
    log = paths.state_dir() / "logs" / f"update-setup-{version}.log"
    try:
        log.parent.mkdir(parents=True, exist_ok=True)
        # Detached, in a group of its own: it must outlive this app, which it closes.
        subprocess.Popen(
            setup_command(installer, folder, log),
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            close_fds=True,
            env=new_version_environment(),
            creationflags=WINDOWS_DETACHED_PROCESS | WINDOWS_NEW_PROCESS_GROUP if sys.platform == "win32" else 0,
        )
    except OSError as err:
        raise UpdateError(f"The installer could not be started ({err}); the update is not installed.") from err
    return InstallResult(
        None,
        f"The installer of launcher {version} runs now: it closes this app, replaces it and starts the new "
        f"version (its log: {log}).",
    )


# -- after the new version starts ---------------------------------------------------------------------------


def finish_pending_update(installation: Installation | None = None, *, now: float | None = None) -> list[Path]:
    """Remove what an update left beside this installation: the previous version (`<target>.old-*`)
    once no process runs from it, and the staging copies (`.<target>.new-*`) of updates that died.
    Only folders carrying the updater's marker (`read_marker`) are removed; anything else of those
    names is the user's. Called early by every start of the app and the CLI; cheap when there is
    nothing to remove. Returns what was removed."""
    installation = installation or detect_installation()
    target = installation.target
    if target is None or installation.kind not in ("tar.gz", "appimage", "dmg"):
        return []
    now = time.time() if now is None else now
    leftovers = []
    try:
        for old in target.parent.glob(f"{_glob_escape(target.name)}{OLD_MARK}*"):
            marker = read_marker(old)
            if marker is not None and marker.get("role") == "old":
                leftovers.append(old)
        for staging in target.parent.glob(f".{_glob_escape(target.name)}{NEW_MARK}*"):
            marker = read_marker(staging)
            if marker is None or marker.get("role") != "staging":
                continue
            made = marker.get("at")
            if isinstance(made, int | float) and now - made > STALE_STAGING_S:
                leftovers.append(staging)
    except OSError:
        return []
    if not leftovers:
        return []
    busy = _folders_in_use(leftovers)
    removed = []
    for path in leftovers:
        if path in busy:
            continue  # the old version still runs (the update that installed us, a server): next start
        shutil.rmtree(path, ignore_errors=True)
        if not os.path.lexists(path):
            removed.append(path)
    return removed


def _glob_escape(name: str) -> str:
    return "".join(f"[{char}]" if char in "*?[" else char for char in name)


def _folders_in_use(folders: list[Path]) -> set[Path]:
    """The folders among `folders` that a running process's program lies in."""
    roots = {Path(os.path.realpath(folder)): folder for folder in folders}
    busy: set[Path] = set()
    for process in psutil.process_iter(["exe"]):
        exe = process.info.get("exe")
        if not exe:
            continue
        real = Path(os.path.realpath(exe))
        for root, folder in roots.items():
            if real == root or root in real.parents:
                busy.add(folder)
    return busy
