"""Fixtures for update tests: a release key, a running feed server, and a frozen tar.gz build that reads it."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from launcher.updates.feed import FEED_FILE
from tests.updates.feed_server import FeedServer, fake_build


@pytest.fixture
def release_key() -> tuple[str, str]:
    """A fresh release key pair: (private seed, public key), base64."""
    from launcher.updates import signing

    return signing.new_key()


@pytest.fixture
def feed_server() -> Iterator[FeedServer]:
    """A feed server on a free loopback port, stopped afterwards."""
    with FeedServer() as server:
        yield server


@pytest.fixture
def frozen_app(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path, release_key: tuple[str, str], feed_server: FeedServer
) -> Path:
    """This process as the frozen Linux app 0.1.0, unpacked from the tar.gz into a folder, carrying
    the release key and reading its feed from `feed_server`. Returns the app folder."""
    folder = tmp_path / "apps" / "launcher"
    fake_build(monkeypatch, folder, version="0.1.0", public_key=release_key[1], feed=feed_server.url(FEED_FILE))
    monkeypatch.delenv("LAUNCHER_UPDATE_FEED", raising=False)
    monkeypatch.delenv("APPIMAGE", raising=False)
    return folder
