"""Checking for an update: which installation is running, one plain GET of the feed over real HTTP,
the offer it makes (version, date, notes, size, the GPU packs to refresh), and when the app asks
(at start and once a day; never when turned off, offline, or without a feed)."""

from __future__ import annotations

import io
import os
import sys
import tarfile
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from launcher.core import settings as settings_module
from launcher.core.errors import UpdateError
from launcher.core.settings import Settings
from launcher.engines.llamacpp.gpu_pack_install import install_pack
from launcher.engines.llamacpp.gpu_packs import PackEntry
from launcher.engines.llamacpp.gpu_packs import this_platform as pack_platform
from launcher.updates import check, current
from launcher.updates.feed import FEED_FILE
from tests.updates.feed_server import FeedServer, Served, ServedPack, fake_build, sha256, tarball

APP = os.urandom(3 * 1024 * 1024)


def test_a_frozen_app_sees_the_newer_release_and_what_it_would_download(
    frozen_app: Path, feed_server: FeedServer, release_key: tuple[str, str]
) -> None:
    other = Served("windows-x64", "setup", "launcher-0.2.0-windows-x64-setup.exe", b"exe")
    feed_server.publish("0.2.0", key=release_key[0], files=[other, tarball("0.2.0", APP)], notes="Faster pulls.")
    offer = check.check()
    assert offer is not None
    assert (offer.version, offer.current, offer.feed.notes) == ("0.2.0", "0.1.0", "Faster pulls.")
    assert offer.installation == current.Installation(
        "tar.gz", current.this_platform(), frozen_app, True, f"the update replaces the app folder {frozen_app}"
    )
    assert offer.file is not None and offer.file.name == f"launcher-0.2.0-{current.this_platform()}.tar.gz"
    assert offer.file.url == feed_server.url(offer.file.name)
    assert offer.size == len(APP) and offer.packs == ()
    assert offer.summary() == "launcher 0.2.0 (2026-12-02) is available; you have 0.1.0 (3.0 MiB)"
    assert feed_server.requests_for(offer.file.name) == []  # a check downloads nothing


def test_the_check_sends_one_plain_get_of_the_feed_and_nothing_about_the_user(
    frozen_app: Path, feed_server: FeedServer, release_key: tuple[str, str]
) -> None:
    feed_server.publish("0.2.0", key=release_key[0], files=[tarball("0.2.0", APP)])
    check.check()
    [request] = feed_server.requests
    assert (request.method, request.path) == ("GET", FEED_FILE)
    headers = {name.lower(): value for name, value in request.headers.items()}
    assert headers["user-agent"] == "launcher/0.1.0"
    assert set(headers) <= {"host", "user-agent", "accept", "accept-encoding", "connection"}


@pytest.mark.parametrize("version", ["0.1.0", "0.0.9"])
def test_the_same_or_an_older_release_is_no_offer(
    frozen_app: Path, feed_server: FeedServer, release_key: tuple[str, str], version: str
) -> None:
    feed_server.publish(version, key=release_key[0], files=[tarball(version, APP)])
    assert check.check() is None


def test_a_release_without_a_file_for_this_installation_says_so(
    frozen_app: Path, feed_server: FeedServer, release_key: tuple[str, str]
) -> None:
    feed_server.publish("0.2.0", key=release_key[0], files=[Served("macos-arm64", "dmg", "l.dmg", b"dmg")])
    offer = check.check()
    assert offer is not None and offer.file is None and offer.size == 0
    assert offer.summary() == (
        "launcher 0.2.0 (2026-12-02) is available; you have 0.1.0 "
        f"(the release has no tar.gz file for {current.this_platform()})"
    )


def test_the_feed_url_comes_from_the_build_and_the_environment_overrides_it(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path, feed_server: FeedServer, release_key: tuple[str, str]
) -> None:
    fake_build(monkeypatch, tmp_path / "launcher", public_key=release_key[1], feed="http://127.0.0.1:9/gone.json")
    monkeypatch.setenv("LAUNCHER_UPDATE_FEED", feed_server.url("mirror/update-feed.json"))
    feed_server.publish("0.2.0", key=release_key[0], files=[tarball("0.2.0", APP)], path="mirror/update-feed.json")
    offer = check.check()
    assert offer is not None and offer.file is not None
    assert offer.file.url == feed_server.url(f"mirror/{offer.file.name}")  # relative to the mirror's feed
    assert current.update_public_key() == release_key[1]  # the key has no environment override


def test_a_build_without_a_feed_cannot_check(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    fake_build(monkeypatch, tmp_path / "launcher", public_key=None)
    monkeypatch.delenv("LAUNCHER_UPDATE_FEED", raising=False)
    assert current.feed_url() is None and current.update_public_key() is None
    with pytest.raises(UpdateError, match="This build knows no update feed"):
        check.check()


def test_an_unreachable_or_failing_feed_is_a_clear_error(frozen_app: Path, feed_server: FeedServer) -> None:
    with pytest.raises(UpdateError, match=rf"The update feed at {feed_server.url(FEED_FILE)} answered HTTP 404"):
        check.check()
    feed_server.add(FEED_FILE, b"<html>maintenance</html>")
    with pytest.raises(UpdateError, match="is not JSON"):
        check.check()
    with FeedServer() as gone:
        url = gone.url(FEED_FILE)
    with pytest.raises(UpdateError, match=rf"Could not reach the update feed at {url} \("):
        check.check(url=url)
    for wrong in ("update-feed.json", "ftp://releases.example/update-feed.json", "http://[::1/update-feed.json"):
        with pytest.raises(UpdateError, match=r"The update feed URL .* is not an http\(s\) URL"):
            check.check(url=wrong)


def test_a_feed_larger_than_any_feed_is_refused_unread(
    frozen_app: Path, feed_server: FeedServer, release_key: tuple[str, str]
) -> None:
    feed_server.publish("0.2.0", key=release_key[0], files=[tarball("0.2.0", APP)], notes="x" * (2 * 1024 * 1024))
    with pytest.raises(UpdateError, match=r"The update feed at .* is larger than 1\.0 MiB, which no feed is"):
        check.check()


def test_a_feed_body_is_read_only_up_to_the_limit_when_its_length_is_not_announced() -> None:
    """A chunked (or compressed) answer has no length to refuse up front: reading stops at the limit."""
    sent: list[int] = []

    def endless() -> Iterator[bytes]:
        while True:
            sent.append(64 * 1024)
            yield b" " * (64 * 1024)

    response = httpx.Response(200, content=endless())
    with pytest.raises(UpdateError, match=r"larger than 1\.0 MiB"):
        check._read_at_most(response, check.MAX_FEED_BYTES, "http://feed.example/update-feed.json")
    assert sum(sent) <= check.MAX_FEED_BYTES + 64 * 1024
    assert check._read_at_most(httpx.Response(200, content=iter([b"{}"])), 10, "u") == b"{}"


# -- the installation ---------------------------------------------------------------------------


def test_this_source_checkout_is_updated_with_git(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delattr(sys, "frozen", raising=False)
    installation = current.detect_installation()
    assert (installation.kind, installation.can_update) == ("source", False)
    assert installation.how == "this is a source checkout: update it with git pull"
    assert current.current_version() == __import__("launcher").__version__


def test_a_source_checkout_gets_no_file_even_when_a_release_exists(
    monkeypatch: pytest.MonkeyPatch, feed_server: FeedServer, release_key: tuple[str, str]
) -> None:
    monkeypatch.delattr(sys, "frozen", raising=False)
    feed_server.publish("9.0.0", key=release_key[0], files=[tarball("9.0.0", APP)])
    offer = check.check(url=feed_server.url(FEED_FILE))
    assert offer is not None and offer.file is None
    assert offer.summary().endswith("(this is a source checkout: update it with git pull)")


def test_an_appimage_is_the_file_its_runtime_names(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path, release_key: tuple[str, str]
) -> None:
    fake_build(monkeypatch, tmp_path / "mount" / "usr" / "lib" / "launcher", public_key=release_key[1])
    image = tmp_path / "Applications" / "Launcher-0.1.0-x86_64.AppImage"
    image.parent.mkdir()
    monkeypatch.setenv("APPIMAGE", str(image))
    installation = current.detect_installation()
    assert (installation.kind, installation.target, installation.can_update) == ("appimage", image, True)


def test_a_deb_install_is_apts_to_update_and_a_hand_unpacked_copy_there_is_not(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path, release_key: tuple[str, str]
) -> None:
    opt = tmp_path / "opt" / "launcher"
    dpkg = tmp_path / "dpkg-info"
    dpkg.mkdir()
    monkeypatch.setattr(current, "DEB_FOLDER", opt)
    monkeypatch.setattr(current, "DPKG_INFO", dpkg)
    monkeypatch.delenv("APPIMAGE", raising=False)
    fake_build(monkeypatch, opt, public_key=release_key[1])
    assert current.detect_installation().kind == "tar.gz"
    (dpkg / "launcher.list").write_text(f"/.\n/opt\n{opt}\n{opt}/launcher\n/usr/bin/launcher\n")
    installation = current.detect_installation()
    assert (installation.kind, installation.target, installation.can_update) == ("deb", opt, False)
    assert installation.how.endswith("and install it with sudo apt install ./<downloaded file>")
    assert "_amd64" not in installation.how  # no made-up file name: an arm64 machine's package is another


def test_a_deb_offer_names_the_releases_real_package(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path, feed_server: FeedServer, release_key: tuple[str, str]
) -> None:
    opt = tmp_path / "opt" / "launcher"
    dpkg = tmp_path / "dpkg-info"
    dpkg.mkdir()
    (dpkg / "launcher.list").write_text(f"{opt}\n")
    monkeypatch.setattr(current, "DEB_FOLDER", opt)
    monkeypatch.setattr(current, "DPKG_INFO", dpkg)
    monkeypatch.delenv("APPIMAGE", raising=False)
    package = Served(current.this_platform(), "deb", "launcher_0.2.0_arm64.deb", b"!<arch>\n" * 10)
    url = feed_server.publish("0.2.0", key=release_key[0], files=[package])
    fake_build(monkeypatch, opt, public_key=release_key[1], feed=url)
    offer = check.check()
    assert offer is not None and offer.installation.kind == "deb"
    assert offer.how == (
        "this was installed from a .deb package, which apt updates: download launcher_0.2.0_arm64.deb from the "
        "project's releases page (or run `launcher update`, which downloads and verifies it) and install it with "
        "sudo apt install ./launcher_0.2.0_arm64.deb"
    )


def test_a_mac_app_is_its_bundle_and_a_windows_install_its_folder(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path, release_key: tuple[str, str]
) -> None:
    bundle = tmp_path / "Applications" / "Launcher.app"
    fake_build(monkeypatch, bundle / "Contents" / "MacOS", public_key=release_key[1])
    monkeypatch.setattr(sys, "platform", "darwin")
    installation = current.detect_installation()
    assert (installation.kind, installation.target, installation.can_update) == ("dmg", bundle, True)
    assert installation.platform.startswith("macos-")
    local = tmp_path / "Users" / "ada" / "AppData" / "Local"
    monkeypatch.setenv("LOCALAPPDATA", str(local))
    for name in ("APPDATA", "USERPROFILE"):
        monkeypatch.delenv(name, raising=False)
    programs = local / "Programs" / "Launcher"  # the installer's per-user default
    fake_build(monkeypatch, programs, public_key=release_key[1])
    monkeypatch.setattr(sys, "platform", "win32")
    installation = current.detect_installation()
    assert (installation.kind, installation.target, installation.can_update) == ("setup", programs, True)
    assert installation.platform.startswith("windows-")


def test_a_windows_install_for_all_users_is_not_offered_a_silent_update(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path, release_key: tuple[str, str]
) -> None:
    """The installer lets the user choose "for all users" (Program Files); the update runs it silently
    without administrator rights, which cannot replace that."""
    monkeypatch.setenv("LOCALAPPDATA", str(tmp_path / "Users" / "ada" / "AppData" / "Local"))
    monkeypatch.setenv("USERPROFILE", str(tmp_path / "Users" / "ada"))
    monkeypatch.delenv("APPDATA", raising=False)
    program_files = tmp_path / "Program Files" / "Launcher"
    fake_build(monkeypatch, program_files, public_key=release_key[1])
    monkeypatch.setattr(sys, "platform", "win32")
    installation = current.detect_installation()
    assert (installation.kind, installation.target, installation.can_update) == ("setup", program_files, False)
    assert installation.how == (
        f"this copy was installed for all users in {program_files}, which an update from inside the app cannot "
        "replace (it runs without administrator rights): download the new installer from the project's releases "
        "page and run it"
    )


@pytest.mark.skipif(not hasattr(os, "geteuid") or os.geteuid() == 0, reason="root may write anywhere")
def test_an_app_folder_the_user_cannot_replace_is_not_offered_a_self_update(frozen_app: Path) -> None:
    frozen_app.parent.chmod(0o555)
    try:
        installation = current.detect_installation()
    finally:
        frozen_app.parent.chmod(0o755)
    assert not installation.can_update and "is not writable by this user" in installation.how


# -- GPU packs ----------------------------------------------------------------------------------


def _pack_archive(library: bytes) -> bytes:
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w:gz") as tar:
        info = tarfile.TarInfo("lib/libggml-cuda.so")
        info.size = len(library)
        tar.addfile(info, io.BytesIO(library))
    return buffer.getvalue()


def _pack(name: str, data: bytes) -> ServedPack:
    system, arch = pack_platform()
    return ServedPack(name, data, "0.3.36", {"backend": name.split("-")[0], "os": system, "arch": arch})


def test_the_offer_refreshes_the_gpu_packs_installed_here_and_only_those_that_changed(
    frozen_app: Path, feed_server: FeedServer, release_key: tuple[str, str]
) -> None:
    system, arch = pack_platform()
    installed = _pack_archive(b"old cuda build")
    cuda = _pack(f"cuda-{system}-{arch}", installed)
    entry = {**cuda.fields, "name": cuda.name, "engine_version": "0.3.36", "size_bytes": len(installed),
             "sha256": sha256(installed), "url": feed_server.add("old-cuda.tar.gz", installed)}  # fmt: skip
    install_pack(PackEntry.model_validate(entry))
    vulkan = _pack(f"vulkan-{system}-{arch}", _pack_archive(b"vulkan build"))

    feed_server.publish("0.2.0", key=release_key[0], files=[tarball("0.2.0", APP)], packs=[cuda, vulkan])
    offer = check.check()
    assert offer is not None and offer.packs == ()  # the installed cuda pack is this build already

    new_cuda = _pack(cuda.name, _pack_archive(b"new cuda build"))
    feed_server.publish("0.2.0", key=release_key[0], files=[tarball("0.2.0", APP)], packs=[new_cuda, vulkan])
    offer = check.check()
    assert offer is not None and [pack.name for pack in offer.packs] == [cuda.name]
    assert offer.size == len(APP) + len(new_cuda.data)


# -- when the app checks ------------------------------------------------------------------------


def test_the_app_checks_at_start_then_once_a_day(frozen_app: Path) -> None:
    settings = Settings()
    assert settings.check_for_updates
    assert check.due(settings, now=1_000_000)  # never checked: at start
    check.record_check(now=1_000_000)
    assert not check.due(settings, now=1_000_000 + 23 * 3600)
    assert check.due(settings, now=1_000_000 + 24 * 3600)
    assert check.due(settings, now=1_000_000 - 3600)  # the clock was set back: check rather than wait


def test_no_check_when_turned_off_offline_or_without_a_feed(
    frozen_app: Path, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    settings_module.save(Settings(check_for_updates=False))
    assert not settings_module.load().check_for_updates  # the Settings page's choice survives a restart
    assert not check.due(settings_module.load())
    for variable in ("HF_HUB_OFFLINE", "TRANSFORMERS_OFFLINE"):
        with monkeypatch.context() as offline:
            offline.setenv(variable, "1")
            assert not check.due(Settings())
    assert check.due(Settings())
    fake_build(monkeypatch, tmp_path / "launcher", public_key=None)
    assert not check.due(Settings())


def test_a_due_check_is_recorded_only_when_the_feed_answered(
    frozen_app: Path, feed_server: FeedServer, release_key: tuple[str, str]
) -> None:
    settings = Settings()
    with pytest.raises(UpdateError):
        check.check_when_due(settings)  # no feed published yet: 404
    assert check.last_check() is None
    feed_server.publish("0.2.0", key=release_key[0], files=[tarball("0.2.0", APP)])
    offer = check.check_when_due(settings)
    assert offer is not None and offer.version == "0.2.0"
    assert check.last_check() is not None
    asked = len(feed_server.requests)
    assert check.check_when_due(settings) is None  # not due again today: the feed is not asked
    assert len(feed_server.requests) == asked


def test_a_failing_check_is_retried_at_each_look_three_times_then_once_a_day(
    frozen_app: Path, feed_server: FeedServer, release_key: tuple[str, str]
) -> None:
    settings = Settings()
    start = 1_000_000.0
    for attempt in range(check.MAX_QUICK_RETRIES):
        now = start + attempt * 3600  # the app's hourly look
        assert check.due(settings, now=now)
        with pytest.raises(UpdateError, match="HTTP 404"):  # nothing published yet
            check.check_when_due(settings, now=now)
    last_failure = start + (check.MAX_QUICK_RETRIES - 1) * 3600
    assert not check.due(settings, now=last_failure + 3600)  # three in a row: the next waits a day
    assert not check.due(settings, now=last_failure + 23 * 3600)
    assert check.due(settings, now=last_failure + 24 * 3600)
    feed_server.publish("0.2.0", key=release_key[0], files=[tarball("0.2.0", APP)])
    assert check.check_when_due(settings, now=last_failure + 24 * 3600) is not None
    with pytest.raises(UpdateError):  # the answer cleared the failures: a new one is retried within the hour
        feed_server.fail(FEED_FILE, 503)
        check.check_when_due(settings, now=last_failure + 48 * 3600)
    assert check.due(settings, now=last_failure + 49 * 3600)


def test_the_offer_the_last_check_found_is_remembered_until_later_or_the_next_check(
    frozen_app: Path, feed_server: FeedServer, release_key: tuple[str, str], monkeypatch: pytest.MonkeyPatch
) -> None:
    settings = Settings()
    assert check.remembered_offer(settings) is None  # never checked
    feed_server.publish("0.2.0", key=release_key[0], files=[tarball("0.2.0", APP)], notes="Faster.")
    found = check.check_when_due(settings, now=1_000_000)
    assert found is not None
    asked = len(feed_server.requests)

    remembered = check.remembered_offer(settings)  # the app started again the same day
    assert remembered is not None and len(feed_server.requests) == asked  # without asking the feed
    assert (remembered.version, remembered.feed.notes, remembered.file) == ("0.2.0", "Faster.", found.file)
    assert remembered.size == found.size and remembered.current == "0.1.0"
    assert check.remembered_offer(Settings(check_for_updates=False)) is None
    with monkeypatch.context() as offline:
        offline.setenv("HF_HUB_OFFLINE", "1")
        assert check.remembered_offer(settings) is None

    check.record_later("0.2.0", now=1_000_100)  # the user pressed Later
    assert check.remembered_offer(settings) is None
    assert check.check_when_due(settings, now=1_000_000 + 24 * 3600) is not None  # the next day's check
    assert check.remembered_offer(settings) is not None  # found again: shown again

    fake_build(monkeypatch, frozen_app, version="0.2.0", public_key=release_key[1], feed=feed_server.url(FEED_FILE))
    assert check.remembered_offer(settings) is None  # installed: nothing newer to offer
    fake_build(monkeypatch, frozen_app, version="0.1.0", public_key=release_key[1], feed="https://mirror.example/f")
    assert check.remembered_offer(settings) is None  # another feed: its own check will say

    fake_build(monkeypatch, frozen_app, version="0.1.0", public_key=release_key[1], feed=feed_server.url(FEED_FILE))
    feed_server.publish("0.1.0", key=release_key[0], files=[tarball("0.1.0", APP)])
    assert check.check_when_due(settings, now=1_000_000 + 48 * 3600) is None  # up to date now
    assert check.remembered_offer(settings) is None
