"""Downloading an update when the user asks, over real HTTP from the local feed server: the file
arrives verified with progress; a bad signature is refused before any byte is fetched; wrong bytes
are refused and deleted; a dropped transfer keeps what arrived and the next try resumes it with a
Range request; a disk too small is refused up front, and one that fills up is named as full."""

from __future__ import annotations

import os
import shutil
import threading
from pathlib import Path

import pytest

from launcher.catalog import transfer
from launcher.catalog.progress import ProgressEvent
from launcher.core.errors import DownloadCancelled, UpdateError
from launcher.updates import check, download, signing
from launcher.updates.check import UpdateOffer
from launcher.updates.current import this_platform
from launcher.updates.feed import FEED_FILE
from tests.updates.feed_server import FeedServer, ServedPack, fake_build, file_entry, sha256, tarball

APP = os.urandom(2 * 1024 * 1024 + 123)
RELEASE = tarball("0.2.0", APP)


def _offer() -> UpdateOffer:
    offer = check.check()
    assert offer is not None and offer.file is not None
    return offer


def _fetches(server: FeedServer, name: str = RELEASE.name) -> list[str | None]:
    """The Range header of each request for the file (None: from the first byte)."""
    return [request.range for request in server.requests_for(name)]


def _downloads() -> list[str]:
    folder = download.updates_dir()
    return sorted(path.name for path in folder.iterdir()) if folder.exists() else []


@pytest.fixture
def published(frozen_app: Path, feed_server: FeedServer, release_key: tuple[str, str]) -> FeedServer:
    """The frozen 0.1.0 app, and release 0.2.0 signed with its key on the feed server."""
    feed_server.publish("0.2.0", key=release_key[0], files=[RELEASE])
    return feed_server


def test_the_update_downloads_verified_with_progress(published: FeedServer) -> None:
    events: list[ProgressEvent] = []
    downloaded = download.download(_offer(), progress=events.append)
    assert downloaded.path == download.updates_dir() / RELEASE.name
    assert downloaded.path.read_bytes() == APP and downloaded.packs == ()
    assert events[0].kind == "start" and events[-1].kind == "done"
    assert "verify" in [event.kind for event in events]
    assert events[-1].bytes_done == events[-1].bytes_total == len(APP) and events[-1].files_done == 1
    assert _downloads() == [RELEASE.name]  # no partial file left behind
    assert _fetches(published) == [None]


def test_a_finished_download_is_not_fetched_again_unless_it_changed_on_disk(published: FeedServer) -> None:
    offer = _offer()
    path = download.download(offer).path
    assert download.download(offer).path == path and _fetches(published) == [None]
    path.write_bytes(b"x" * len(APP))  # damaged on disk after the download
    assert download.download(offer).path.read_bytes() == APP
    assert _fetches(published) == [None, None]


def test_the_gpu_packs_of_the_offer_download_verified_beside_the_app(
    published: FeedServer, release_key: tuple[str, str]
) -> None:
    pack = ServedPack("cuda-linux-x86_64", os.urandom(50_000), fields={"backend": "cuda"})
    published.publish("0.2.0", key=release_key[0], files=[RELEASE], packs=[pack])
    offer = _offer()
    offer = UpdateOffer(offer.feed, offer.current, offer.installation, offer.file, packs=tuple(offer.feed.packs))
    events: list[ProgressEvent] = []
    downloaded = download.download(offer, progress=events.append)
    [(entry, archive)] = downloaded.packs
    assert entry.name == pack.name and archive.read_bytes() == pack.data
    assert events[-1].bytes_done == len(APP) + len(pack.data) and events[-1].files_done == 2


# -- refused before any byte ------------------------------------------------------------------------


def test_a_file_signed_by_another_key_is_refused_before_any_byte_is_fetched(
    published: FeedServer,
) -> None:
    published.publish("0.2.0", key=signing.new_key()[0], files=[RELEASE])
    with pytest.raises(UpdateError, match=rf"The signature of {RELEASE.name} does not verify.*refused"):
        download.download(_offer())
    assert _fetches(published) == [] and _downloads() == []


def test_an_unsigned_release_is_refused_before_any_byte_is_fetched(published: FeedServer) -> None:
    published.publish("0.2.0", key=None, files=[RELEASE])  # a fork's release workflow without the secret
    with pytest.raises(UpdateError, match=rf"{RELEASE.name} in the update feed is not signed; it is refused"):
        download.download(_offer())
    assert _fetches(published) == []


def test_a_feed_that_changes_a_signed_fact_is_refused(published: FeedServer, release_key: tuple[str, str]) -> None:
    entry = file_entry("0.2.0", RELEASE, key=release_key[0])
    other = os.urandom(len(APP))
    published.add("evil.tar.gz", other)
    forged = {**entry, "sha256": sha256(other), "url": "evil.tar.gz"}  # the release's signature, other bytes
    published.publish("0.2.0", key=release_key[0], extra={"files": [forged]})
    with pytest.raises(UpdateError, match="does not verify with this app's update key"):
        download.download(_offer())
    replayed = file_entry("0.1.5", RELEASE, key=release_key[0])  # an older signed file offered as 0.2.0
    published.publish("0.2.0", key=release_key[0], extra={"files": [replayed]})
    with pytest.raises(UpdateError, match="does not verify with this app's update key"):
        download.download(_offer())
    assert published.requests_for("evil.tar.gz") == [] and _fetches(published) == []


def test_a_file_signed_for_another_platform_is_refused_before_any_byte_is_fetched(
    published: FeedServer, release_key: tuple[str, str]
) -> None:
    elsewhere = "linux-arm64" if this_platform() != "linux-arm64" else "linux-x86_64"
    arm = tarball("0.2.0", APP, platform=elsewhere)  # the release's build for another machine, properly signed
    relabelled = {**file_entry("0.2.0", arm, key=release_key[0]), "platform": this_platform()}
    published.add(arm.name, arm.data)
    published.publish("0.2.0", key=release_key[0], extra={"files": [relabelled]})
    offer = _offer()
    assert offer.file is not None and offer.file.name == arm.name
    with pytest.raises(UpdateError, match=f"The signature of {arm.name} does not verify"):
        download.download(offer)
    assert _fetches(published, arm.name) == []


def test_a_build_without_a_key_downloads_nothing(
    published: FeedServer, monkeypatch: pytest.MonkeyPatch, frozen_app: Path
) -> None:
    fake_build(monkeypatch, frozen_app, public_key=None, feed=published.url(FEED_FILE))
    with pytest.raises(UpdateError, match="This build carries no update key"):
        download.download(_offer())
    assert _fetches(published) == []


def test_a_release_without_a_file_for_this_installation_downloads_nothing(published: FeedServer) -> None:
    offer = _offer()
    offer = UpdateOffer(offer.feed, offer.current, offer.installation, None)
    with pytest.raises(UpdateError, match=r"launcher 0.2.0 has no download for this installation \(the update"):
        download.download(offer)
    assert _fetches(published) == []


def test_a_disk_too_small_for_the_update_is_refused_up_front(
    published: FeedServer, release_key: tuple[str, str]
) -> None:
    download.updates_dir().mkdir(parents=True)
    huge = shutil.disk_usage(download.updates_dir()).free + 1024**3
    entry = file_entry("0.2.0", RELEASE, key=None)
    entry["size"] = huge  # signed as the release would sign a file this big
    entry["signature"] = signing.sign(
        signing.private_key(release_key[0]),
        "0.2.0",
        RELEASE.name,
        huge,
        entry["sha256"],
        purpose=signing.file_purpose(RELEASE.platform, RELEASE.kind),
    )
    published.publish("0.2.0", key=release_key[0], extra={"files": [entry]})
    with pytest.raises(UpdateError, match=r"Not enough free disk for the update: it needs .* free there\..*nothing"):
        download.download(_offer())
    assert _fetches(published) == [] and _downloads() == []


# -- refused or stopped during the transfer ------------------------------------------------------


def test_bytes_other_than_the_signed_ones_are_refused_and_deleted(published: FeedServer) -> None:
    published.serve_instead(RELEASE.name, os.urandom(len(APP)))  # a tampered mirror, or a corrupted transfer
    offer = _offer()
    with pytest.raises(UpdateError, match=rf"{RELEASE.name} was corrupted in transfer.*deleted and nothing"):
        download.download(offer)
    assert _downloads() == []
    published.serve_instead(RELEASE.name, APP)
    assert download.download(offer).path.read_bytes() == APP
    assert _fetches(published) == [None, None]  # the second try starts over: nothing bad was kept


def test_a_server_sending_more_than_the_signed_size_is_cut_off_not_written_to_the_end(
    published: FeedServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    published.serve_instead(RELEASE.name, APP + os.urandom(64 * 1024 * 1024))  # 64 MiB past the signed size
    hashed: list[int] = []  # every byte the transfer wrote is hashed: their count is what reached the disk
    feed = transfer.BackgroundHasher.feed

    def counted(self: transfer.BackgroundHasher, chunk: bytes) -> None:
        hashed.append(len(chunk))
        feed(self, chunk)

    monkeypatch.setattr(transfer.BackgroundHasher, "feed", counted)
    with pytest.raises(UpdateError, match=rf"The server sent more of {RELEASE.name} than the release lists.*deleted"):
        download.download(_offer())
    assert sum(hashed) < len(APP) + 8 * 1024 * 1024  # one piece past the signed size at most, not 64 MiB
    assert _downloads() == []


def test_a_dropped_transfer_keeps_what_arrived_and_the_next_download_resumes_it(
    published: FeedServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(transfer, "_RETRIES", 0)  # the transfer's own retries are the next test's subject
    published.truncate(RELEASE.name, 700_000, times=1)
    offer = _offer()
    stopped = rf"The download of {RELEASE.name} stopped at 683.6 KiB of 2.0 MiB: the connection failed .*resumes"
    with pytest.raises(UpdateError, match=stopped):
        download.download(offer)
    [partial] = download.updates_dir().iterdir()
    assert partial.stat().st_size == 700_000
    assert download.download(offer).path.read_bytes() == APP
    assert _fetches(published) == [None, "bytes=700000-"]


def test_a_connection_that_drops_once_is_resumed_within_the_same_download(published: FeedServer) -> None:
    published.truncate(RELEASE.name, 1_000_000, times=1)
    assert download.download(_offer()).path.read_bytes() == APP
    assert _fetches(published) == [None, "bytes=1000000-"]


def test_a_short_answer_is_a_stopped_download_and_resumes(published: FeedServer) -> None:
    published.serve_instead(RELEASE.name, APP[:500_000])  # the server's copy is cut short
    offer = _offer()
    with pytest.raises(UpdateError, match=r"stopped at 488.3 KiB of 2.0 MiB: the server ended the transfer early\."):
        download.download(offer)
    published.serve_instead(RELEASE.name, APP)
    assert download.download(offer).path.read_bytes() == APP
    assert _fetches(published) == [None, "bytes=500000-"]


def test_a_release_file_the_server_does_not_have_is_a_clear_error(published: FeedServer) -> None:
    published.fail(RELEASE.name, 404)
    offer = _offer()
    with pytest.raises(UpdateError, match=rf"The download of {RELEASE.name} did not start: .* HTTP 404\. Try again"):
        download.download(offer)
    published.fail(RELEASE.name, None)
    assert download.download(offer).path.read_bytes() == APP


def test_a_cancelled_download_keeps_what_arrived_and_resumes(published: FeedServer) -> None:
    published.throttle(RELEASE.name, chunk=64 * 1024, delay_s=0.01)
    cancel = threading.Event()

    def stop_after_some(event: ProgressEvent) -> None:
        if event.bytes_done > 300_000:
            cancel.set()

    offer = _offer()
    with pytest.raises(DownloadCancelled, match=r"The update download was cancelled; .* are kept"):
        download.download(offer, progress=stop_after_some, cancel=cancel)
    [partial] = download.updates_dir().iterdir()
    kept = partial.stat().st_size
    assert 300_000 < kept < len(APP)
    published.throttle(RELEASE.name, chunk=0, delay_s=0)
    assert download.download(offer).path.read_bytes() == APP
    assert _fetches(published)[-1] == f"bytes={kept}-"


def test_a_disk_that_fills_up_during_the_download_is_named_full(
    published: FeedServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    if not Path("/dev/full").exists():
        pytest.skip("needs /dev/full, a device whose every write fails with ENOSPC")
    monkeypatch.setattr(transfer, "_RETRIES", 0)
    published.truncate(RELEASE.name, 100_000, times=1)
    offer = _offer()
    with pytest.raises(UpdateError, match="stopped at"):
        download.download(offer)
    [partial] = download.updates_dir().iterdir()
    partial.unlink()
    partial.symlink_to("/dev/full")  # the rest of the download goes to a disk with no space left
    with pytest.raises(UpdateError, match=rf"The disk is full: {RELEASE.name} could not be written to .*Free some"):
        download.download(offer)


def test_a_newer_offer_removes_the_files_an_older_one_left(published: FeedServer, release_key: tuple[str, str]) -> None:
    download.download(_offer())
    newer = tarball("0.3.0", os.urandom(10_000))
    published.publish("0.3.0", key=release_key[0], files=[newer])
    download.download(_offer())
    assert _downloads() == [newer.name]
