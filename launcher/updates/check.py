"""Asking whether a newer release exists: one GET of the release feed, and when to ask.

What is sent is a plain GET of the feed URL with a User-Agent naming the app and its version, and
nothing else about the user or the machine; the answer is read with `launcher.updates.feed`. The app
asks at start and once a day (`due`): never when the user turned the check off in Settings, never
when they chose to be offline (HF_HUB_OFFLINE / TRANSFORMERS_OFFLINE, the same switch the model
downloads honour), and never when the build knows no feed. Nothing is downloaded here; an offer
only says what a download would fetch (`launcher.updates.download` fetches it when the user asks).

What the last check found is remembered (`remembered_offer`), so an app started again the same day
shows the note of a release it already knows without asking the feed again, unless the user
answered "Later" to that release. A failed check is retried at the app's hourly look three times,
then once a day (`due`).
"""

from __future__ import annotations

import json
import time
from dataclasses import dataclass, field
from typing import Any

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
    "offer_for",
    "record_check",
    "record_failure",
    "record_later",
    "remembered_offer",
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
    return offer_for(fetch_feed(url))


def offer_for(feed: Feed) -> UpdateOffer | None:
    """What `feed` offers this installation: None when its release is not newer than this version."""
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


# -- when to check, and what the last check found ----------------------------------------------------
#
# `<state dir>/update-check.json` remembers: when the feed was last read (`checked_at`), the feed that
# check found when it offered a newer release (`offer_feed`, with the URL it came from), the version
# the user answered "Later" to and when (`later_version`, `later_at`), and failed checks in a row
# (`failures`, `failed_at`).


def _state() -> dict[str, Any]:
    try:
        data = json.loads((paths.state_dir() / CHECK_STATE_FILE).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return {}
    return data if isinstance(data, dict) else {}


def _write_state(data: dict[str, Any]) -> None:
    target = paths.state_dir() / CHECK_STATE_FILE
    try:
        target.parent.mkdir(parents=True, exist_ok=True)
        temporary = target.with_name(f".{target.name}.tmp")
        temporary.write_text(json.dumps(data), encoding="utf-8")
        temporary.replace(target)
    except OSError:
        pass  # a state folder that cannot be written costs only an extra check at the next start


def _number(data: dict[str, Any], key: str) -> float | None:
    value = data.get(key)
    return float(value) if isinstance(value, int | float) and not isinstance(value, bool) else None


def last_check() -> float | None:
    """When the feed was last read (time.time()), None when never (or the record is unreadable)."""
    return _number(_state(), "checked_at")


def record_check(*, now: float | None = None, offer: UpdateOffer | None = None, url: str | None = None) -> None:
    """Remember that the feed (`url`, default the build's) was read now, and the offer it made (None:
    up to date). Call it after a check that reached the feed; it clears the failures, and keeps the
    user's "Later"."""
    state = _state()
    record: dict[str, Any] = {key: state[key] for key in ("later_version", "later_at") if key in state}
    record["checked_at"] = time.time() if now is None else now
    if offer is not None:
        record["offer_feed"] = offer.feed.model_dump(mode="json", exclude_none=True)
        record["offer_url"] = url or feed_url()
    _write_state(record)


def record_failure(*, now: float | None = None) -> None:
    """Remember a scheduled check that did not reach the feed (counted: see `due`)."""
    state = _state()
    failures = _number(state, "failures") or 0
    _write_state({**state, "failures": int(failures) + 1, "failed_at": time.time() if now is None else now})


def record_later(version: str, *, now: float | None = None) -> None:
    """The user answered "Later" to `version`: its note is not shown again until a check reads the feed anew."""
    _write_state({**_state(), "later_version": version, "later_at": time.time() if now is None else now})


def remembered_offer(settings: Settings) -> UpdateOffer | None:
    """The offer the last check found, without asking the feed: shown when the app starts again before
    the next check is due. None when the check is off or the user is offline (the same switches as
    the check's), when that release is not newer than this version any more (it was installed), when
    the feed URL changed, or when the user answered "Later" to it after that check."""
    if not settings.check_for_updates or is_offline():
        return None
    state = _state()
    data = state.get("offer_feed")
    if not isinstance(data, dict) or state.get("offer_url") != feed_url():
        return None
    try:
        feed = Feed.model_validate(data)
    except ValueError:
        return None  # written by another version of the app: the next check writes it again
    later_at, checked_at = _number(state, "later_at"), _number(state, "checked_at")
    if state.get("later_version") == feed.version and later_at is not None and (checked_at or 0) <= later_at:
        return None
    return offer_for(feed)


MAX_QUICK_RETRIES = 3
"""Failed checks in a row the app retries at its hourly look; after them, the next waits a day."""


def due(settings: Settings, *, now: float | None = None) -> bool:
    """True when the app should read the feed now: the user allows the check, is not offline, the
    build knows a feed, and the last check is a day old (or never happened). A check that fails is
    tried again at the app's next hourly look, up to MAX_QUICK_RETRIES times in a row; then once a day
    (a machine without the network, or a feed that is down, is not asked every hour for ever)."""
    if not settings.check_for_updates or is_offline() or not feed_url():
        return False
    state = _state()
    now = time.time() if now is None else now

    def recent(at: float | None) -> bool:
        # A time in the future means the clock was set back: not recent, check rather than wait.
        return at is not None and 0 <= now - at < CHECK_INTERVAL_S

    if recent(_number(state, "checked_at")):
        return False
    failures = _number(state, "failures") or 0
    return not (failures >= MAX_QUICK_RETRIES and recent(_number(state, "failed_at")))


def check_when_due(settings: Settings, *, now: float | None = None) -> UpdateOffer | None:
    """`check()` when `due(settings)`, recording the check when the feed answered; None when not
    due or up to date. A failed check raises UpdateError and is counted (`record_failure`), so the
    next look tries again (see `due`)."""
    if not due(settings, now=now):
        return None
    try:
        offer = check()
    except UpdateError:
        record_failure(now=now)
        raise
    record_check(now=now, offer=offer)
    return offer
