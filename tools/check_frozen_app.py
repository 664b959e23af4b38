"""Run the frozen Linux app from its tar.gz the way a user does, on a virtual display, and check it.

Usage: scripts/check-frozen-app [TARBALL] [--screenshot PNG] [--keep] [--install-deps]

TARBALL defaults to the newest dist/launcher-*-linux-x86_64.tar.gz (scripts/build-app
--with-starter). The steps, each printed with its time:

 1. unpack it into an empty temporary folder outside the project, with a fresh HOME (so the app
    has no settings, no models and no data folder yet) and no PYTHONPATH / VIRTUAL_ENV / venv on
    PATH: the bundle must carry everything itself;
 2. start Xvfb and a session bus with the accessibility bus (what a desktop session has), then the
    app: the time from starting it to its window being on screen is the cold-start figure;
 3. find the starter model's row and the "Serve this model" button through the app's accessibility
    tree (AT-SPI, as screen readers see it) and click them with the X pointer (xdotool): the real
    widgets, found by their names rather than by pixel positions;
 4. read the server's URL from the window, wait for the server, GET /v1/models and POST a short
    chat completion;
 5. screenshot the window (--screenshot, default docs/screenshots/frozen-app.png);
 6. close the window as a window manager does (WM_DELETE_WINDOW) and check that no process from the
    unpacked folder is left;
 7. start the app again, serve, and SIGKILL the app: the server must end too (Linux's parent-death
    signal, armed by the server itself; launcher/core/child_process.py).

It needs Debian/Ubuntu packages, and runs on the system's Python 3 (not the project's venv: the
accessibility bindings are a system package): the [desktop] and [frozen-check] groups of
packaging/linux/debian-packages.toml (what a desktop session has, then Xvfb, xdotool, ImageMagick,
the session and accessibility buses, pyatspi). --install-deps installs the missing ones (root, or
sudo). The libraries the app carries itself ([bundled]) are not needed here; scripts/check-fresh-machine
runs the tar.gz where they are absent. Exit code 0 when every step passed.
"""

from __future__ import annotations

import argparse
import contextlib
import ctypes
import json
import os
import shutil
import signal
import subprocess
import sys
import tarfile
import tempfile
import time
import urllib.request
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "packaging" / "linux"))
import debian_packages  # noqa: E402  (modules of packaging/, not a package)
from glibc_needed import newest_glibc_needed  # noqa: E402
from virtual_display import DisplayFailed, start_xvfb  # noqa: E402

from tools.frozen_checks import CheckFailed, processes_under, step, wait_for  # noqa: E402

OLDEST_GLIBC = (2, 36)
"""The oldest glibc the README promises for a Linux build (Debian 12's): no bundled library may need newer."""
PACKAGE_GROUPS = ["desktop", "frozen-check"]
ATSPI_BUS = Path("/usr/libexec/at-spi-bus-launcher")
SERVE_BUTTON = "Serve this model"
STARTER_MARK = "starter"  # the starter's catalog title: "Gemma 3 270M (base, starter)"

# -- processes ---------------------------------------------------------------------------------


def processes_with_env(name: str, value: str) -> list[int]:
    """Pids of processes (other than this one) started with `name=value` in their environment."""
    wanted = f"{name}={value}".encode()
    found = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit() and int(entry.name) != os.getpid():
            with contextlib.suppress(OSError):
                if wanted in (entry / "environ").read_bytes().split(b"\0"):
                    found.append(int(entry.name))
    return found


def children_of(pid: int) -> list[int]:
    found = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                ppid = int((entry / "stat").read_text().rsplit(")", 1)[1].split()[1])
            except (OSError, ValueError, IndexError):
                continue
            if ppid == pid:
                found.append(int(entry.name))
    return found


def end_process(process: subprocess.Popen[Any] | None) -> None:
    if process is None or process.poll() is not None:
        return
    process.terminate()
    try:
        process.wait(5)
    except subprocess.TimeoutExpired:
        process.kill()
        process.wait(5)


# -- X11: the display, windows, a WM's close ---------------------------------------------------


def xdotool(*args: str) -> str:
    return subprocess.run(["xdotool", *args], capture_output=True, text=True, check=False).stdout.strip()


def app_window(pid: int) -> str | None:
    """The app's visible top-level window, if it is mapped yet."""
    ids = xdotool("search", "--onlyvisible", "--pid", str(pid), "--name", "^Launcher$").split()
    return ids[0] if ids else None


class _XClientMessage(ctypes.Structure):
    _fields_ = [
        ("type", ctypes.c_int),
        ("serial", ctypes.c_ulong),
        ("send_event", ctypes.c_int),
        ("display", ctypes.c_void_p),
        ("window", ctypes.c_ulong),
        ("message_type", ctypes.c_ulong),
        ("format", ctypes.c_int),
        ("data", ctypes.c_long * 5),
    ]


class _XEvent(ctypes.Union):
    _fields_ = [("client", _XClientMessage), ("pad", ctypes.c_long * 24)]


def close_window(window: str) -> None:
    """Ask the window to close, as a window manager's close button does: a WM_DELETE_WINDOW
    client message (xdotool's windowclose would destroy the window under the app instead)."""
    x11 = ctypes.CDLL("libX11.so.6")
    x11.XOpenDisplay.restype = ctypes.c_void_p
    x11.XOpenDisplay.argtypes = [ctypes.c_char_p]
    x11.XInternAtom.restype = ctypes.c_ulong
    x11.XInternAtom.argtypes = [ctypes.c_void_p, ctypes.c_char_p, ctypes.c_int]
    x11.XSendEvent.argtypes = [ctypes.c_void_p, ctypes.c_ulong, ctypes.c_int, ctypes.c_long, ctypes.POINTER(_XEvent)]
    x11.XFlush.argtypes = [ctypes.c_void_p]
    x11.XCloseDisplay.argtypes = [ctypes.c_void_p]
    display = x11.XOpenDisplay(None)
    if not display:
        raise CheckFailed("cannot open the X display to close the window")
    event = _XEvent()
    event.client.type = 33  # ClientMessage
    event.client.window = int(window)
    event.client.message_type = x11.XInternAtom(display, b"WM_PROTOCOLS", 0)
    event.client.format = 32
    event.client.data[0] = x11.XInternAtom(display, b"WM_DELETE_WINDOW", 0)
    event.client.data[1] = 0  # CurrentTime
    x11.XSendEvent(display, int(window), 0, 0, ctypes.byref(event))
    x11.XFlush(display)
    x11.XCloseDisplay(display)


# -- the app's widgets, through AT-SPI -----------------------------------------------------------


def accessible_app(pid: int) -> Any:
    import pyatspi

    desktop = pyatspi.Registry.getDesktop(0)
    for index in range(desktop.childCount):
        app = desktop.getChildAtIndex(index)
        with contextlib.suppress(Exception):
            if app is not None and app.get_process_id() == pid:
                return app
    return None


def find_widget(root: Any, match: Callable[[Any], bool]) -> Any:
    """The first showing descendant for which `match` holds (depth first)."""
    import pyatspi

    stack = [root]
    while stack:
        node = stack.pop()
        try:
            showing = node.getState().contains(pyatspi.STATE_SHOWING)
            if showing and match(node):
                return node
            stack.extend(node.getChildAtIndex(i) for i in reversed(range(node.childCount)))
        except Exception:  # a widget that went away while we walked
            continue
    return None


def widget_texts(root: Any) -> Iterator[str]:
    """Every name and text content of the showing widgets (labels, fields)."""
    stack = [root]
    while stack:
        node = stack.pop()
        try:
            yield node.name or ""
            with contextlib.suppress(Exception):
                text = node.queryText()
                yield text.getText(0, text.characterCount)
            stack.extend(node.getChildAtIndex(i) for i in range(node.childCount))
        except Exception:
            continue


def click(node: Any, what: str) -> None:
    """Move the X pointer to the widget's centre and click it: real input, as a user's mouse gives."""
    import pyatspi

    box = node.queryComponent().getExtents(pyatspi.DESKTOP_COORDS)
    if box.width <= 0 or box.height <= 0:
        raise CheckFailed(f"{what} has no area on screen")
    x, y = box.x + box.width // 2, box.y + box.height // 2
    xdotool("mousemove", "--sync", str(x), str(y))
    time.sleep(0.1)
    xdotool("click", "1")
    step(f"clicked {what} at ({x}, {y})")


def select_starter_and_serve(pid: int) -> None:
    import pyatspi

    app = wait_for("the app's accessibility tree", lambda: accessible_app(pid), 30)
    button = wait_for(
        f"the {SERVE_BUTTON!r} button",
        lambda: find_widget(app, lambda n: n.name == SERVE_BUTTON and n.getRole() == pyatspi.ROLE_PUSH_BUTTON),
        60,
    )
    starter = wait_for(
        "the starter model's row",
        lambda: find_widget(
            app,
            lambda n: (
                STARTER_MARK in (n.name or "").lower()
                and n.getRole() in (pyatspi.ROLE_TABLE_CELL, pyatspi.ROLE_TREE_ITEM, pyatspi.ROLE_LIST_ITEM)
            ),
        ),
        60,
    )
    click(starter, f"the starter's row {starter.name!r}")
    wait_for("the Serve button to be enabled", lambda: button.getState().contains(pyatspi.STATE_ENABLED), 30)
    click(button, f"{SERVE_BUTTON!r}")


def server_url(pid: int) -> str | None:
    """The server's base URL as the window shows it (the Server page's endpoint field), if shown."""
    app = accessible_app(pid)
    for text in widget_texts(app) if app is not None else ():
        for word in text.split():
            if word.startswith("http://") and word.endswith("/v1"):
                return word.removesuffix("/v1")
    return None


def serving(pid: int) -> tuple[str, Any] | None:
    """(base URL, /v1/models answer) once the URL the window shows answers."""
    base = server_url(pid)
    listing = models_answer(base) if base else None
    return (base, listing) if base and listing else None


# -- HTTP ------------------------------------------------------------------------------------------


def http_json(url: str, body: dict[str, Any] | None = None, timeout: float = 10) -> Any:
    data = json.dumps(body).encode() if body is not None else None
    request = urllib.request.Request(url, data=data, headers={"Content-Type": "application/json"} if data else {})
    with urllib.request.urlopen(request, timeout=timeout) as response:
        return json.loads(response.read())


def models_answer(base: str) -> Any:
    try:
        return http_json(f"{base}/v1/models", timeout=2)
    except OSError:
        return None


# -- the run -------------------------------------------------------------------------------------


def check_dependencies(install: bool) -> None:
    if install:
        if debian_packages.install(PACKAGE_GROUPS) != 0:
            raise CheckFailed(f"could not install the {' and '.join(PACKAGE_GROUPS)} packages")
        return
    absent = debian_packages.missing(debian_packages.packages(*PACKAGE_GROUPS))
    if absent:
        raise CheckFailed(
            f"missing {', '.join(absent)}: run  packaging/linux/debian_packages.py install "
            f"{' '.join(PACKAGE_GROUPS)}  (or --install-deps)"
        )


def clean_environment(home: Path, display: str, bus: dict[str, str]) -> dict[str, str]:
    """What a desktop session would hand the app: a fresh HOME, the display, the session bus; not
    this checkout's Python setup."""
    path = [
        p for p in os.environ.get("PATH", "/usr/bin:/bin").split(os.pathsep) if ".venv" not in p and "pyenv" not in p
    ]
    env = {
        "PATH": os.pathsep.join(path) or "/usr/bin:/bin",
        "HOME": str(home),
        "DISPLAY": display,
        "LANG": os.environ.get("LANG", "C.UTF-8"),
        "XDG_RUNTIME_DIR": str(home / "runtime"),
        # Qt turns its accessibility bridge on by itself when a screen reader registers; nothing
        # registers here, so it is asked to, as Orca's presence would.
        "QT_LINUX_ACCESSIBILITY_ALWAYS_ON": "1",
        **bus,
    }
    (home / "runtime").mkdir(mode=0o700, exist_ok=True)
    return env


def start_app(program: Path, env: dict[str, str], log: Path) -> tuple[subprocess.Popen[bytes], float, str]:
    started = time.monotonic()
    with log.open("ab") as out:
        app = subprocess.Popen([str(program)], env=env, stdout=out, stderr=subprocess.STDOUT, cwd=env["HOME"])
    window: str = wait_for("the app's window", lambda: _window_unless_died(app, log), 120, 0.05)
    return app, time.monotonic() - started, window


def _died(app: subprocess.Popen[bytes], log: Path, when: str = "before its window showed") -> None:
    if app.poll() is not None:
        raise CheckFailed(f"the app exited with code {app.returncode} {when}:\n{_log_tail(log)}")


def _window_unless_died(app: subprocess.Popen[bytes], log: Path, when: str = "before its window showed") -> str | None:
    """The app's window once it shows; CheckFailed (with the log's tail) if the app has exited."""
    _died(app, log, when)
    return app_window(app.pid)


def _log_tail(log: Path) -> str:
    return "\n".join(log.read_text(errors="replace").splitlines()[-15:])


def take_screenshot(app: subprocess.Popen[bytes], log: Path, window: str, path: Path) -> str:
    """Save the app's window as PNG; return the window's id. The window is looked up again first (Qt
    may have re-created it), and `import` runs under a timeout: given a window that is gone, it falls
    back to waiting for a mouse click that never comes on Xvfb, and a CI run once hung there."""
    _died(app, log, "before the screenshot")
    current: str = wait_for("the app's window", lambda: _window_unless_died(app, log, "before the screenshot"), 10)
    if current != window:
        step(f"the app's window is now {current} (was {window})")
    path.parent.mkdir(parents=True, exist_ok=True)
    try:
        taken = subprocess.run(["import", "-window", current, str(path)], capture_output=True, text=True, timeout=30)
    except subprocess.TimeoutExpired:
        raise CheckFailed(f"`import` took over 30 s to screenshot window {current}:\n{_log_tail(log)}") from None
    if taken.returncode != 0:
        raise CheckFailed(f"`import` could not screenshot window {current}: {taken.stderr.strip()}\n{_log_tail(log)}")
    step(f"screenshot of the window: {path}")
    return current


def run(args: argparse.Namespace) -> None:
    tarball = Path(args.tarball) if args.tarball else None
    if tarball is None:
        found = sorted((ROOT / "dist").glob("launcher-*-linux-x86_64.tar.gz"), key=lambda p: p.stat().st_mtime)
        if not found:
            raise CheckFailed("no dist/launcher-*-linux-x86_64.tar.gz: run scripts/build-app --with-starter")
        tarball = found[-1]
    check_dependencies(args.install_deps)

    work = Path(tempfile.mkdtemp(prefix="launcher-frozen-check-"))
    if work.resolve().is_relative_to(ROOT):
        raise CheckFailed(f"the temporary folder {work} is inside the project")
    step(f"unpacking {tarball.name} ({tarball.stat().st_size / 2**20:.0f} MiB) into {work}")
    with tarfile.open(tarball) as archive:
        # the "tar" filter (keep symlinks and modes, refuse paths outside the folder) where this
        # Python has extraction filters (3.11.4+)
        if hasattr(tarfile, "tar_filter"):
            archive.extractall(work / "app", filter="tar")
        else:
            archive.extractall(work / "app")
    (folder,) = (work / "app").iterdir()
    program = folder / "launcher"
    home = work / "home"
    home.mkdir()
    log = work / "app.log"
    size = sum(f.stat().st_size for f in folder.rglob("*") if f.is_file() and not f.is_symlink())
    step(f"unpacked: {size / 2**20:.0f} MiB")
    glibc, needed_by = newest_glibc_needed(folder)
    newest = ".".join(map(str, glibc))
    if glibc > OLDEST_GLIBC:
        raise CheckFailed(f"{needed_by} needs glibc {newest}, newer than the {OLDEST_GLIBC} the README promises")
    step(
        f"the newest glibc any bundled library needs: {newest} ({needed_by.relative_to(folder) if needed_by else '-'})"
    )

    xvfb = bus_daemon = atspi = app = None
    try:
        try:
            xvfb, display = start_xvfb()
        except DisplayFailed as err:
            raise CheckFailed(str(err)) from None
        os.environ["DISPLAY"] = display  # for xdotool, import and pyatspi in this process
        wait_for(f"the display {display}", lambda: xdotool("getdisplaygeometry"), 10)
        launched = subprocess.run(
            ["dbus-launch", "--sh-syntax"], capture_output=True, text=True, check=True, env={**os.environ}
        ).stdout
        bus = {}
        for line in launched.splitlines():
            name, _, value = line.partition("=")
            if name in ("DBUS_SESSION_BUS_ADDRESS", "DBUS_SESSION_BUS_PID"):
                bus[name] = value.rstrip(";").strip("'")
        bus_daemon_pid = int(bus.pop("DBUS_SESSION_BUS_PID"))
        os.environ.update(bus)
        atspi = subprocess.Popen([str(ATSPI_BUS), "--launch-immediately"], stderr=subprocess.DEVNULL)
        step(f"display {display}, session bus and accessibility bus up")
        env = clean_environment(home, display, bus)

        # -- first run: serve, query, screenshot, close --------------------------------------
        step(f"starting {program.relative_to(work)} (fresh HOME, no Python on PATH)")
        first, to_window, window = start_app(program, env, log)
        app = first  # ended in `finally` whatever fails from here
        step(f"window on screen {to_window:.2f} s after start (window {window})")
        select_starter_and_serve(first.pid)
        clicked = time.monotonic()
        server = wait_for(
            "the server child", lambda: [p for p in children_of(first.pid) if p in processes_under(folder)], 30
        )
        step(f"server child started: pid {server[0]} ({Path(f'/proc/{server[0]}/exe').resolve().name} serve)")
        base, listing = wait_for("the endpoint the window shows to answer", lambda: serving(first.pid), 300, 0.5)
        step(f"the window shows the server at {base}/v1")
        model = listing["data"][0]["id"]
        step(f"GET /v1/models: {[m['id'] for m in listing['data']]} ({time.monotonic() - clicked:.1f} s after Serve)")
        asked = time.monotonic()
        reply = http_json(
            f"{base}/v1/chat/completions",
            {"model": model, "messages": [{"role": "user", "content": "Say hello."}], "max_tokens": 8},
            timeout=120,
        )
        text = reply["choices"][0]["message"]["content"]
        step(
            f"POST /v1/chat/completions: {reply['usage']['completion_tokens']} tokens in "
            f"{time.monotonic() - asked:.2f} s, finish {reply['choices'][0]['finish_reason']!r}: {text!r}"
        )
        time.sleep(2)  # the gauges poll /metrics every second: let them show the request
        window = take_screenshot(first, log, window, Path(args.screenshot))
        close_window(window)
        closed = time.monotonic()
        code = wait_for("the app to exit", lambda: first.poll() is not None, 30)
        step(f"window closed: the app exited with code {first.returncode} after {time.monotonic() - closed:.2f} s")
        if code and first.returncode != 0:
            raise CheckFailed(f"the app exited with code {first.returncode}")
        left = processes_under(folder)
        if left:
            raise CheckFailed(f"processes from the bundle are still running after the app quit: {left}")
        step("no process from the unpacked folder is left")

        # -- second run: the app is killed, the server must follow ----------------------------
        if not args.skip_kill:
            second, to_window, window = start_app(program, env, log)
            app = second
            step(f"second start: window on screen {to_window:.2f} s after start (warm: starter already assembled)")
            select_starter_and_serve(second.pid)
            wait_for("the server", lambda: serving(second.pid), 300, 0.5)
            server_pids = [p for p in processes_under(folder) if p != second.pid]
            step(f"server up (pid {server_pids}); killing the app with SIGKILL")
            os.kill(second.pid, signal.SIGKILL)
            second.wait(10)
            killed = time.monotonic()
            wait_for("the server to end with the app", lambda: not processes_under(folder), 20)
            step(f"the server ended {time.monotonic() - killed:.2f} s after the app was killed")
    finally:
        if app is not None:
            end_process(app)
        for pid in processes_under(folder) if "folder" in locals() else []:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
        end_process(atspi)
        if "bus_daemon_pid" in locals():
            with contextlib.suppress(ProcessLookupError):
                os.kill(bus_daemon_pid, signal.SIGTERM)
            # The buses start helpers of their own (the accessibility bus and its registry daemon),
            # which outlive their parents: they are the ones whose environment names our bus.
            time.sleep(0.5)
            for pid in processes_with_env("DBUS_SESSION_BUS_ADDRESS", bus.get("DBUS_SESSION_BUS_ADDRESS", "?")):
                with contextlib.suppress(ProcessLookupError):
                    os.kill(pid, signal.SIGTERM)
        end_process(xvfb)
        if args.keep:
            step(f"kept {work} (app log: {log})")
        else:
            shutil.rmtree(work, ignore_errors=True)


def main() -> int:
    parser = argparse.ArgumentParser(prog="scripts/check-frozen-app", description=__doc__.splitlines()[0])
    parser.add_argument("tarball", nargs="?", help="the app's tar.gz (default: the newest in dist/)")
    parser.add_argument("--screenshot", default=str(ROOT / "docs" / "screenshots" / "frozen-app.png"))
    parser.add_argument("--keep", action="store_true", help="keep the unpacked folder and the app's log")
    parser.add_argument(
        "--skip-kill", action="store_true", help="skip the second run (the app killed, the server follows)"
    )
    parser.add_argument("--install-deps", action="store_true", help="apt-get install what is missing (root)")
    args = parser.parse_args()
    try:
        run(args)
    except CheckFailed as err:
        step(f"FAILED: {err}")
        return 1
    step("PASSED")
    return 0
