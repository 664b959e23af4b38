"""Asking whether a newer release exists: one GET of the release feed, and when to ask.

What is sent is a plain GET of the feed URL with a User-Agent naming the app and its version, and
nothing else about the user or the machine; the answer is read with `launcher.updates.feed`. The app
asks at start and once a day (`due`): never when the user turned the check off in Settings, never
when they chose to be offline (HF_HUB_OFFLINE / TRANSFORMERS_OFFLINE, the same switch the model
downloads honour), and never when the build knows no feed. Nothing is downloaded here; an offer
only says what a download would fetch (`launcher.updates.download` fetches it when the user asks).
"""

from __future__ import annotations

import json
import time
from dataclasses import dataclass, field

import httpx

from launcher.catalog.hub_client import is_offline
from launcher.core import paths
from launcher.core.errors import EngineError, UpdateError
from launcher.core.settings import Settings
from launcher.core.units import format_bytes
from launcher.engines.llamacpp.gpu_packs import installed_packs
from launcher.updates.current import (
    Installation,
    current_version,
    deb_how,
    detect_installation,
    feed_url,
    this_platform,
    update_public_key,
)
from launcher.updates.feed import KINDS, Feed, PackFile, ReleaseFile, is_newer, parse_feed

__all__ = [
    "CHECK_INTERVAL_S",
    "Installation",
    "UpdateOffer",
    "check",
    "check_when_due",
    "current_version",
    "detect_installation",
    "due",
    "feed_url",
    "fetch_feed",
    "last_check",
    "record_check",
    "this_platform",
    "update_public_key",
]

CHECK_INTERVAL_S = 24 * 3600
"""The app checks at start and then once a day."""
MAX_FEED_BYTES = 1024 * 1024
"""A feed is a few KB (its notes the longest part); a body larger than this is refused unread, so a
wrong or hostile URL cannot fill the app's memory."""
CHECK_STATE_FILE = "update-check.json"


@dataclass(frozen=True)
class UpdateOffer:
    """A newer release, and what updating this installation to it would download."""

    feed: Feed
    current: str
    installation: Installation
    file: ReleaseFile | None  # None: the release has no file for this installation's platform and kind
    packs: tuple[PackFile, ...] = field(default=())  # new builds of the GPU packs installed here

    @property
    def version(self) -> str:
        """The new release's version."""
        return self.feed.version

    @property
    def size(self) -> int:
        """Bytes a download fetches: the app's file and the packs."""
        return (self.file.size if self.file else 0) + sum(pack.size_bytes for pack in self.packs)

    @property
    def how(self) -> str:
        """How this installation is updated to this release (one sentence); for a .deb, with the
        release's real package name."""
        if self.installation.kind == "deb" and self.file is not None:
            return deb_how(self.file.name)
        return self.installation.how

    def summary(self) -> str:
        """One line: "launcher 0.2.0 (2026-12-02) is available; you have 0.1.0 (84.0 MiB)"."""
        line = f"launcher {self.feed.version} ({self.feed.date.isoformat()}) is available; you have {self.current}"
        if self.file is None and not self.installation.can_update:
            return f"{line} ({self.how})"
        if self.file is None:
            return f"{line} (the release has no {self.installation.kind} file for {self.installation.platform})"
        return f"{line} ({format_bytes(self.size)})"


def fetch_feed(url: str, *, timeout: float = 15.0) -> Feed:
    """GET the feed at `url` and parse it; any failure is an UpdateError saying what went wrong. At
    most MAX_FEED_BYTES of the body are read."""
    headers = {"User-Agent": f"launcher/{current_version()}"}
    try:
        with httpx.stream("GET", url, headers=headers, timeout=timeout, follow_redirects=True) as response:
            if response.status_code != 200:
                raise UpdateError(f"The update feed at {url} answered HTTP {response.status_code}; try again later.")
            body = _read_at_most(response, MAX_FEED_BYTES, url)
    except (httpx.InvalidURL, httpx.UnsupportedProtocol) as err:
        raise UpdateError(f"The update feed URL {url!r} is not an http(s) URL ({err}).") from err
    except httpx.HTTPError as err:
        raise UpdateError(f"Could not reach the update feed at {url} ({err or type(err).__name__}).") from err
    return parse_feed(body, url)


def _read_at_most(response: httpx.Response, limit: int, url: str) -> bytes:
    """The body, or UpdateError as soon as it is longer than `limit` (decoded: a compressed body counts
    at its real size)."""
    too_big = UpdateError(
        f"The update feed at {url} is larger than {format_bytes(limit)}, which no feed is; it was not read."
    )
    declared = response.headers.get("Content-Length", "")
    if declared.isdigit() and int(declared) > limit and not response.headers.get("Content-Encoding"):
        raise too_big
    body = bytearray()
    for chunk in response.iter_bytes():
        body += chunk
        if len(body) > limit:
            raise too_big
    return bytes(body)


def check(*, url: str | None = None) -> UpdateOffer | None:
    """The offer of a newer release than the one running, or None when this one is the newest.

    `url` defaults to the build's feed (`feed_url`); a build without one raises UpdateError.
    """
    url = url or feed_url()
    if not url:
        raise UpdateError("This build knows no update feed; download new versions from the project's releases page.")
    feed = fetch_feed(url)
    current = current_version()
    if not is_newer(feed, current):
        return None
    installation = detect_installation()
    file = feed.file_for(installation.platform, installation.kind) if installation.kind in KINDS else None
    return UpdateOffer(feed=feed, current=current, installation=installation, file=file, packs=_pack_updates(feed))


def _pack_updates(feed: Feed) -> tuple[PackFile, ...]:
    """The feed's packs that replace a GPU pack installed here; a pack already at the feed's build
    (the same archive sha256) is not downloaded again."""
    try:
        installed = {pack.name: pack for pack in installed_packs(deep=False)}
    except (OSError, EngineError):
        return ()  # an unreadable packs folder costs only the pack updates, not the app's
    updates = []
    for pack in feed.packs:
        have = installed.get(pack.name)
        if have is None:
            continue
        if have.manifest is not None and have.manifest.entry.sha256 == pack.sha256:
            continue
        updates.append(pack)
    return tuple(updates)


# -- when to check --------------------------------------------------------------------------------


def last_check() -> float | None:
    """When the feed was last read (time.time()), None when never (or the record is unreadable)."""
    try:
        data = json.loads((paths.state_dir() / CHECK_STATE_FILE).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    value = data.get("checked_at") if isinstance(data, dict) else None
    return float(value) if isinstance(value, int | float) else None


def record_check(*, now: float | None = None) -> None:
    """Remember that the feed was read now (call it after a check that reached the feed)."""
    target = paths.state_dir() / CHECK_STATE_FILE
    try:
        target.parent.mkdir(parents=True, exist_ok=True)
        temporary = target.with_name(f".{target.name}.tmp")
        temporary.write_text(json.dumps({"checked_at": time.time() if now is None else now}), encoding="utf-8")
        temporary.replace(target)
    except OSError:
        pass  # a state folder that cannot be written costs only an extra check at the next start


def due(settings: Settings, *, now: float | None = None) -> bool:
    """True when the app should read the feed now: the user allows the check, is not offline, the
    build knows a feed, and the last check is a day old (or never happened)."""
    if not settings.check_for_updates or is_offline() or not feed_url():
        return False
    last = last_check()
    now = time.time() if now is None else now
    # A last check in the future means the clock was set back: check rather than wait for it.
    return last is None or not 0 <= now - last < CHECK_INTERVAL_S


def check_when_due(settings: Settings, *, now: float | None = None) -> UpdateOffer | None:
    """`check()` when `due(settings)`, recording the check when the feed answered; None when not
    due or up to date. A failed check raises UpdateError and is not recorded, so the next start tries again."""
    if not due(settings, now=now):
        return None
    offer = check()
    record_check(now=now)
    return offer
