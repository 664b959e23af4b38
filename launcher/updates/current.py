"""What is running: its version, its platform, how it was installed, and what its build trusts.

An update replaces the installation the user has, in the shape they installed it (the Linux
tar.gz folder, the AppImage, the macOS .app, the Windows per-user install), so the first question is
which shape this is. A Debian package is apt's to replace, and a source checkout or a pip install
is updated with git or pip; for those the app says how instead of replacing anything.

The release key and the feed URL are facts of the build (`build_info.json`, written by
scripts/build-app). The feed URL may be overridden with `LAUNCHER_UPDATE_FEED` (a mirror, the
tests); the public key may not: it is what makes an update trustworthy, and an environment
variable is not.
"""

from __future__ import annotations

import os
import platform as platform_module
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

import launcher
from launcher.core import paths

FEED_ENV = "LAUNCHER_UPDATE_FEED"
"""Overrides the build's feed URL (a mirror; the tests' local server)."""
DEB_FOLDER = Path("/opt/launcher")
"""Where the .deb puts the app (scripts/build-app)."""
DPKG_INFO = Path("/var/lib/dpkg/info")
"""dpkg's record of the files each installed package owns."""
DEB_PACKAGE = "launcher"

InstallKind = Literal["tar.gz", "appimage", "deb", "dmg", "setup", "source", "pip"]

_MACHINES = {
    "x86_64": "x86_64",
    "amd64": "x86_64",
    "aarch64": "arm64",
    "arm64": "arm64",
}


def current_version() -> str:
    """The version running now: the build's, in a frozen app; the package's otherwise."""
    if paths.is_frozen():
        version = paths.build_info().get("version")
        if isinstance(version, str) and version:
            return version
    return launcher.__version__


def this_platform() -> str:
    """The feed's platform string for this machine: "linux-x86_64", "linux-arm64", "macos-arm64",
    "windows-x64" (another machine gets a string of the same shape that no release offers)."""
    machine = _MACHINES.get(platform_module.machine().lower(), platform_module.machine().lower())
    if sys.platform == "darwin":
        return f"macos-{machine}"
    if sys.platform == "win32":
        return "windows-x64" if machine == "x86_64" else f"windows-{machine}"
    return f"linux-{machine}"


def update_public_key() -> str | None:
    """The release key this build verifies updates with (base64); None: it has none and installs no update."""
    key = paths.build_info().get("update_public_key")
    return key if isinstance(key, str) and key.strip() else None


def feed_url() -> str | None:
    """Where this build reads the release feed; None when it knows of none."""
    override = os.environ.get(FEED_ENV, "").strip()
    if override:
        return override
    url = paths.build_info().get("update_feed")
    return url if isinstance(url, str) and url.strip() else None


@dataclass(frozen=True)
class Installation:
    """How the running app was installed, and whether it can replace itself."""

    kind: InstallKind
    platform: str
    target: Path | None  # what an update replaces: the app folder, the AppImage, the .app, the install folder
    can_update: bool
    how: str  # one sentence: how this installation is updated


def detect_installation() -> Installation:
    """Which installation is running (see the module docstring)."""
    here = this_platform()
    if not paths.is_frozen():
        checkout = Path(launcher.__file__).resolve().parent.parent
        if (checkout / ".git").exists():
            return Installation("source", here, checkout, False, "this is a source checkout: update it with git pull")
        return Installation("pip", here, None, False, "this was installed with pip: pip install -U launcher")
    executable = Path(sys.executable).resolve()
    if sys.platform == "darwin":
        return _mac_bundle(here, executable)
    if sys.platform == "win32":
        return _windows_install(here, executable.parent)
    appimage = os.environ.get("APPIMAGE", "").strip()
    if appimage:
        return _replaced_in_place("appimage", here, Path(appimage), Path(appimage).parent, "the AppImage")
    folder = executable.parent
    if folder == DEB_FOLDER and _dpkg_owns(folder):
        return Installation("deb", here, folder, False, deb_how())
    # The tar.gz's folder is renamed aside and the new one put beside it, so its parent must be writable.
    return _replaced_in_place("tar.gz", here, folder, folder.parent, "the app folder")


def deb_how(package: str | None = None) -> str:
    """How a .deb installation is updated: apt installs the new package, named `package` when the
    release's file is known (`UpdateOffer.how`), else the file the user downloads."""
    name = f"./{package}" if package else "./<downloaded file>"
    what = package or "the new .deb package"
    return (
        f"this was installed from a .deb package, which apt updates: download {what} from the project's "
        f"releases page (or run `launcher update`, which downloads and verifies it) and install it with "
        f"sudo apt install {name}"
    )


PER_USER_ENV = ("LOCALAPPDATA", "APPDATA", "USERPROFILE")
"""Where a per-user Windows install lies (the installer's default, {autopf} without admin rights, is
%LOCALAPPDATA%\\Programs)."""


def _windows_install(here: str, folder: Path) -> Installation:
    """The Windows setup install in `folder`. The update runs the new installer silently and without
    administrator rights, which can replace a per-user install only: one the user chose to install
    for all users (Program Files) is updated by running the new installer by hand."""
    if _in_user_profile(folder):
        return Installation("setup", here, folder, True, "the new installer replaces this installation")
    return Installation(
        "setup",
        here,
        folder,
        False,
        f"this copy was installed for all users in {folder}, which an update from inside the app cannot replace "
        "(it runs without administrator rights): download the new installer from the project's releases page "
        "and run it",
    )


def _in_user_profile(folder: Path) -> bool:
    def normal(path: str | Path) -> Path:
        return Path(os.path.normcase(os.path.realpath(path)))

    where = normal(folder)
    for name in PER_USER_ENV:
        value = os.environ.get(name, "").strip()
        if value:
            root = normal(value)
            if where == root or root in where.parents:
                return True
    return False


def _replaced_in_place(kind: InstallKind, here: str, target: Path, parent: Path, what: str) -> Installation:
    if not os.access(parent, os.W_OK):
        return Installation(
            kind,
            here,
            target,
            False,
            f"{parent} is not writable by this user, so {what} cannot be replaced; "
            "download the new version from the project's releases page",
        )
    return Installation(kind, here, target, True, f"the update replaces {what} {target}")


def _mac_bundle(here: str, executable: Path) -> Installation:
    # Launcher.app/Contents/MacOS/launcher: the bundle is three levels up.
    bundle = executable.parents[2] if len(executable.parents) > 2 else executable.parent
    if bundle.suffix != ".app":
        return Installation(
            "dmg", here, None, False, f"{executable} is not inside an .app bundle, so the app cannot replace itself"
        )
    return _replaced_in_place("dmg", here, bundle, bundle.parent, "the app")


def _dpkg_owns(folder: Path) -> bool:
    """True when dpkg lists the folder among the launcher package's files (a copy unpacked to
    /opt/launcher by hand is not apt's, and updates like the tar.gz)."""
    for listing in (DPKG_INFO / f"{DEB_PACKAGE}.list", *DPKG_INFO.glob(f"{DEB_PACKAGE}:*.list")):
        try:
            if str(folder) in listing.read_text(encoding="utf-8", errors="replace").splitlines():
                return True
        except OSError:
            continue
    return False
