"""Installing a verified release: the tar.gz folder swap, the AppImage, the macOS bundle's steps, the
Windows installer's command line, the .deb's apt message, and the cleanup once the new version runs.

The app folders are real folders whose `launcher` program really runs (tests/updates/apps.py), so the
smoke check, the renames and the rollbacks happen as they do for a built app."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import tarfile
from pathlib import Path

import pytest

from launcher.core.child_process import PARENT_PID_ENV
from launcher.core.errors import UpdateError
from launcher.updates.current import Installation
from launcher.updates.feed import PackFile
from launcher.updates.install import (
    PYINSTALLER_RESET_ENV,
    UPDATE_MARKER,
    attach_command,
    check_members,
    copy_bundle_command,
    detach_command,
    finish_pending_update,
    install,
    install_packs,
    new_version_environment,
    read_marker,
    setup_command,
    staging_folder,
)
from tests.updates.apps import (
    PLATFORM,
    add_file,
    add_link,
    app_folder,
    installation,
    program,
    release_tarball,
    version_of,
)

OLD, NEW = "0.1.0", "0.2.0"  # OLD is the running version (launcher.__version__ from source)


def entries(folder: Path) -> list[str]:
    return sorted(path.name for path in folder.iterdir())


@pytest.fixture
def apps(tmp_path: Path) -> Path:
    """The folder the user unpacked the app into, holding the 0.1.0 app folder `launcher`."""
    app_folder(tmp_path / "apps" / "launcher", OLD)
    return tmp_path / "apps"


# -- tar.gz -------------------------------------------------------------------------------------------


def test_a_good_release_replaces_the_folder_and_keeps_the_old_one_until_the_new_one_starts(
    apps: Path, tmp_path: Path
) -> None:
    folder = apps / "launcher"
    tarball = release_tarball(tmp_path / f"launcher-{NEW}-{PLATFORM}.tar.gz", NEW)

    result = install(installation("tar.gz", folder), tarball, NEW)

    assert result.restart_argv == [str(folder / "launcher")]
    assert version_of(folder / "launcher") == f"launcher {NEW}"
    assert (folder / "_internal" / "libpython3.11.so").resolve() == folder / "_internal" / "libpython3.11.so.1.0"
    old = apps / f"launcher.old-{OLD}"
    assert version_of(old / "launcher") == f"launcher {OLD}"
    assert str(old) in result.message
    assert entries(apps) == ["launcher", f"launcher.old-{OLD}"]  # no staging folder left

    assert finish_pending_update(installation("tar.gz", folder)) == [old]
    assert entries(apps) == ["launcher"]
    assert version_of(folder / "launcher") == f"launcher {NEW}"


def test_the_old_copy_stays_while_a_process_still_runs_from_it(apps: Path, tmp_path: Path) -> None:
    folder = apps / "launcher"
    install(installation("tar.gz", folder), release_tarball(tmp_path / "r.tar.gz", NEW), NEW)
    old = apps / f"launcher.old-{OLD}"
    sleeper = old / "sleep"
    shutil.copy2(shutil.which("sleep") or "/bin/sleep", sleeper)
    process = subprocess.Popen([str(sleeper), "30"])
    try:
        assert finish_pending_update(installation("tar.gz", folder)) == []
        assert old.is_dir()
    finally:
        process.kill()
        process.wait()
    assert finish_pending_update(installation("tar.gz", folder)) == [old]


def test_a_dead_updatesstaging_folder_is_removed_only_once_it_is_old(apps: Path) -> None:
    folder = apps / "launcher"
    staging = staging_folder(folder)  # as an update makes it: hidden, beside the app, marked
    assert staging.name.startswith(".launcher.new-")
    marker = read_marker(staging)
    assert marker is not None and marker["role"] == "staging"
    made = float(marker["at"])  # type: ignore[arg-type]
    assert finish_pending_update(installation("tar.gz", folder), now=made + 60) == []
    assert finish_pending_update(installation("tar.gz", folder), now=made + 7200) == [staging]


def test_only_what_an_update_made_is_removed_never_the_users_own_folders(apps: Path, tmp_path: Path) -> None:
    folder = apps / "launcher"
    backup = app_folder(apps / "launcher.old-my-backup", OLD)  # the user's own copy
    (backup / "precious.txt").write_text("data")
    hidden = apps / ".launcher.new-mine"  # named like a staging folder, but not the updater's
    hidden.mkdir()
    install(installation("tar.gz", folder), release_tarball(tmp_path / "r.tar.gz", NEW), NEW)
    old = apps / f"launcher.old-{OLD}"
    marker = read_marker(old)
    assert marker is not None and (marker["role"], marker["version"], marker["replaced_by"]) == ("old", OLD, NEW)
    # The user copies the old version under a name of their own: the marker inside names another folder.
    shutil.copytree(old, apps / "launcher.old-kept", symlinks=True)
    # A marker that is a link to one of the updater's is not the updater's either.
    linked = apps / "launcher.old-linked"
    linked.mkdir()
    (linked / UPDATE_MARKER).symlink_to(old / UPDATE_MARKER)

    assert finish_pending_update(installation("tar.gz", folder), now=1e12) == [old]

    assert entries(apps) == [
        ".launcher.new-mine",
        "launcher",
        "launcher.old-kept",
        "launcher.old-linked",
        "launcher.old-my-backup",
    ]
    assert (backup / "precious.txt").read_text() == "data"
    assert version_of(folder / "launcher") == f"launcher {NEW}"


@pytest.mark.parametrize(
    ("says", "exit_code"),
    [("launcher 0.1.9", 0), (f"launcher {NEW}", 3), ("Traceback (most recent call last):", 1)],
    ids=["another version", "exits non-zero", "crashes"],
)
def test_a_build_that_fails_its_smoke_check_is_refused_and_the_old_folder_is_untouched(
    apps: Path, tmp_path: Path, says: str, exit_code: int
) -> None:
    folder = apps / "launcher"
    tarball = tmp_path / "broken.tar.gz"
    with tarfile.open(tarball, "w:gz") as tar:
        add_file(tar, f"launcher-{NEW}/launcher", program(NEW, says=says, exit_code=exit_code), 0o755)

    with pytest.raises(UpdateError, match=r"does not start here.*this version stays"):
        install(installation("tar.gz", folder), tarball, NEW)

    assert entries(apps) == ["launcher"]
    assert version_of(folder / "launcher") == f"launcher {OLD}"
    assert (folder / "_internal" / "libpython.so").read_text() == f"library of {OLD}\n"


def _escaping(tar: tarfile.TarFile, kind: str) -> None:
    top = f"launcher-{NEW}"
    add_file(tar, f"{top}/launcher", program(NEW), 0o755)
    if kind == "dot-dot":
        add_file(tar, f"{top}/../../escaped", b"x")
    elif kind == "absolute":
        add_file(tar, "/tmp/launcher-update-escaped", b"x")
    elif kind == "symlink out":
        add_link(tar, f"{top}/_internal/evil", "../../escaped")
    elif kind == "absolute symlink":
        add_link(tar, f"{top}/_internal/evil", "/etc/passwd")
    elif kind == "symlink to a sibling":
        add_link(tar, f"{top}/evil", "../sibling")  # inside the unpacking folder, outside the app's
    elif kind == "write through a link":
        add_link(tar, f"{top}/up", ".")
        add_file(tar, f"{top}/up/launcher", b"x")
    elif kind == "chained links":
        add_link(tar, f"{top}/here", ".")
        add_link(tar, f"{top}/evil", "here/../escaped")  # `here/..` reads as inside; it is the parent
    elif kind == "hard link out":
        add_link(tar, f"{top}/evil", "../escaped", hard=True)
    elif kind == "symlink to the unpacking folder":
        add_link(tar, f"{top}/x", "..")  # resolves to ".": no top folder to compare with
    elif kind == "device":
        info = tarfile.TarInfo(f"{top}/null")
        info.type, info.devmajor, info.devminor = tarfile.CHRTYPE, 1, 3
        tar.addfile(info)
    elif kind == "two folders":
        add_file(tar, "other/file", b"x")


@pytest.mark.parametrize(
    "kind",
    [
        "dot-dot",
        "absolute",
        "symlink out",
        "absolute symlink",
        "symlink to a sibling",
        "write through a link",
        "chained links",
        "hard link out",
        "symlink to the unpacking folder",
        "device",
        "two folders",
    ],
)
def test_an_archive_with_a_member_escaping_the_folder_is_refused(apps: Path, tmp_path: Path, kind: str) -> None:
    folder = apps / "launcher"
    tarball = tmp_path / "evil.tar.gz"
    with tarfile.open(tarball, "w:gz") as tar:
        _escaping(tar, kind)

    with pytest.raises(UpdateError, match="is refused"):
        install(installation("tar.gz", folder), tarball, NEW)

    assert entries(apps) == ["launcher"]  # nothing beside it, no staging left
    assert version_of(folder / "launcher") == f"launcher {OLD}"
    assert not (tmp_path / "escaped").exists() and not Path("/tmp/launcher-update-escaped").exists()


def test_a_link_to_the_unpacking_folder_itself_is_refused_not_a_crash() -> None:
    top = tarfile.TarInfo("launcher")
    top.type = tarfile.DIRTYPE
    link = tarfile.TarInfo("launcher/x")
    link.type, link.linkname = tarfile.SYMTYPE, ".."
    with pytest.raises(UpdateError, match=r"'launcher/x' links out of the folder \('\.\.'\)"):
        check_members([top, link], "a.tar.gz")
    inside = tarfile.TarInfo("launcher/here")
    inside.type, inside.linkname = tarfile.SYMTYPE, "."
    assert check_members([top, inside], "a.tar.gz") == "launcher"


def test_an_archive_that_is_not_one_or_holds_no_program_is_refused(apps: Path, tmp_path: Path) -> None:
    folder = apps / "launcher"
    garbage = tmp_path / "garbage.tar.gz"
    garbage.write_bytes(b"not a tarball at all")
    with pytest.raises(UpdateError, match="cannot be unpacked"):
        install(installation("tar.gz", folder), garbage, NEW)
    empty = tmp_path / "empty.tar.gz"
    with tarfile.open(empty, "w:gz") as tar:
        add_file(tar, f"launcher-{NEW}/README", b"x")
    with pytest.raises(UpdateError, match="no `launcher` program"):
        install(installation("tar.gz", folder), empty, NEW)
    assert entries(apps) == ["launcher"]


def test_a_failure_mid_swap_renames_the_old_folder_back(
    apps: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    folder = apps / "launcher"
    tarball = release_tarball(tmp_path / "r.tar.gz", NEW)
    rename = os.rename

    def new_cannot_move_in(source: str | Path, destination: str | Path) -> None:
        if Path(destination) == folder and ".new-" in str(source):
            raise OSError(16, "Device or resource busy")
        rename(source, destination)

    monkeypatch.setattr(os, "rename", new_cannot_move_in)
    with pytest.raises(UpdateError, match=r"could not be put in place.*this version stays"):
        install(installation("tar.gz", folder), tarball, NEW)

    assert entries(apps) == ["launcher"]
    assert version_of(folder / "launcher") == f"launcher {OLD}"


def test_when_even_the_rollback_fails_the_message_says_where_the_old_version_is(
    apps: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    folder = apps / "launcher"
    rename = os.rename

    def nothing_moves_back(source: str | Path, destination: str | Path) -> None:
        if Path(destination) == folder:
            raise OSError(5, "Input/output error")
        rename(source, destination)

    monkeypatch.setattr(os, "rename", nothing_moves_back)
    with pytest.raises(UpdateError, match=re.escape(f"rename {apps}/launcher.old-{OLD} to {folder}")):
        install(installation("tar.gz", folder), release_tarball(tmp_path / "r.tar.gz", NEW), NEW)


def test_a_folder_that_cannot_be_moved_aside_stays(apps: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    folder = apps / "launcher"
    rename = os.rename

    def old_is_busy(source: str | Path, destination: str | Path) -> None:
        if Path(source) == folder:
            raise OSError(13, "Permission denied")
        rename(source, destination)

    monkeypatch.setattr(os, "rename", old_is_busy)
    with pytest.raises(UpdateError, match=r"Cannot move .* aside"):
        install(installation("tar.gz", folder), release_tarball(tmp_path / "r.tar.gz", NEW), NEW)
    assert entries(apps) == ["launcher"]


def test_a_taken_old_name_is_left_as_it_is_and_another_name_is_used(apps: Path, tmp_path: Path) -> None:
    folder = apps / "launcher"
    taken = app_folder(apps / f"launcher.old-{OLD}", "0.0.9")  # not the updater's: no marker
    result = install(installation("tar.gz", folder), release_tarball(tmp_path / "r.tar.gz", NEW), NEW)
    old = apps / f"launcher.old-{OLD}-2"
    assert version_of(taken / "launcher") == "launcher 0.0.9"  # untouched
    assert version_of(old / "launcher") == f"launcher {OLD}"
    assert str(old) in result.message
    assert finish_pending_update(installation("tar.gz", folder)) == [old]
    assert entries(apps) == ["launcher", f"launcher.old-{OLD}"]


# -- AppImage ------------------------------------------------------------------------------------------


def test_an_appimage_is_replaced_in_place_after_its_smoke_check(tmp_path: Path) -> None:
    appimage = tmp_path / "Applications" / "Launcher-x86_64.AppImage"
    appimage.parent.mkdir()
    appimage.write_bytes(program(OLD))
    appimage.chmod(0o755)
    downloaded = tmp_path / "Launcher-0.2.0-x86_64.AppImage"
    downloaded.write_bytes(program(NEW))  # downloads are not executable

    result = install(installation("appimage", appimage), downloaded, NEW)

    assert result.restart_argv == [str(appimage)]
    assert version_of(appimage) == f"launcher {NEW}"
    assert appimage.stat().st_mode & 0o777 == 0o755
    assert entries(appimage.parent) == [appimage.name]  # the staging folder is gone


def test_an_appimage_that_fails_its_smoke_check_leaves_the_old_one(tmp_path: Path) -> None:
    appimage = tmp_path / "Launcher.AppImage"
    appimage.write_bytes(program(OLD))
    appimage.chmod(0o755)
    downloaded = tmp_path / "downloads" / "new.AppImage"
    downloaded.parent.mkdir()
    downloaded.write_bytes(program(NEW, says="launcher 0.1.0"))

    with pytest.raises(UpdateError, match="does not start here"):
        install(installation("appimage", appimage), downloaded, NEW)
    assert version_of(appimage) == f"launcher {OLD}"
    assert entries(tmp_path) == ["Launcher.AppImage", "downloads"]


# -- .deb, source, pip ---------------------------------------------------------------------------------


def test_a_deb_installation_is_told_the_apt_command(tmp_path: Path) -> None:
    package = tmp_path / "launcher_0.2.0_amd64.deb"
    package.write_bytes(b"!<arch>\n")
    deb = Installation("deb", PLATFORM, Path("/opt/launcher"), False, "apt updates it")
    with pytest.raises(UpdateError, match=f"sudo apt install {package}$"):
        install(deb, package, NEW)


@pytest.mark.parametrize("kind", ["source", "pip"])
def test_a_source_or_pip_installation_is_not_replaced(tmp_path: Path, kind: str) -> None:
    how = "this is a source checkout: update it with git pull"
    with pytest.raises(UpdateError, match="git pull"):
        install(Installation(kind, PLATFORM, tmp_path, False, how), tmp_path / "x.tar.gz", NEW)  # type: ignore[arg-type]


def test_a_missing_download_is_refused(apps: Path, tmp_path: Path) -> None:
    with pytest.raises(UpdateError, match="is gone"):
        install(installation("tar.gz", apps / "launcher"), tmp_path / "nothing.tar.gz", NEW)


# -- macOS: the disk image and the bundle ---------------------------------------------------------------


def test_the_disk_image_commands_open_it_read_only_and_hidden_and_keep_the_signature(tmp_path: Path) -> None:
    dmg, mount = tmp_path / "launcher-0.2.0-macos-arm64.dmg", tmp_path / "mount"
    assert attach_command(dmg, mount) == [
        "hdiutil", "attach", "-nobrowse", "-readonly", "-noautoopen", "-mountpoint", str(mount), str(dmg),
    ]  # fmt: skip
    assert detach_command(mount) == ["hdiutil", "detach", str(mount), "-quiet"]
    assert detach_command(mount, force=True)[-1] == "-force"
    assert copy_bundle_command(mount / "Launcher.app", tmp_path / "Launcher.app") == [
        "ditto", str(mount / "Launcher.app"), str(tmp_path / "Launcher.app"),
    ]  # fmt: skip


def _macos_tools(bin_dir: Path, log: Path) -> None:
    """hdiutil and ditto for a Linux run of the bundle steps: the "disk image" is a tar of the .app,
    attach unpacks it at the mount point, detach empties it; every call is logged."""
    bin_dir.mkdir()
    (bin_dir / "hdiutil").write_text(
        "#!/bin/sh\n"
        f'echo "hdiutil $*" >> "{log}"\n'
        'if [ "$1" = attach ]; then tar -xf "$7" -C "$6"; fi\n'
        'if [ "$1" = detach ]; then rm -rf "$2"/*; fi\n'
    )
    (bin_dir / "ditto").write_text(f'#!/bin/sh\necho "ditto $*" >> "{log}"\ncp -R "$1" "$2"\n')
    for tool in ("hdiutil", "ditto"):
        (bin_dir / tool).chmod(0o755)


def _bundle(folder: Path, version: str, *, says: str | None = None) -> Path:
    program_path = folder / "Launcher.app" / "Contents" / "MacOS" / "launcher"
    program_path.parent.mkdir(parents=True)
    program_path.write_bytes(program(version, says=says))
    program_path.chmod(0o755)
    return folder / "Launcher.app"


@pytest.mark.parametrize("good", [True, False], ids=["good build", "build that does not start"])
def test_the_bundle_is_copied_out_of_the_image_checked_and_swapped(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, good: bool
) -> None:
    log = tmp_path / "calls.log"
    _macos_tools(tmp_path / "bin", log)
    monkeypatch.setenv("PATH", f"{tmp_path / 'bin'}{os.pathsep}{os.environ['PATH']}")
    applications = tmp_path / "Applications"
    bundle = _bundle(applications, OLD)
    image = _bundle(tmp_path / "image", NEW, says=None if good else "launcher 0.0.1")
    dmg = tmp_path / "launcher-0.2.0-macos-arm64.dmg"
    with tarfile.open(dmg, "w") as tar:
        tar.add(image, "Launcher.app")

    program_path = bundle / "Contents" / "MacOS" / "launcher"
    if good:
        result = install(installation("dmg", bundle), dmg, NEW)
        assert result.restart_argv == [str(program_path)]
        assert version_of(program_path) == f"launcher {NEW}"
        assert entries(applications) == ["Launcher.app", f"Launcher.app.old-{OLD}"]
        assert finish_pending_update(installation("dmg", bundle)) == [applications / f"Launcher.app.old-{OLD}"]
    else:
        with pytest.raises(UpdateError, match="does not start here"):
            install(installation("dmg", bundle), dmg, NEW)
        assert version_of(program_path) == f"launcher {OLD}"
        assert entries(applications) == ["Launcher.app"]
    calls = log.read_text().splitlines()
    assert [call.split()[:2] for call in calls] == [
        ["hdiutil", "attach"],
        ["ditto", calls[1].split()[1]],
        ["hdiutil", "detach"],
    ]


# -- Windows: the installer -----------------------------------------------------------------------------


def test_the_installer_runs_silently_into_the_same_folder_and_restarts_the_app(tmp_path: Path) -> None:
    setup = tmp_path / "launcher-0.2.0-windows-x64-setup.exe"
    folder = Path("C:/Users/me/AppData/Local/Programs/Launcher")
    log = tmp_path / "setup.log"
    assert setup_command(setup, folder, log) == [
        str(setup), "/VERYSILENT", "/SUPPRESSMSGBOXES", "/NORESTART", "/CLOSEAPPLICATIONS", "/RESTARTAPP=1",
        f"/DIR={folder}", f"/LOG={log}",
    ]  # fmt: skip


def test_a_setup_installation_refuses_a_file_that_is_not_an_installer(tmp_path: Path) -> None:
    wrong = tmp_path / "launcher-0.2.0-linux-x86_64.tar.gz"
    wrong.write_bytes(b"x")
    with pytest.raises(UpdateError, match="not a Windows installer"):
        install(installation("setup", tmp_path), wrong, NEW)


# -- the new version's environment, GPU packs ----------------------------------------------------------


def test_the_new_version_gets_the_users_library_path_and_no_tie_to_its_starter() -> None:
    frozen_app_env = {
        "LD_LIBRARY_PATH": "/old/app/_internal:/usr/local/lib",
        "LD_LIBRARY_PATH_ORIG": "/usr/local/lib",
        PARENT_PID_ENV: "123",
        "LAUNCHER_API_KEY": "secret",
    }
    env = new_version_environment(frozen_app_env, frozen=True)
    assert env["LD_LIBRARY_PATH"] == "/usr/local/lib" and "LD_LIBRARY_PATH_ORIG" not in env
    assert PARENT_PID_ENV not in env and env[PYINSTALLER_RESET_ENV] == "1"
    assert env["LAUNCHER_API_KEY"] == "secret"
    assert "LD_LIBRARY_PATH" not in new_version_environment({"LD_LIBRARY_PATH": "/old/app/_internal"}, frozen=True)
    source = new_version_environment({"LD_LIBRARY_PATH": "/opt/cuda/lib"}, frozen=False)
    assert source["LD_LIBRARY_PATH"] == "/opt/cuda/lib"


def test_downloaded_gpu_packs_replace_the_installed_ones(tmp_path: Path) -> None:
    from launcher.engines.llamacpp.gpu_packs import installed_packs

    archive = tmp_path / "cuda12-linux-x86_64.tar.gz"
    with tarfile.open(archive, "w:gz") as tar:
        add_file(tar, "libggml-cuda.so", b"\x7fELF new build")
    pack = PackFile.model_validate(
        {
            "name": "cuda12-linux-x86_64", "backend": "cuda", "os": "linux", "arch": "x86_64",
            "engine_version": "0.3.20", "url": "https://example.invalid/p.tar.gz", "size_bytes": archive.stat().st_size,
            "sha256": "0" * 64,
        }
    )  # fmt: skip
    broken = PackFile.model_validate({**pack.model_dump(), "name": "vulkan-linux-x86_64", "backend": "vulkan"})

    lines = install_packs([(pack, archive), (broken, tmp_path / "missing.tar.gz")])

    assert lines[0] == "Updated the cuda12-linux-x86_64 GPU pack."
    assert "vulkan-linux-x86_64 GPU pack was not updated" in lines[1]
    (installed,) = installed_packs()
    assert installed.name == "cuda12-linux-x86_64" and installed.problem is None
    assert installed.manifest is not None and installed.manifest.entry.engine_version == "0.3.20"
    assert not archive.exists()


@pytest.mark.parametrize("kind", ["symlink to a sibling", "chained links", "write through a link"])
def test_without_pythons_extraction_filters_the_same_archives_are_refused(
    apps: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, kind: str
) -> None:
    """Debian 12's Python 3.11.2 has no `filter="data"`: the updater's own checks stand alone there."""
    monkeypatch.delattr(tarfile, "data_filter")
    tarball = tmp_path / "evil.tar.gz"
    with tarfile.open(tarball, "w:gz") as tar:
        _escaping(tar, kind)
    with pytest.raises(UpdateError, match="is refused"):
        install(installation("tar.gz", apps / "launcher"), tarball, NEW)
    assert entries(apps) == ["launcher"]
    install(installation("tar.gz", apps / "launcher"), release_tarball(tmp_path / "r.tar.gz", NEW), NEW)
    assert version_of(apps / "launcher" / "launcher") == f"launcher {NEW}"
