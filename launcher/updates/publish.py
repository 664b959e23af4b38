"""Publishing a release's update feed: `update-feed.json` from the release's files and its pack index.

The release workflow (.github/workflows/release.yml) runs `scripts/make-update-feed` over the
installers it built, and publishes the feed beside them; docs/releasing.md is the procedure. For
each file the feed records its size and sha256 and, when the release secret
LAUNCHER_UPDATE_SIGNING_KEY holds the signing key, an ed25519 signature over
`signing.statement(version, name, size, sha256, purpose=signing.file_purpose(platform, kind))`
(launcher/updates/signing.py). Without the secret (a
fork) the feed is written unsigned with a warning: an app then sees the release but installs none of
its files, because `signing.verify` refuses an unsigned one.

Release files are told apart by the names scripts/build-app and packaging/linux/build-appimage give
them (`recognise`): the version in a name must be the feed's, so a tag that does not match
pyproject.toml's version fails here instead of publishing a feed that offers last release's files.

Engine packs are copied from the pack index that `scripts/build-gpu-pack --index` writes
(gpu-packs.json), URL as the index has it, each signed over (release version, pack name,
size_bytes, sha256) as a pack: a client verifies a pack with `signing.verify(key, pack.signature,
feed.version, pack.name, pack.size_bytes, pack.sha256, purpose=signing.PACK_PURPOSE)`.

`scripts/update-key` makes the key pair (`key_main`).
"""

from __future__ import annotations

import argparse
import datetime
import hashlib
import json
import os
import re
import sys
import urllib.parse
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey
from packaging.version import InvalidVersion, Version
from pydantic import ValidationError

from launcher.core.errors import UpdateError
from launcher.updates import signing
from launcher.updates.feed import FEED_FILE, FEED_FORMAT, Feed, PackFile, ReleaseFile, is_https, parse_feed

PACK_INDEX_FILE = "gpu-packs.json"
"""The pack index's name among a release's assets (scripts/build-gpu-pack --index writes it)."""


class PublishError(Exception):
    """The feed cannot be written as asked; the message says what to fix."""


@dataclass(frozen=True)
class ReleaseAsset:
    """A file of the release, and the platform and kind (feed.KINDS) it installs as."""

    path: Path
    platform: str
    kind: str


@dataclass(frozen=True)
class _NamePattern:
    pattern: re.Pattern[str]  # with groups `version` and `arch`
    platforms: Mapping[str, str]  # `arch` as the name spells it -> the feed's platform
    kind: str


# The names scripts/build-app gives the installers (and packaging/linux/build-appimage the AppImage).
_NAMES: tuple[_NamePattern, ...] = (
    _NamePattern(
        re.compile(r"launcher-(?P<version>.+?)-linux-(?P<arch>x86_64|arm64)\.tar\.gz"),
        {"x86_64": "linux-x86_64", "arm64": "linux-arm64"},
        "tar.gz",
    ),
    _NamePattern(
        re.compile(r"launcher-(?P<version>.+?)-(?P<arch>x86_64|aarch64)\.AppImage"),
        {"x86_64": "linux-x86_64", "aarch64": "linux-arm64"},
        "appimage",
    ),
    _NamePattern(
        re.compile(r"launcher_(?P<version>.+?)_(?P<arch>amd64|arm64)\.deb"),
        {"amd64": "linux-x86_64", "arm64": "linux-arm64"},
        "deb",
    ),
    _NamePattern(
        re.compile(r"launcher-(?P<version>.+?)-(?P<arch>macos-arm64)\.dmg"), {"macos-arm64": "macos-arm64"}, "dmg"
    ),
    _NamePattern(
        re.compile(r"launcher-(?P<version>.+?)-(?P<arch>windows-x64)-setup\.exe"),
        {"windows-x64": "windows-x64"},
        "setup",
    ),
)

KNOWN_NAMES = (
    "launcher-<version>-linux-x86_64.tar.gz, launcher-<version>-x86_64.AppImage, launcher_<version>_amd64.deb, "
    "launcher-<version>-macos-arm64.dmg, launcher-<version>-windows-x64-setup.exe"
)
"""The release file names this module recognises, for messages."""


def recognise(name: str) -> tuple[str, str, str] | None:
    """(version, platform, kind) of a release file by its name; None for a name no build makes."""
    for known in _NAMES:
        match = known.pattern.fullmatch(name)
        if match:
            return match["version"], known.platforms[match["arch"]], known.kind
    return None


def _files_under(paths: Iterable[Path]) -> list[Path]:
    found: list[Path] = []
    for path in paths:
        if path.is_dir():
            found += sorted(p for p in path.rglob("*") if p.is_file() and not p.name.startswith("."))
        elif path.is_file():
            found.append(path)
        else:
            raise PublishError(f"{path} does not exist.")
    return found


def find_release_files(paths: Iterable[Path], version: str) -> list[ReleaseAsset]:
    """The release files among `paths` (files, or folders searched through). A name no build makes,
    a file of another version or a second file for one platform and kind is an error: a feed missing
    a platform, or offering the wrong file, must not be published."""
    assets: list[ReleaseAsset] = []
    problems: list[str] = []
    seen: dict[tuple[str, str], Path] = {}
    for path in _files_under(paths):
        if path.name == FEED_FILE:
            continue  # a feed written by an earlier run is not a release file
        recognised = recognise(path.name)
        if recognised is None:
            problems.append(f"{path}: not a release file name this script knows ({KNOWN_NAMES})")
            continue
        file_version, platform, kind = recognised
        if file_version != version:
            problems.append(f"{path}: a file of version {file_version}, but the feed is for {version}")
            continue
        if (platform, kind) in seen:
            problems.append(f"{path}: a second {platform} {kind} file (the first is {seen[platform, kind]})")
            continue
        seen[platform, kind] = path
        assets.append(ReleaseAsset(path, platform, kind))
    if problems:
        raise PublishError("These files cannot go into the feed:\n  " + "\n  ".join(problems))
    if not assets:
        raise PublishError("No release files were found, so there is no feed to write.")
    return assets


def signing_key(environ: Mapping[str, str] | None = None) -> Ed25519PrivateKey | None:
    """The signing key from LAUNCHER_UPDATE_SIGNING_KEY; None when it is unset or empty (a fork's
    workflow gets an empty string for a secret it does not have)."""
    text = (os.environ if environ is None else environ).get(signing.SIGNING_KEY_ENV, "").strip()
    if not text:
        return None
    try:
        return signing.private_key(text)
    except UpdateError as err:
        raise PublishError(f"{signing.SIGNING_KEY_ENV} does not hold a signing key: {err}") from err


def sha256_of(path: Path) -> str:
    with path.open("rb") as file:
        return hashlib.file_digest(file, "sha256").hexdigest()


def _url(name: str, base_url: str | None) -> str:
    # Relative by default: the app resolves it against the feed's own URL, so a feed beside its files
    # works from any folder or mirror. A base URL pins the files to one release's download folder.
    quoted = urllib.parse.quote(name)
    return quoted if not base_url else base_url.rstrip("/") + "/" + quoted


def release_file(
    asset: ReleaseAsset, version: str, key: Ed25519PrivateKey | None, base_url: str | None = None
) -> ReleaseFile:
    """The feed's entry for one release file."""
    name = asset.path.name
    size = asset.path.stat().st_size
    if size == 0:
        raise PublishError(f"{asset.path} is empty.")
    digest = sha256_of(asset.path)
    return ReleaseFile(
        platform=asset.platform,
        kind=asset.kind,
        name=name,
        url=_url(name, base_url),
        size=size,
        sha256=digest,
        signature=(
            signing.sign(key, version, name, size, digest, purpose=signing.file_purpose(asset.platform, asset.kind))
            if key
            else None
        ),
    )


def read_packs(index: Path, version: str, key: Ed25519PrivateKey | None) -> list[PackFile]:
    """The packs of a pack index, each signed. A pack file lying beside the index is checked against
    its entry first, so the signature vouches for the bytes that are published, not only for what the
    index says about them."""
    try:
        data: Any = json.loads(index.read_text(encoding="utf-8"))
    except (OSError, ValueError) as err:
        raise PublishError(f"The pack index {index} cannot be read: {err}") from err
    entries = data.get("packs") if isinstance(data, dict) else None
    if not isinstance(entries, list) or not all(isinstance(entry, dict) for entry in entries):
        raise PublishError(f"{index} is not a pack index: it has no list of packs.")
    packs: list[PackFile] = []
    for entry in entries:
        try:
            pack = PackFile.model_validate({**entry, "signature": None})
        except ValidationError as err:
            problem = "; ".join(f"{'.'.join(map(str, e['loc']))}: {e['msg']}" for e in err.errors()[:3])
            raise PublishError(f"A pack in {index} is not valid ({problem}).") from err
        beside = index.parent / urllib.parse.unquote(pack.url.rsplit("/", 1)[-1])
        if beside.is_file():
            size = beside.stat().st_size
            if size != pack.size_bytes or sha256_of(beside) != pack.sha256:
                raise PublishError(
                    f"{beside} does not match its entry in {index} (size {size}, entry {pack.size_bytes}, "
                    "or its sha256 differs): rebuild the index with scripts/build-gpu-pack --index."
                )
        if key:
            pack.signature = signing.sign(
                key, version, pack.name, pack.size_bytes, pack.sha256, purpose=signing.PACK_PURPOSE
            )
        packs.append(pack)
    return packs


def build_feed(
    version: str,
    date: datetime.date,
    notes: str,
    assets: Sequence[ReleaseAsset],
    *,
    key: Ed25519PrivateKey | None,
    base_url: str | None = None,
    notes_url: str | None = None,
    pack_index: Path | None = None,
) -> Feed:
    """The feed of a release: its files (`find_release_files`) and the packs of `pack_index`."""
    try:
        Version(version)
    except InvalidVersion as err:
        raise PublishError(f"{version!r} is not a version (the feed needs one like 0.2.0).") from err
    if notes_url and not is_https(notes_url):
        raise PublishError(f"The notes URL {notes_url!r} is not an https:// URL; the app shows no other link.")
    return Feed(
        feed=FEED_FORMAT,
        version=version,
        date=date,
        notes=notes,
        notes_url=notes_url or None,
        files=[release_file(asset, version, key, base_url) for asset in assets],
        packs=read_packs(pack_index, version, key) if pack_index else [],
    )


def check_written(text: str, source: str, public: str | None) -> Feed:
    """Read the written feed back the way the app does and, when it is signed, verify every signature
    with `public`: what is published is then what the app accepts."""
    feed = parse_feed(text, source)
    if public:
        for file in feed.files:
            purpose = signing.file_purpose(file.platform, file.kind)
            signing.verify(public, file.signature, feed.version, file.name, file.size, file.sha256, purpose=purpose)
        for pack in feed.packs:
            signing.verify(
                public,
                pack.signature,
                feed.version,
                pack.name,
                pack.size_bytes,
                pack.sha256,
                purpose=signing.PACK_PURPOSE,
            )
    return feed


def _mb(size: int) -> str:
    return f"{size / 1e6:,.1f} MB"


def _say(text: str) -> None:
    print(f"[make-update-feed] {text}", flush=True)


def _warn(text: str) -> None:
    print(f"[make-update-feed] WARNING: {text}", file=sys.stderr, flush=True)


def _feed_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="scripts/make-update-feed",
        description="Write a release's update feed (update-feed.json) from its installers and pack index: size, "
        f"sha256 and, with the key in ${signing.SIGNING_KEY_ENV}, a signature for each file.",
    )
    parser.add_argument(
        "paths",
        nargs="+",
        type=Path,
        metavar="PATH",
        help=f"release files, or folders holding them (searched through); known names: {KNOWN_NAMES}",
    )
    parser.add_argument("--version", required=True, help="the release's version (0.2.0); every file name must carry it")
    parser.add_argument(
        "--date", type=datetime.date.fromisoformat, help="the release date, YYYY-MM-DD (default: today, UTC)"
    )
    notes = parser.add_mutually_exclusive_group()
    notes.add_argument("--notes", default="", help="the release notes the app shows")
    notes.add_argument("--notes-file", type=Path, metavar="FILE", help="the release notes, from a file")
    parser.add_argument("--notes-url", metavar="URL", help="the release's page, where the full notes are")
    parser.add_argument(
        "--base-url",
        metavar="URL",
        help="the folder the files are downloaded from; by default their URLs are just their names, "
        "relative to the feed's own URL",
    )
    parser.add_argument(
        "--pack-index", type=Path, metavar="FILE", help=f"the release's GPU pack index ({PACK_INDEX_FILE})"
    )
    parser.add_argument(
        "--out", type=Path, default=Path(FEED_FILE), help=f"where to write the feed (default: {FEED_FILE})"
    )
    parser.add_argument(
        "--public-key",
        default=os.environ.get(signing.PUBLIC_KEY_ENV, ""),
        metavar="BASE64",
        help="the public key the app builds carry; the signing key must be its pair "
        f"(default: ${signing.PUBLIC_KEY_ENV}; empty: not checked)",
    )
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """scripts/make-update-feed."""
    args = _feed_parser().parse_args(argv)
    try:
        return _make_feed(args)
    except (PublishError, UpdateError, OSError) as err:
        print(f"[make-update-feed] error: {err}", file=sys.stderr)
        return 1


def _make_feed(args: argparse.Namespace) -> int:
    key = signing_key()
    built_with: str = args.public_key.strip()
    if key is not None and built_with and built_with != signing.public_text(key):
        raise PublishError(
            f"The signing key in {signing.SIGNING_KEY_ENV} is not the pair of the public key {built_with} the apps "
            f"were built with, so they would refuse every file; its pair is {signing.public_text(key)}."
        )
    notes = args.notes_file.read_text(encoding="utf-8") if args.notes_file else args.notes
    feed = build_feed(
        args.version,
        args.date or datetime.datetime.now(datetime.UTC).date(),
        notes.strip(),
        find_release_files(args.paths, args.version),
        key=key,
        base_url=args.base_url,
        notes_url=args.notes_url,
        pack_index=args.pack_index,
    )
    text = feed.to_json()
    check_written(text, str(args.out), signing.public_text(key) if key else None)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(text, encoding="utf-8")
    state = "signed" if key else "UNSIGNED"
    for file in feed.files:
        _say(f"{file.platform:<13} {file.kind:<8} {file.name}: {_mb(file.size)}, {state}")
    for pack in feed.packs:
        _say(f"pack {pack.name}: {_mb(pack.size_bytes)}, {state}")
    _say(f"wrote {args.out}: launcher {feed.version}, {len(feed.files)} file(s), {len(feed.packs)} pack(s), {state}")
    # Last, where a release log ends: an unsigned feed is allowed (a fork has no key) but never silent.
    if key is None:
        _warn(
            f"{signing.SIGNING_KEY_ENV} is not set, so the feed is UNSIGNED: apps will show this release but "
            "refuse to install its files (docs/releasing.md, 'The update key')."
        )
        if built_with:
            _warn(f"the builds carry a public key (${signing.PUBLIC_KEY_ENV}), so they expect a signed feed.")
    elif not built_with:
        _warn(f"no public key given (${signing.PUBLIC_KEY_ENV}) to check the signing key against.")
    return 0


def key_main(argv: Sequence[str] | None = None) -> int:
    """scripts/update-key: a new key pair, and where each half goes."""
    parser = argparse.ArgumentParser(
        prog="scripts/update-key",
        description="Make the update signing key pair and say where each half goes (docs/releasing.md).",
    )
    parser.add_argument(
        "--public",
        action="store_true",
        help=f"instead, print the public key of the signing key in ${signing.SIGNING_KEY_ENV} "
        f"(to check it against the repository variable {signing.PUBLIC_KEY_ENV})",
    )
    args = parser.parse_args(argv)
    if args.public:
        try:
            key = signing_key()
        except PublishError as err:
            print(f"[update-key] error: {err}", file=sys.stderr)
            return 1
        if key is None:
            print(f"[update-key] error: {signing.SIGNING_KEY_ENV} is not set.", file=sys.stderr)
            return 1
        print(signing.public_text(key))
        return 0
    seed, public = signing.new_key()
    print(
        "A new update signing key pair. In the repository's Settings > Secrets and variables > Actions:\n"
        "\n"
        f"  secret   {signing.SIGNING_KEY_ENV:<27} {seed}\n"
        f"  variable {signing.PUBLIC_KEY_ENV:<27} {public}\n"
        "\n"
        "or with the GitHub CLI (the first asks for the value, so it stays out of the shell's history):\n"
        "\n"
        f"  gh secret set {signing.SIGNING_KEY_ENV}\n"
        f"  gh variable set {signing.PUBLIC_KEY_ENV} --body '{public}'\n"
        "\n"
        "Keep the signing key in the secret and an offline backup only: whoever holds it can sign updates that\n"
        "every installed app accepts. Apps built with this public key install only files signed with this key,\n"
        "so a new pair means users of older builds update by hand once (docs/releasing.md)."
    )
    return 0
