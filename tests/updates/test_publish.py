"""The release feed as the release workflow makes it: scripts/make-update-feed over release files,
read back with the app's own parser and verified with the app's own signature check.

- Signed with the key in LAUNCHER_UPDATE_SIGNING_KEY: each file's size, sha256 and signature are
  right, and the app's `signing.verify` accepts them with the pair's public key and only with it.
- Without the key the feed is written unsigned with a warning, and `verify` refuses its files.
- The GPU pack index (made by scripts/build-gpu-pack --index) is carried over, its packs signed.
- A file name no build makes, a file of another version, or a signing key that is not the pair of
  the public key the apps were built with stops the script with a message naming the problem.
- The names scripts/build-app and packaging/linux/build-appimage give the installers are the ones
  the script recognises; scripts/update-key makes a pair that signs and verifies; scripts/build-app
  (tools/build_app.py) records the update key and feed in build_info.json.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from launcher.core.errors import UpdateError
from launcher.engines.llamacpp import gpu_packs
from launcher.updates import publish, signing
from launcher.updates.feed import FEED_FILE, Feed, parse_feed
from tools import build_app

ROOT = Path(__file__).resolve().parents[2]
MAKE_FEED = ROOT / "scripts" / "make-update-feed"
UPDATE_KEY = ROOT / "scripts" / "update-key"
VERSION = "0.2.0"
FEED_URL = "https://releases.example/download/v0.2.0/update-feed.json"

# The release files, named as the builds name them, in the folders the workflow downloads them to.
RELEASE = {
    "installer-linux/launcher-0.2.0-linux-x86_64.tar.gz": ("linux-x86_64", "tar.gz"),
    "installer-linux/launcher_0.2.0_amd64.deb": ("linux-x86_64", "deb"),
    "installer-linux/launcher-0.2.0-x86_64.AppImage": ("linux-x86_64", "appimage"),
    "installer-macos/launcher-0.2.0-macos-arm64.dmg": ("macos-arm64", "dmg"),
    "installer-windows/launcher-0.2.0-windows-x64-setup.exe": ("windows-x64", "setup"),
}


def _env(key: str | None = None, public: str | None = None) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("LAUNCHER_UPDATE_")}
    if key is not None:
        env[signing.SIGNING_KEY_ENV] = key
    if public is not None:
        env[signing.PUBLIC_KEY_ENV] = public
    return env


def _run(script: Path, *args: str | Path, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, str(script), *map(str, args)], capture_output=True, text=True, env=env, timeout=120
    )


def _release(folder: Path) -> dict[str, bytes]:
    """Made-up release files of different sizes; their contents by file name."""
    contents: dict[str, bytes] = {}
    for number, relative in enumerate(RELEASE):
        data = os.urandom(1000 + 37 * number)
        path = folder / relative
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(data)
        contents[path.name] = data
    return contents


def _make_feed(tmp_path: Path, *args: str | Path, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    return _run(
        MAKE_FEED,
        "--version",
        VERSION,
        "--date",
        "2026-12-02",
        "--out",
        tmp_path / "out" / FEED_FILE,
        *args,
        env=env,
    )


def _read_feed(tmp_path: Path) -> Feed:
    return parse_feed((tmp_path / "out" / FEED_FILE).read_text(encoding="utf-8"), FEED_URL)


def test_a_signed_feed_lists_every_file_with_size_hash_and_a_signature_the_app_accepts(tmp_path: Path) -> None:
    contents = _release(tmp_path / "artifacts")
    (tmp_path / "notes.md").write_text("## What's changed\n\n- updates that users can trust\n", encoding="utf-8")
    key, public = signing.new_key()
    result = _make_feed(
        tmp_path,
        "--notes-file",
        tmp_path / "notes.md",
        "--notes-url",
        "https://releases.example/tag/v0.2.0",
        tmp_path / "artifacts",
        env=_env(key, public),
    )
    assert result.returncode == 0, result.stderr
    assert "WARNING" not in result.stderr
    feed = _read_feed(tmp_path)
    assert (feed.version, feed.date.isoformat()) == (VERSION, "2026-12-02")
    assert feed.notes.startswith("## What's changed") and "trust" in feed.notes
    assert feed.notes_url == "https://releases.example/tag/v0.2.0"
    assert sorted((f.platform, f.kind) for f in feed.files) == sorted(RELEASE.values())
    _, other_public = signing.new_key()
    for file in feed.files:
        data = contents[file.name]
        assert file.size == len(data)
        assert file.sha256 == hashlib.sha256(data).hexdigest()
        # Relative in the feed, so the app finds each file beside the feed it read.
        assert file.url == FEED_URL.rsplit("/", 1)[0] + "/" + file.name
        signing.verify(
            public,
            file.signature,
            feed.version,
            file.name,
            file.size,
            file.sha256,
            purpose=signing.file_purpose(file.platform, file.kind),
        )
        with pytest.raises(UpdateError, match="does not verify"):
            signing.verify(
                other_public,
                file.signature,
                feed.version,
                file.name,
                file.size,
                file.sha256,
                purpose=signing.file_purpose(file.platform, file.kind),
            )
        with pytest.raises(UpdateError, match="does not verify"):  # the signature binds the release's version
            signing.verify(
                public,
                file.signature,
                "0.3.0",
                file.name,
                file.size,
                file.sha256,
                purpose=signing.file_purpose(file.platform, file.kind),
            )
    assert "signed" in result.stdout and "UNSIGNED" not in result.stdout


def test_without_the_key_the_feed_is_unsigned_with_a_warning_and_the_app_refuses_its_files(tmp_path: Path) -> None:
    _release(tmp_path / "artifacts")
    _, public = signing.new_key()
    result = _make_feed(tmp_path, tmp_path / "artifacts", env=_env(key=""))  # a fork: the secret is empty
    assert result.returncode == 0, result.stderr
    assert "WARNING" in result.stderr and "UNSIGNED" in result.stderr
    assert signing.SIGNING_KEY_ENV in result.stderr
    feed = _read_feed(tmp_path)
    assert len(feed.files) == len(RELEASE)
    for file in feed.files:
        assert file.signature is None
        with pytest.raises(UpdateError, match="not signed"):
            signing.verify(
                public,
                file.signature,
                feed.version,
                file.name,
                file.size,
                file.sha256,
                purpose=signing.file_purpose(file.platform, file.kind),
            )
        with pytest.raises(UpdateError, match="no update key"):  # and a build without a key trusts nothing
            signing.verify(
                None,
                file.signature,
                feed.version,
                file.name,
                file.size,
                file.sha256,
                purpose=signing.file_purpose(file.platform, file.kind),
            )


def test_the_builds_public_key_without_the_secret_is_said_too(tmp_path: Path) -> None:
    _release(tmp_path / "artifacts")
    _, public = signing.new_key()
    result = _make_feed(tmp_path, tmp_path / "artifacts", env=_env(public=public))
    assert result.returncode == 0, result.stderr
    assert "UNSIGNED" in result.stderr and "expect a signed feed" in result.stderr


def test_a_signing_key_that_is_not_the_builds_pair_is_refused(tmp_path: Path) -> None:
    _release(tmp_path / "artifacts")
    key, _ = signing.new_key()
    _, builds_public = signing.new_key()
    result = _make_feed(tmp_path, tmp_path / "artifacts", env=_env(key, builds_public))
    assert result.returncode == 1
    assert "not the pair of the public key" in result.stderr and builds_public in result.stderr
    assert not (tmp_path / "out" / FEED_FILE).exists()


def test_a_signing_key_that_is_not_a_key_is_refused(tmp_path: Path) -> None:
    _release(tmp_path / "artifacts")
    result = _make_feed(tmp_path, tmp_path / "artifacts", env=_env("not a key"))
    assert result.returncode == 1
    assert signing.SIGNING_KEY_ENV in result.stderr and "does not hold a signing key" in result.stderr


def test_a_notes_url_that_is_not_https_is_refused(tmp_path: Path) -> None:
    """The app shows only an https:// link (its parser drops any other): a feed must not lose it silently."""
    _release(tmp_path / "artifacts")
    result = _make_feed(
        tmp_path, "--notes-url", "http://releases.example/tag/v0.2.0", tmp_path / "artifacts", env=_env()
    )
    assert result.returncode == 1
    assert "'http://releases.example/tag/v0.2.0' is not an https:// URL" in result.stderr
    assert not (tmp_path / "out" / FEED_FILE).exists()


def test_a_base_url_makes_the_file_urls_absolute(tmp_path: Path) -> None:
    _release(tmp_path / "artifacts")
    base = "https://github.example/o/r/releases/download/v0.2.0"
    result = _make_feed(tmp_path, "--base-url", base + "/", tmp_path / "artifacts", env=_env())
    assert result.returncode == 0, result.stderr
    feed = parse_feed((tmp_path / "out" / FEED_FILE).read_text(encoding="utf-8"), "https://mirror.example/feed.json")
    assert {file.url for file in feed.files} == {f"{base}/{Path(name).name}" for name in RELEASE}


def _pack(folder: Path, name: str, backend: str, data: bytes, cuda_version: str | None) -> None:
    """A pack and its index entry as scripts/build-gpu-pack writes them."""
    (folder / f"{name}.tar.gz").write_bytes(data)
    entry = {
        "name": name,
        "backend": backend,
        "os": "linux",
        "arch": "x86_64",
        "engine_version": "0.3.36",
        "url": f"{name}.tar.gz",
        "sha256": hashlib.sha256(data).hexdigest(),
        "size_bytes": len(data),
        "label": "a pack",
        "cuda_version": cuda_version,
        "min_compute": [5, 0] if cuda_version else None,
    }
    (folder / f"{name}.json").write_text(json.dumps(entry), encoding="utf-8")


def _pack_index(tmp_path: Path) -> tuple[Path, str]:
    packs = tmp_path / "gpu-packs"
    packs.mkdir()
    _pack(packs, "cuda12-linux-x86_64", "cuda", os.urandom(3000), "12.4")
    _pack(packs, "vulkan-linux-x86_64", "vulkan", os.urandom(2000), None)
    base = "https://github.example/o/r/releases/download/v0.2.0"
    made = _run(ROOT / "scripts" / "build-gpu-pack", "--index", packs, "--base-url", base, env=_env())
    assert made.returncode == 0, made.stderr
    return packs / publish.PACK_INDEX_FILE, base


def test_the_pack_index_is_carried_over_with_each_pack_signed(tmp_path: Path) -> None:
    _release(tmp_path / "artifacts")
    index, base = _pack_index(tmp_path)
    key, public = signing.new_key()
    result = _make_feed(tmp_path, "--pack-index", index, tmp_path / "artifacts", env=_env(key, public))
    assert result.returncode == 0, result.stderr
    feed = _read_feed(tmp_path)
    listed = json.loads(index.read_text(encoding="utf-8"))["packs"]
    assert [pack.name for pack in feed.packs] == [entry["name"] for entry in listed]
    for pack, entry in zip(feed.packs, listed, strict=True):
        assert pack.url == entry["url"] == f"{base}/{entry['name']}.tar.gz"  # the URL as the index has it
        assert (pack.size_bytes, pack.sha256, pack.engine_version) == (
            entry["size_bytes"],
            entry["sha256"],
            entry["engine_version"],
        )
        assert pack.model_extra is not None and pack.model_extra["backend"] == entry["backend"]
        signing.verify(
            public, pack.signature, feed.version, pack.name, pack.size_bytes, pack.sha256, purpose=signing.PACK_PURPOSE
        )
    # The feed is also a pack index the app's pack module reads.
    as_index = gpu_packs.read_index((tmp_path / "out" / FEED_FILE).read_text(encoding="utf-8"), "the feed")
    cuda = next(entry for entry in as_index.packs if entry.backend == "cuda")
    assert (cuda.cuda_version, cuda.min_compute) == ("12.4", (5, 0))


def test_a_pack_that_does_not_match_its_index_entry_is_refused(tmp_path: Path) -> None:
    _release(tmp_path / "artifacts")
    index, _ = _pack_index(tmp_path)
    (index.parent / "vulkan-linux-x86_64.tar.gz").write_bytes(os.urandom(2000))  # same size, other bytes
    key, public = signing.new_key()
    result = _make_feed(tmp_path, "--pack-index", index, tmp_path / "artifacts", env=_env(key, public))
    assert result.returncode == 1
    assert "vulkan-linux-x86_64.tar.gz does not match its entry" in result.stderr


def test_a_file_the_script_does_not_recognise_is_reported(tmp_path: Path) -> None:
    _release(tmp_path / "artifacts")
    (tmp_path / "artifacts" / "installer-linux" / "launcher-0.2.0-linux-x86_64.zip").write_bytes(b"zip")
    (tmp_path / "artifacts" / "installer-macos" / "launcher-0.1.0-macos-arm64.dmg").write_bytes(b"old")
    result = _make_feed(tmp_path, tmp_path / "artifacts", env=_env())
    assert result.returncode == 1
    assert "launcher-0.2.0-linux-x86_64.zip: not a release file name this script knows" in result.stderr
    assert "launcher-0.1.0-macos-arm64.dmg: a file of version 0.1.0, but the feed is for 0.2.0" in result.stderr
    assert not (tmp_path / "out" / FEED_FILE).exists()


def test_no_release_files_is_an_error(tmp_path: Path) -> None:
    (tmp_path / "empty").mkdir()
    result = _make_feed(tmp_path, tmp_path / "empty", env=_env())
    assert result.returncode == 1 and "No release files" in result.stderr


def test_the_names_the_builds_give_are_the_names_recognised() -> None:
    """The installer names are spelled in scripts/build-app (tools/build_app.py) and
    packaging/linux/build-appimage; each must be recognised, for the platform and kind the release
    table above gives it."""
    build_app_code = (ROOT / "tools" / "build_app.py").read_text(encoding="utf-8")
    appimage = (ROOT / "packaging" / "linux" / "build-appimage").read_text(encoding="utf-8")
    names = {name.replace("{ver}", VERSION) for name in re.findall(r'DIST / f"(launcher[^"]+)"', build_app_code)}
    made_by_appimage = re.findall(r'dist/(launcher-\$version[^"]+)"', appimage)
    assert len(made_by_appimage) == 1, made_by_appimage
    names.add(made_by_appimage[0].replace("$version", VERSION))  # build-app names it too, to list it
    expected = {Path(relative).name: where for relative, where in RELEASE.items()}
    assert names == set(expected)
    for name in names:
        assert publish.recognise(name) == (VERSION, *expected[name]), name


@pytest.mark.parametrize(
    "name",
    ["cuda12-linux-x86_64.tar.gz", "gpu-packs.json", "launcher-0.2.0-x86_64.AppImage.zsync", "launcher.tar.gz"],
)
def test_other_names_are_not_release_files(name: str) -> None:
    assert publish.recognise(name) is None


def test_update_key_makes_a_pair_and_says_where_each_half_goes(tmp_path: Path) -> None:
    result = _run(UPDATE_KEY, env=_env())
    assert result.returncode == 0, result.stderr
    secret = re.search(rf"secret\s+{signing.SIGNING_KEY_ENV}\s+(\S+)", result.stdout)
    variable = re.search(rf"variable\s+{signing.PUBLIC_KEY_ENV}\s+(\S+)", result.stdout)
    assert secret and variable, result.stdout
    key = signing.private_key(secret[1])
    assert signing.public_text(key) == variable[1]
    signature = signing.sign(key, VERSION, "f", 1, "0" * 64, purpose="test")
    signing.verify(variable[1], signature, VERSION, "f", 1, "0" * 64, purpose="test")
    shown = _run(UPDATE_KEY, "--public", env=_env(secret[1]))
    assert shown.returncode == 0 and shown.stdout.strip() == variable[1]
    missing = _run(UPDATE_KEY, "--public", env=_env())
    assert missing.returncode == 1 and signing.SIGNING_KEY_ENV in missing.stderr


def test_the_new_scripts_are_executable() -> None:
    for script in (MAKE_FEED, UPDATE_KEY):
        assert os.access(script, os.X_OK), script


def test_build_app_records_the_update_key_and_feed(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(build_app, "WORK", tmp_path)
    _, public = signing.new_key()
    assert build_app.update_key_problem(Path(sys.executable), public) is None
    path = build_app.write_build_info(
        VERSION,
        engine="e",
        with_starter=False,
        gpu_pack_index=None,
        update_public_key=public,
        update_feed=FEED_URL,
    )
    info = json.loads(path.read_text(encoding="utf-8"))
    assert (info["update_public_key"], info["update_feed"]) == (public, FEED_URL)
    plain = json.loads(
        build_app.write_build_info(VERSION, engine="e", with_starter=False, gpu_pack_index=None).read_text()
    )
    assert "update_public_key" not in plain and "update_feed" not in plain  # absent: the build carries none


def test_build_app_refuses_a_key_the_app_could_not_read() -> None:
    problem = build_app.update_key_problem(Path(sys.executable), "c2hvcnQ=")
    assert problem is not None and "32" in problem
