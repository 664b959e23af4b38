"""The release feed: what the newest release is, and per platform the file that installs it.

The release workflow publishes `update-feed.json` with every release (`launcher.updates.publish`
writes it); the app reads it with `parse_feed`. Each file carries its size, its sha256 and an
ed25519 signature (`launcher.updates.signing`), so a feed served from anywhere cannot make the app
install a file the release key did not sign. Engine packs are listed in the same feed, in the
GPU pack index's own shape (`packs`), so the feed is also a pack index.

    {"feed": 1, "version": "0.2.0", "date": "2026-12-02", "notes": "...",
     "files": [{"platform": "linux-x86_64", "kind": "tar.gz", "name": "launcher-0.2.0-linux-x86_64.tar.gz",
                "url": "...", "size": 123, "sha256": "...", "signature": "..."}],
     "packs": [{"name": "cuda12-linux-x86_64", "backend": "cuda", ..., "size_bytes": 456, "signature": "..."}]}

Fields this version does not know are ignored: a newer release may say more.
"""

from __future__ import annotations

import datetime
import json
import urllib.parse
from typing import Any, Literal

from packaging.version import InvalidVersion, Version
from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator

from launcher.core.errors import UpdateError

FEED_FILE = "update-feed.json"
"""The feed's file name among a release's assets."""
FEED_FORMAT = 1
"""The feed format this app writes and reads; a feed with a higher one is refused with a clear message."""

Kind = Literal["tar.gz", "appimage", "deb", "dmg", "setup"]
"""How a file installs: the Linux folder tarball, the AppImage, the Debian package, the macOS disk
image holding the .app, the Windows per-user installer."""
KINDS: tuple[str, ...] = ("tar.gz", "appimage", "deb", "dmg", "setup")
SHA256_PATTERN = r"^[0-9a-f]{64}$"


class ReleaseFile(BaseModel):
    """One installable file of a release."""

    model_config = ConfigDict(extra="ignore")

    platform: str  # "linux-x86_64", "macos-arm64", "windows-x64"
    kind: str  # one of KINDS; a kind this version does not know is skipped, not an error
    name: str = Field(pattern=r"^[A-Za-z0-9][A-Za-z0-9._+\-]*$")  # the file name; part of what is signed
    url: str  # absolute, or relative to the feed's own URL
    size: int = Field(gt=0)
    sha256: str = Field(pattern=SHA256_PATTERN)
    signature: str | None = None  # base64 ed25519 over `signing.statement(...)`; None: the build had no key


class PackFile(BaseModel):
    """One engine pack, as the GPU pack index lists it, plus its signature. Only the fields the
    updater needs are read here; the pack's own module reads the rest."""

    model_config = ConfigDict(extra="allow")

    name: str = Field(pattern=r"^[a-z0-9][a-z0-9._\-]*$")
    url: str
    size_bytes: int = Field(gt=0)
    sha256: str = Field(pattern=SHA256_PATTERN)
    engine_version: str
    signature: str | None = None


class Feed(BaseModel):
    """The newest release."""

    model_config = ConfigDict(extra="ignore")

    feed: int = Field(ge=1)
    version: str
    date: datetime.date
    notes: str = ""
    notes_url: str | None = None
    files: list[ReleaseFile] = Field(default_factory=list)
    packs: list[PackFile] = Field(default_factory=list)

    @field_validator("notes_url")
    @classmethod
    def _an_https_link(cls, value: str | None) -> str | None:
        # The app shows it as a link the user clicks: only a web page, never file:, javascript: or
        # another scheme a desktop would hand to some program. Anything else is dropped, not an error.
        return value if value is not None and is_https(value) else None

    @field_validator("version")
    @classmethod
    def _a_version(cls, value: str) -> str:
        try:
            Version(value)
        except InvalidVersion as err:
            raise ValueError(f"{value!r} is not a version") from err
        return value

    @property
    def parsed_version(self) -> Version:
        """The version, comparable."""
        return Version(self.version)

    def file_for(self, platform: str, kind: str) -> ReleaseFile | None:
        """The file that installs this release on `platform` the way `kind` installs."""
        return next((f for f in self.files if f.platform == platform and f.kind == kind), None)

    def to_json(self) -> str:
        """The feed as the release publishes it."""
        return json.dumps(self.model_dump(mode="json", exclude_none=True), indent=2) + "\n"


def parse_feed(text: str | bytes, source: str) -> Feed:
    """Read a feed; a broken or too-new one raises UpdateError naming `source`. Relative file URLs
    are made absolute against `source` when it is a URL."""
    try:
        data: Any = json.loads(text)
    except ValueError as err:
        raise UpdateError(f"The update feed at {source} is not JSON ({err}).") from err
    if isinstance(data, dict) and isinstance(data.get("feed"), int) and data["feed"] > FEED_FORMAT:
        raise UpdateError(
            f"The update feed at {source} has format {data['feed']}, newer than this app reads ({FEED_FORMAT}); "
            "download the new version from the project's releases page."
        )
    try:
        feed = Feed.model_validate(data)
    except ValidationError as err:
        problems = "; ".join(f"{'.'.join(map(str, e['loc'])) or 'feed'}: {e['msg']}" for e in err.errors()[:3])
        raise UpdateError(f"The update feed at {source} is not valid ({problems}).") from err
    if "://" in source:
        for file in feed.files:
            file.url = urllib.parse.urljoin(source, file.url)
        for pack in feed.packs:
            pack.url = urllib.parse.urljoin(source, pack.url)
    return feed


def is_https(url: str) -> bool:
    """True for an absolute https:// URL with a host (what the app may show as a link)."""
    parsed = urllib.parse.urlsplit(url.strip())
    return parsed.scheme.lower() == "https" and bool(parsed.netloc) and not any(c.isspace() for c in url.strip())


def is_newer(feed: Feed, current: str) -> bool:
    """True when the feed's release is newer than `current` (an unreadable current version is older)."""
    try:
        return feed.parsed_version > Version(current)
    except InvalidVersion:
        return True
