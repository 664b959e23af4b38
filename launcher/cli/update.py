"""`launcher update [--check] [--yes] [--feed URL]`: check for a new version of the app and install it.

`--check` reads the release feed (one GET, nothing about the user or the machine) and prints the
offer (version, date, size and notes) or that this version is the newest; it exits 0 either way
(and non-zero only when the feed could not be read). Without `--check` it asks "Download N MB and
install? [y/N]" (`--yes` answers for a script), downloads with a progress bar (every signature
checked before a byte is fetched, the bytes checked against the signed sha256), stops this
installation's servers, installs (`launcher.updates.install`) and starts the servers again from
the new version with the same settings; a failed install leaves the old version and its servers
running as before. The app's window (or another command of this installation, such as
`launcher launch`) must be closed first: it cannot be restarted from here.

A source checkout is updated with git and a pip install with pip: the command says so instead. A
.deb installation downloads and verifies the new package and prints the apt command to install it.
In offline mode (HF_HUB_OFFLINE / TRANSFORMERS_OFFLINE, the switch the model commands honour) the
feed is not read: the command says so and exits 1.
"""

from __future__ import annotations

import argparse
import sys
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from launcher.updates.check import UpdateOffer


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """Flags of `launcher update`."""
    parser.add_argument("--check", action="store_true", help="only say whether a newer version exists")
    parser.add_argument("--yes", "-y", action="store_true", help="install without asking")
    parser.add_argument("--feed", metavar="URL", help="read this release feed instead of the build's")


def run(args: argparse.Namespace) -> int:
    """Check, then (unless --check) download and install."""
    # Everything needed after the old folder is renamed is imported now: a frozen app reads its
    # modules from its own executable's path, which then holds the new version.
    from launcher.catalog.hub_client import is_offline
    from launcher.catalog.progress import TerminalBar
    from launcher.core.errors import UpdateError
    from launcher.core.units import format_bytes
    from launcher.updates import check, download, install, servers
    from launcher.updates.apply import apply_update

    installation = check.detect_installation()
    if installation.kind == "source":
        print("This is a source checkout; update it with git pull.")
        return 0
    if installation.kind == "pip":
        print(f"launcher {check.current_version()} was installed with pip; update it with pip install -U launcher.")
        return 0
    if is_offline():  # the user's "no network" switch: the model commands honour it, and so does this one
        raise UpdateError(
            "Offline mode is on (HF_HUB_OFFLINE or TRANSFORMERS_OFFLINE is set), so the update feed was not read; "
            "unset it to check for a new version."
        )
    offer = check.check(url=args.feed)
    check.record_check(offer=offer, url=args.feed)  # the app's next start shows the note without asking again
    if offer is None:
        print(f"launcher {check.current_version()} is up to date.")
        return 0
    _show(offer)
    if args.check:
        return 0
    if offer.file is None:
        raise UpdateError(f"This release has nothing to install here ({installation.kind}, {installation.platform}).")
    if installation.kind != "deb" and not installation.can_update:
        raise UpdateError(f"This installation cannot replace itself: {installation.how}.")
    running = servers.servers_of(installation)
    others = servers.other_processes(installation, running)
    if others:
        listed = "; ".join(servers.describe(process) for process in others[:3])
        raise UpdateError(f"Quit the app first, or update from its window ({listed}).")
    if not args.yes and not _confirmed(f"Download {format_bytes(offer.size)} and install? [y/N] "):
        print("Nothing was downloaded.")
        return 0

    downloaded = download.download(offer, progress=TerminalBar())
    if installation.kind == "deb":
        print(install.deb_message(downloaded.path))
        return 0
    for record in running:
        print(f"Stopping the server at {record.url} (pid {record.pid})...", file=sys.stderr)
    stopped = servers.stop(running)
    # Whatever stops the install (a refused build, a bug, Ctrl-C), the old version is in place and its
    # servers serve again before the failure is reported; after the swap, a pack or a server that does
    # not come back is a line of the report, not a failed update.
    result = apply_update(
        installation, downloaded, offer.version, stopped, report=lambda line: print(line, file=sys.stderr)
    )
    print(result.message)
    return 0


def _show(offer: UpdateOffer) -> None:
    """The offer: its one-line summary, the version, date and size, and the release notes."""
    from launcher.core.units import format_bytes

    print(offer.summary())
    print(f"  version {offer.version}, released {offer.feed.date.isoformat()}, download {format_bytes(offer.size)}")
    notes = offer.feed.notes.strip()
    if notes:
        print()
        for line in notes.splitlines():
            print(f"  {line}")
    if offer.feed.notes_url:
        print(f"  (notes: {offer.feed.notes_url})")


def _confirmed(question: str) -> bool:
    """The user's yes; no terminal to ask on (a script without --yes) is a no."""
    if not sys.stdin or not sys.stdin.isatty():
        print("Not installed: there is no terminal to ask on; pass --yes to install.", file=sys.stderr)
        return False
    try:
        return input(question).strip().lower() in ("y", "yes")
    except EOFError:
        return False
