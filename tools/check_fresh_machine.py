"""Run the project as a newcomer on a new machine would: a clean Debian 12 root, the README's two commands.

Usage: scripts/check-fresh-machine [--only test|desktop] [--tarball FILE] [--keep] [--mirror URL] [-- PYTEST ARGS]

Machines differ: a package installed by hand long ago, or a CPU feature, can keep a test green
here and red on the next machine. This check starts from nothing (root, Linux, no daemon needed):

 test     mmdebstrap makes a minimal Debian 12 root in a temporary folder; only the README's
          prerequisites go in (packaging/linux/debian-packages.toml [prerequisites]: Python, a
          compiler, Node.js and npm, git); a clone of this checkout's HEAD (committed work only, as
          CI sees it) runs `./scripts/test` in it, in a PID and mount namespace of its own (nothing
          it starts outlives it). Whatever the scripts need beyond the prerequisites they must
          install themselves; the report lists what they installed and, on failure, the end of
          the log.
 desktop  another minimal root with only what a desktop has ([desktop]: libc, the X client
          libraries, GL, fonts, the session bus) gets the tar.gz the `test` part built (or
          --tarball) unpacked; the app runs there on an Xvfb display of this machine and must
          show its window. `ldd` inside the root lists any library the bundle needs and lacks.

It takes 25-40 minutes on 2 cores for `test` (llama.cpp compiles; nothing is cached), 2 minutes for
`desktop`. Run it before resolving work that adds a system dependency. The logs stay in the
printed folder with --keep. Exit code 0 when every part passed.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "packaging" / "linux"))
from debian_packages import install as install_groups  # noqa: E402  (a module of packaging/, not a package)
from debian_packages import packages  # noqa: E402
from virtual_display import DisplayFailed, start_xvfb  # noqa: E402

SUITE = "bookworm"
WINDOW_NAME = "^Launcher$"
WAYLAND_SESSION_LIBRARIES = ("libwayland-",)
LOCAL_CAS = Path("/usr/local/share/ca-certificates")
TRUST_VARIABLE = re.compile(r"(CERT|CA_BUNDLE|CAINFO|CA_CERTS)")
T0 = time.monotonic()


def step(text: str) -> None:
    print(f"[{(time.monotonic() - T0) / 60:6.1f} min] {text}", flush=True)


class CheckFailed(Exception):
    pass


def run(command: list[str], check: bool = True, **kwargs: object) -> subprocess.CompletedProcess[str]:
    return subprocess.run(command, text=True, check=check, **kwargs)  # type: ignore[call-overload, no-any-return]


def make_root(folder: Path, mirror: str) -> Path:
    """A minimal Debian 12 (what `debootstrap --variant=minbase` gives) in `folder`, with this machine's
    DNS and the certificate authorities it trusts (a network that inspects TLS has its own, which a
    machine there is given; the root gets them once ca-certificates is in, see `trust_line`)."""
    sources = [
        f"deb {mirror}/debian {SUITE} main",
        f"deb {mirror}/debian {SUITE}-updates main",
        f"deb {mirror}/debian-security {SUITE}-security main",
    ]
    run(["mmdebstrap", "--quiet", "--variant=minbase", "--mode=root", SUITE, str(folder), *sources])
    shutil.copy2("/etc/resolv.conf", folder / "etc" / "resolv.conf")
    local_cas = folder / "usr" / "local" / "share" / "ca-certificates"
    local_cas.mkdir(parents=True, exist_ok=True)
    for certificate in LOCAL_CAS.glob("*.crt"):
        shutil.copy2(certificate, local_cas / certificate.name)
    return folder


def trust_line() -> str:
    """Shell that adds this machine's own certificate authorities to the root's bundle (after
    ca-certificates is installed)."""
    return "update-ca-certificates >/dev/null" if any(LOCAL_CAS.glob("*.crt")) else "true"


def trust_environment() -> dict[str, str]:
    """This machine's variables that point tools at the CA bundle (pip's PIP_CERT, Node's
    NODE_EXTRA_CA_CERTS, ...): part of how a machine on this network is set up, not of the project."""
    return {name: value for name, value in os.environ.items() if TRUST_VARIABLE.search(name)}


def installed(root: Path) -> set[str]:
    out = run(["chroot", str(root), "dpkg-query", "-W", "-f", "${Package}\\n"], capture_output=True).stdout
    return set(out.split())


def entered(root: Path, script: str, binds: tuple[str, ...] = ()) -> list[str]:
    """The command that runs `script` (bash) with `root` as the whole filesystem: new PID and mount
    namespaces, /proc, /dev, /dev/shm and /sys mounted (and `binds`, host folders at the same place),
    then pivot_root into it, as a machine boots into its root. When the script ends, the kernel ends
    everything it started and the mounts go with the namespace. Not a chroot: sandboxes (Codex's
    bubblewrap) make user namespaces and pivot_root, which the kernel refuses inside a chroot."""
    steps = [
        f"mount --bind {root} {root}",  # pivot_root wants a mount point
        f"mount -t proc proc {root}/proc",
        f"mount --rbind /dev {root}/dev",
        f"mount -t tmpfs tmpfs {root}/dev/shm",
        f"mount -t sysfs sysfs {root}/sys",
        *(f"mkdir -p {root}{path} && mount --bind {path} {root}{path}" for path in binds),
        f"mkdir -p {root}/.host && cd {root} && pivot_root . .host",
        f"exec /bin/bash -c {_quote('umount -l /.host && rmdir /.host && cd / && ' + script)}",
    ]
    return ["unshare", "--pid", "--fork", "--kill-child", "--mount", "--propagation", "private", "sh", "-c",
            " && ".join(steps)]  # fmt: skip


def in_root(root: Path, script: str, log: Path, env: dict[str, str]) -> int:
    """Run `script` inside `root` (see `entered`), its output appended to `log`; its exit code."""
    with log.open("a") as out:
        return subprocess.run(
            entered(root, script), stdout=out, stderr=subprocess.STDOUT, env=env, check=False
        ).returncode


def _quote(text: str) -> str:
    return "'" + text.replace("'", "'\\''") + "'"


def root_env(**extra: str) -> dict[str, str]:
    """A login's environment, not this one's: no venv, no pip or npm settings of this machine."""
    return {
        "PATH": "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin",
        "HOME": "/root",
        "LANG": "C.UTF-8",
        "TERM": "dumb",
        "DEBIAN_FRONTEND": "noninteractive",
        **trust_environment(),
        **extra,
    }


def tail(log: Path, lines: int = 40) -> str:
    return "\n".join(log.read_text(errors="replace").splitlines()[-lines:])


# -- the parts ---------------------------------------------------------------------------------


def check_test(work: Path, mirror: str, pytest_args: list[str]) -> Path:
    """`./scripts/test` from a clone, in a root with only the README's prerequisites; returns the tar.gz it built."""
    root = make_root(work / "test-root", mirror)
    log = work / "test.log"
    prerequisites = packages("prerequisites")
    step(f"clean root made; installing the README's prerequisites: {' '.join(prerequisites)}")
    install = (
        f"apt-get update -qq && apt-get install -y -qq --no-install-recommends {' '.join(prerequisites)}"
        f" && {trust_line()}"
    )
    if in_root(root, install, log, root_env()) != 0:
        raise CheckFailed(f"installing the prerequisites failed:\n{tail(log)}")
    before = installed(root)
    versions = run(
        ["chroot", str(root), "sh", "-c", "python3 --version; node --version; npm --version; gcc --version | head -1"],
        capture_output=True,
        env=root_env(),
    ).stdout
    step("prerequisites in: " + "; ".join(versions.split("\n")).strip("; "))
    run(["git", "clone", "--quiet", "--no-hardlinks", str(ROOT), str(root / "src" / "launcher")])
    head = run(["git", "-C", str(ROOT), "log", "-1", "--format=%h %s"], capture_output=True).stdout.strip()
    step(f"cloned HEAD ({head}); running ./scripts/test -q (log: {log})")
    args = " ".join(_quote(arg) for arg in pytest_args)
    started = time.monotonic()
    code = in_root(root, f"cd /src/launcher && ./scripts/test -q {args}", log, root_env(CI="true"))
    took = (time.monotonic() - started) / 60
    added = sorted(installed(root) - before)
    step(f"./scripts/test exited {code} after {took:.1f} min")
    step(f"the scripts installed {len(added)} Debian packages themselves: {' '.join(added) or 'none'}")
    summary = [line for line in log.read_text(errors="replace").splitlines() if " passed" in line or "PASSED" in line]
    for line in summary[-3:]:
        step(f"  {line.strip()}")
    if code != 0:
        raise CheckFailed(f"./scripts/test failed on the fresh root:\n{tail(log)}")
    tarballs = sorted((root / "src" / "launcher" / "dist").glob("launcher-*-linux-x86_64.tar.gz"))
    if not tarballs:
        raise CheckFailed("./scripts/test passed but built no tar.gz")
    return tarballs[-1]


def app_windows(display: str) -> list[str]:
    found = subprocess.run(
        ["xdotool", "search", "--onlyvisible", "--name", WINDOW_NAME],
        capture_output=True,
        text=True,
        env={**os.environ, "DISPLAY": display},
        check=False,
    )
    return found.stdout.split()


def check_desktop(work: Path, mirror: str, tarball: Path) -> None:
    """The tar.gz in a root with only a desktop's packages opens its window on Xvfb."""
    if install_groups(["frozen-check"]) != 0:  # Xvfb, xdotool and import, on this machine
        raise CheckFailed("cannot install Xvfb and xdotool here")
    root = make_root(work / "desktop-root", mirror)
    log = work / "desktop.log"
    desktop = packages("desktop")
    step(f"clean root made; installing only what a desktop has: {' '.join(desktop)}")
    install = f"apt-get update -qq && apt-get install -y -qq --no-install-recommends {' '.join(desktop)}"
    if in_root(root, install, log, root_env()) != 0:
        raise CheckFailed(f"installing the desktop packages failed:\n{tail(log)}")
    (root / "opt").mkdir(exist_ok=True)
    run(["tar", "-xzf", str(tarball), "-C", str(root / "opt")])
    (folder,) = [path for path in (root / "opt").iterdir() if path.name.startswith("launcher-")]
    inside = "/" + str(folder.relative_to(root))
    step(f"unpacked {tarball.name} into the root's {inside}")
    # ldd with the library path the app's bootloader sets (its _internal folder)
    lacking = run(
        ["chroot", str(root), "sh", "-c", f"find {inside} -name '*.so*' -type f -exec ldd {{}} + | grep 'not found'"],
        capture_output=True,
        check=False,
        env=root_env(LD_LIBRARY_PATH=f"{inside}/_internal"),
    ).stdout
    libraries = sorted({line.split()[0] for line in lacking.splitlines()})
    # Qt's Wayland plugin is loaded only in a Wayland session, which has these (PyInstaller leaves them out).
    unexpected = [name for name in libraries if not name.startswith(WAYLAND_SESSION_LIBRARIES)]
    step(f"ldd: the bundle lacks {' '.join(libraries) or 'nothing'} here (Wayland's own: in every Wayland session)")
    if unexpected:
        raise CheckFailed(f"the bundle needs libraries a desktop does not have: {' '.join(unexpected)}")
    try:
        xvfb, display = start_xvfb()
    except DisplayFailed as err:
        raise CheckFailed(str(err)) from None
    try:
        env = root_env(DISPLAY=display, HOME="/home/user", XDG_RUNTIME_DIR="/home/user/runtime")
        script = f"mkdir -p -m 700 /home/user/runtime && cd /home/user && exec {inside}/launcher"  # no Python, no venv
        app = subprocess.Popen(
            entered(root, script, binds=("/tmp/.X11-unix",)),
            stdout=log.open("a"),
            stderr=subprocess.STDOUT,
            env=env,
        )
        deadline = time.monotonic() + 90
        while not app_windows(display):
            if app.poll() is not None:
                raise CheckFailed(f"the app exited with code {app.returncode} before its window showed:\n{tail(log)}")
            if time.monotonic() > deadline:
                raise CheckFailed(f"no window after 90 s:\n{tail(log)}")
            time.sleep(0.2)
        step(f"the app's window is on the display ({time.monotonic() - deadline + 90:.1f} s after start)")
        time.sleep(5)  # the catalog and the machine fill in; a crash while drawing them shows here
        if app.poll() is not None or not app_windows(display):
            raise CheckFailed(f"the app's window went away (exit code {app.poll()}):\n{tail(log)}")
        shot = work / "desktop-window.png"
        with contextlib.suppress(OSError, subprocess.CalledProcessError):
            run(["import", "-window", app_windows(display)[0], str(shot)], env={**os.environ, "DISPLAY": display})
            step(f"screenshot: {shot}")
        # unshare ignores SIGTERM while it waits; killed, it takes its child (--kill-child), the PID
        # namespace's first process, and the kernel ends the rest of the namespace with it
        app.kill()
        app.wait(20)
    finally:
        if "app" in locals() and app.poll() is None:
            app.kill()
            app.wait(10)
        xvfb.terminate()
        xvfb.wait(10)


def main() -> int:
    parser = argparse.ArgumentParser(prog="scripts/check-fresh-machine", description=__doc__.splitlines()[0])
    parser.add_argument("--only", choices=["test", "desktop"], help="run one part (default: both)")
    parser.add_argument("--tarball", help="the tar.gz for the desktop part (default: the one the test part built)")
    parser.add_argument("--keep", action="store_true", help="keep the roots and logs")
    parser.add_argument("--mirror", default="http://deb.debian.org", help="the Debian mirror [%(default)s]")
    parser.add_argument("pytest_args", nargs="*", help="after --: arguments for pytest in the test part")
    args = parser.parse_args()
    if os.geteuid() != 0:
        print("scripts/check-fresh-machine needs root (chroot, namespaces, mounts)", file=sys.stderr)
        return 2
    if install_groups(["fresh-machine"]) != 0:
        return 2
    work = Path(tempfile.mkdtemp(prefix="launcher-fresh-machine-"))
    step(f"working in {work}")
    try:
        tarball = Path(args.tarball).resolve() if args.tarball else None
        if args.only in (None, "test"):
            built = check_test(work, args.mirror, args.pytest_args)
            tarball = tarball or built
        if args.only in (None, "desktop"):
            if tarball is None:
                found = sorted((ROOT / "dist").glob("launcher-*-linux-x86_64.tar.gz"), key=lambda p: p.stat().st_mtime)
                if not found:
                    raise CheckFailed("no tar.gz: give --tarball, or run the test part")
                tarball = found[-1]
            check_desktop(work, args.mirror, tarball)
    except (CheckFailed, subprocess.CalledProcessError) as err:
        step(f"FAILED: {err}")
        return 1
    finally:
        if args.keep:
            step(f"kept {work}")
        else:
            shutil.rmtree(work, ignore_errors=True)
    step("PASSED")
    return 0
