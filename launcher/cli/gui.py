"""`launcher gui`: open the desktop app (the default command).

Without a display (Linux with neither DISPLAY nor WAYLAND_DISPLAY, and Qt not told to render
offscreen) it says so and exits with `NO_DISPLAY_EXIT_CODE`, so `scripts/launch` can fall back
to headless serving instead of crashing inside Qt.

`--serve` starts the server with the saved settings and the last served model once the model list
is ready; the app passes it to its new version after an update, when a server was running, so the
update does not leave the user's agents without their endpoint.
"""

from __future__ import annotations

import argparse
import os
import sys

NO_DISPLAY_EXIT_CODE = 3
HEADLESS_PLATFORMS = ("offscreen", "minimal", "vnc", "eglfs", "linuxfb", "vkkhrdisplay")


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """Flags of `launcher gui`."""
    parser.add_argument("--machine", metavar="NAME", help="use a recorded machine instead of probing this one")
    parser.add_argument(
        "--page", default=None, help="page to open: models, server, agents, chat, machine, logs, settings"
    )
    parser.add_argument("--dark", action="store_true", default=None, help="force the dark theme")
    parser.add_argument("--light", dest="dark", action="store_false", help="force the light theme")
    parser.add_argument(
        "--serve",
        action="store_true",
        help="start the server with the saved settings and the last served model once the window is up",
    )
    parser.add_argument(
        "--measure-startup",
        action="store_true",
        help="print seconds from process start to the window being shown, then quit",
    )


def display_available(environ: dict[str, str] | None = None, platform: str = sys.platform) -> bool:
    """True when Qt can open a window (or was told to render offscreen)."""
    env = os.environ if environ is None else environ
    qpa = env.get("QT_QPA_PLATFORM", "").split(":")[0]
    if qpa in HEADLESS_PLATFORMS:
        return True
    if platform.startswith("linux") or "bsd" in platform:
        return bool(env.get("DISPLAY") or env.get("WAYLAND_DISPLAY"))
    return True  # macOS and Windows always have a window server for a logged-in user


def run(args: argparse.Namespace) -> int:
    """Start the app; returns its exit code."""
    if not display_available():
        print(
            "launcher: no display found (DISPLAY/WAYLAND_DISPLAY are unset), so the window cannot open.\n"
            "Serve headless with `launcher serve`, or run under a virtual display (xvfb-run).",
            file=sys.stderr,
        )
        return NO_DISPLAY_EXIT_CODE
    from launcher.ui.app import run_app

    return run_app(
        machine_name=args.machine,
        page=args.page,
        dark=args.dark,
        measure_startup=args.measure_startup,
        serve=args.serve,
    )
