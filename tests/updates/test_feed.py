"""The release feed as the app reads it, and the release signatures it trusts: a feed it cannot read,
or a file the release key did not sign for this version, is refused with a message that says why."""

from __future__ import annotations

import json
from typing import Any

import pytest

from launcher.core.errors import UpdateError
from launcher.updates import signing
from launcher.updates.feed import FEED_FORMAT, Feed, is_newer, parse_feed
from tests.updates.feed_server import Served, file_entry, sha256

FEED_URL = "https://releases.example/download/v0.2.0/update-feed.json"
TARBALL = Served("linux-x86_64", "tar.gz", "launcher-0.2.0-linux-x86_64.tar.gz", b"the app" * 100)
FOR = signing.file_purpose(TARBALL.platform, TARBALL.kind)  # what TARBALL's signature is for


def _feed(**fields: Any) -> str:
    data: dict[str, Any] = {
        "feed": FEED_FORMAT,
        "version": "0.2.0",
        "date": "2026-12-02",
        "notes": "Faster downloads.",
        "files": [file_entry("0.2.0", TARBALL, key=None)],
        **fields,
    }
    return json.dumps(data)


def test_a_feed_reads_with_its_files_and_packs_at_urls_beside_the_feed() -> None:
    pack = {"name": "cuda12-linux-x86_64", "backend": "cuda", "url": "packs/cuda.tar.gz", "size_bytes": 5,
            "sha256": "a" * 64, "engine_version": "0.3.36"}  # fmt: skip
    mirror = file_entry("0.2.0", TARBALL, key=None, url="https://mirror.example/l.tar.gz")
    mirror["kind"] = "appimage"
    feed = parse_feed(_feed(files=[file_entry("0.2.0", TARBALL, key=None), mirror], packs=[pack]), FEED_URL)
    assert (feed.version, str(feed.date), feed.notes) == ("0.2.0", "2026-12-02", "Faster downloads.")
    tarball = feed.file_for("linux-x86_64", "tar.gz")
    assert tarball is not None
    assert tarball.url == "https://releases.example/download/v0.2.0/launcher-0.2.0-linux-x86_64.tar.gz"
    assert (tarball.size, tarball.sha256) == (len(TARBALL.data), sha256(TARBALL.data))
    image = feed.file_for("linux-x86_64", "appimage")
    assert image is not None and image.url == "https://mirror.example/l.tar.gz"  # an absolute URL is kept
    assert feed.file_for("windows-x64", "setup") is None
    assert feed.packs[0].url == "https://releases.example/download/v0.2.0/packs/cuda.tar.gz"
    assert feed.packs[0].model_dump()["backend"] == "cuda"  # the pack index's own fields travel along


def test_what_a_newer_release_adds_to_the_feed_is_ignored_and_the_feed_round_trips() -> None:
    entry = {**file_entry("0.2.0", TARBALL, key=None), "delta_from": "0.1.0"}
    text = _feed(files=[entry, {**entry, "kind": "flatpak"}], mirrors=["https://m.example/"])
    feed = parse_feed(text, "update-feed.json")
    assert [file.kind for file in feed.files] == ["tar.gz", "flatpak"]  # an unknown kind is skipped by file_for
    assert feed.file_for("linux-x86_64", "tar.gz") is not None
    assert parse_feed(feed.to_json(), "update-feed.json") == feed


def test_a_feed_from_a_newer_format_says_to_download_the_new_version_by_hand() -> None:
    with pytest.raises(UpdateError, match=r"has format 2, newer than this app reads \(1\).*releases page"):
        parse_feed(_feed(feed=FEED_FORMAT + 1, files="a shape this app cannot read"), FEED_URL)


@pytest.mark.parametrize(
    ("fields", "problem"),
    [
        ({"version": "two point oh"}, r"version: Value error, 'two point oh' is not a version"),
        ({"date": "soon"}, r"date:"),
        ({"files": [{**file_entry("0.2.0", TARBALL, key=None), "sha256": "abc"}]}, r"files\.0\.sha256"),
        ({"files": [{**file_entry("0.2.0", TARBALL, key=None), "name": "../../etc/passwd"}]}, r"files\.0\.name"),
        ({"files": [{**file_entry("0.2.0", TARBALL, key=None), "size": 0}]}, r"files\.0\.size"),
    ],
)
def test_a_feed_with_a_bad_field_names_the_feed_and_the_field(fields: dict[str, Any], problem: str) -> None:
    with pytest.raises(UpdateError, match=rf"The update feed at {FEED_URL} is not valid \(.*{problem}"):
        parse_feed(_feed(**fields), FEED_URL)


def test_a_feed_that_is_not_json_says_so() -> None:
    with pytest.raises(UpdateError, match=rf"The update feed at {FEED_URL} is not JSON"):
        parse_feed("<html>503 Service Unavailable</html>", FEED_URL)


@pytest.mark.parametrize(
    ("release", "current", "newer"),
    [("0.2.0", "0.1.0", True), ("0.1.0", "0.1.0", False), ("0.1.0", "0.2.0", False),
     ("0.10.0", "0.9.0", True), ("0.2.0rc1", "0.2.0", False), ("0.2.0", "0.2.0rc1", True),
     ("0.2.0", "a dev build", True)],
)  # fmt: skip
def test_versions_compare_as_versions_not_as_text(release: str, current: str, newer: bool) -> None:
    assert is_newer(Feed.model_validate({"feed": 1, "version": release, "date": "2026-12-02"}), current) is newer


# -- signatures ---------------------------------------------------------------------------------


def test_a_file_signed_by_the_release_key_verifies_and_a_changed_fact_does_not() -> None:
    seed, public = signing.new_key()
    digest = sha256(TARBALL.data)
    signature = signing.sign(signing.private_key(seed), "0.2.0", TARBALL.name, len(TARBALL.data), digest, purpose=FOR)
    signing.verify(public, signature, "0.2.0", TARBALL.name, len(TARBALL.data), digest, purpose=FOR)
    assert signing.public_text(signing.private_key(seed)) == public
    changed = [
        ("0.3.0", TARBALL.name, len(TARBALL.data), digest),  # an old signed file offered as a newer release
        ("0.2.0", "launcher-0.2.0-linux-arm64.tar.gz", len(TARBALL.data), digest),
        ("0.2.0", TARBALL.name, len(TARBALL.data) + 1, digest),
        ("0.2.0", TARBALL.name, len(TARBALL.data), sha256(b"other bytes")),
    ]
    for version, name, size, other in changed:
        with pytest.raises(UpdateError, match=rf"The signature of {name} does not verify .*; it is refused"):
            signing.verify(public, signature, version, name, size, other, purpose=FOR)


def test_a_signature_stands_only_for_what_it_was_made_for() -> None:
    """An installer's signature is for one platform and kind: a feed cannot relabel the arm64 build as
    the x86_64 one, a .deb as the tar.gz, or present a signed pack as the app (or the reverse)."""
    seed, public = signing.new_key()
    digest = sha256(TARBALL.data)
    facts = ("0.2.0", TARBALL.name, len(TARBALL.data), digest)
    signature = signing.sign(signing.private_key(seed), *facts, purpose=FOR)
    assert FOR == "file:linux-x86_64:tar.gz"
    for other in (signing.file_purpose("linux-arm64", "tar.gz"), signing.file_purpose("linux-x86_64", "deb")):
        with pytest.raises(UpdateError, match="does not verify"):
            signing.verify(public, signature, *facts, purpose=other)
    with pytest.raises(UpdateError, match="does not verify"):
        signing.verify(public, signature, *facts, purpose=signing.PACK_PURPOSE)
    as_pack = signing.sign(signing.private_key(seed), *facts, purpose=signing.PACK_PURPOSE)
    with pytest.raises(UpdateError, match="does not verify"):
        signing.verify(public, as_pack, *facts, purpose=FOR)
    assert signing.statement(*facts, purpose=FOR).startswith(b"launcher release file\nfor file:linux-x86_64:tar.gz\n")


@pytest.mark.parametrize(
    ("notes_url", "kept"),
    [
        ("https://github.com/o/r/releases/tag/v0.2.0", True),
        ("HTTPS://example.org/notes", True),
        ("http://example.org/notes", False),
        ("file:///etc/passwd", False),
        ("javascript:alert(1)", False),
        ("https:relative", False),
        ("/releases/tag/v0.2.0", False),
        ("https://example.org/a b", False),
    ],
)
def test_only_an_https_notes_link_is_kept(notes_url: str, kept: bool) -> None:
    feed = parse_feed(_feed(notes_url=notes_url), FEED_URL)
    assert feed.notes_url == (notes_url if kept else None)


def test_a_signature_from_another_key_or_garbled_is_refused() -> None:
    seed, _ = signing.new_key()
    _, other_public = signing.new_key()
    digest = sha256(TARBALL.data)
    signature = signing.sign(signing.private_key(seed), "0.2.0", TARBALL.name, len(TARBALL.data), digest, purpose=FOR)
    for public, garbled in ((other_public, signature), (signing.new_key()[1], "not base64!")):
        with pytest.raises(UpdateError, match="does not verify with this app's update key"):
            signing.verify(public, garbled, "0.2.0", TARBALL.name, len(TARBALL.data), digest, purpose=FOR)


def test_an_unsigned_file_is_refused_even_by_a_build_with_a_key() -> None:
    _, public = signing.new_key()
    with pytest.raises(UpdateError, match=rf"{TARBALL.name} in the update feed is not signed; it is refused"):
        signing.verify(public, None, "0.2.0", TARBALL.name, len(TARBALL.data), sha256(TARBALL.data), purpose=FOR)


def test_a_build_without_a_key_refuses_every_update_even_a_signed_one() -> None:
    seed, _ = signing.new_key()
    digest = sha256(TARBALL.data)
    signature = signing.sign(signing.private_key(seed), "0.2.0", TARBALL.name, len(TARBALL.data), digest, purpose=FOR)
    for public in (None, ""):
        with pytest.raises(UpdateError, match=r"This build carries no update key.*releases page"):
            signing.verify(public, signature, "0.2.0", TARBALL.name, len(TARBALL.data), digest, purpose=FOR)


@pytest.mark.parametrize(
    ("key", "problem"), [("not base64!", "is not base64"), ("AAAA", "is 3 bytes; an ed25519 key is 32")]
)
def test_a_malformed_key_says_what_is_wrong_with_it(key: str, problem: str) -> None:
    with pytest.raises(UpdateError, match=f"The update public key {problem}"):
        signing.verify(key, "c2ln", "0.2.0", TARBALL.name, 1, "a" * 64, purpose=FOR)
    with pytest.raises(UpdateError, match=f"The signing key {problem}"):
        signing.private_key(key)
