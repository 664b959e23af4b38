"""Render the app's main views to PNG, offscreen: `scripts/screenshots [OUTDIR] [--machine NAME]`.

Uses a recorded machine (default: the first of the known ones that looks like a typical desktop)
and the real advisor, catalog and widgets; nothing is mocked. Default OUTDIR: docs/screenshots/.
The two-model Server picture loads a second GGUF beside the starter (`--second-model`; default: the
tiny random-weight model of tests/fixtures/models.py, written to a scratch folder).
"""

from __future__ import annotations

import argparse
import os
import shutil
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

PREFERRED_MACHINES = ("rtx4090-desktop", "mac-studio-m3-ultra-192gb", "cpu-avx2-laptop-16gb")


def pick_machine(name: str | None):  # type: ignore[no-untyped-def]
    """The recorded machine to render with (or this one, if none is recorded yet)."""
    try:
        from launcher.hardware.recorded import load_recorded, recorded_names
    except ImportError:
        recorded_names = None  # type: ignore[assignment]
    if name:
        return load_recorded(name)
    if recorded_names is not None:
        names = recorded_names()
        for preferred in PREFERRED_MACHINES:
            if preferred in names:
                return load_recorded(preferred)
        if names:
            return load_recorded(names[0])
    from launcher.hardware.probe import probe_machine

    return probe_machine()


def main() -> int:
    """Render every page at 1280x800 (and the server page in dark) into OUTDIR."""
    os.environ.setdefault("QT_QPA_PLATFORM", "offscreen")  # before anything imports Qt
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("outdir", nargs="?", default=str(ROOT / "docs" / "screenshots"))
    parser.add_argument("--machine", help="recorded machine name")
    parser.add_argument("--scale", type=float, default=1.0, help="device pixel ratio (2 for HiDPI pictures)")
    parser.add_argument("--no-live", action="store_true", help="skip the pictures that serve the starter model")
    parser.add_argument("--second-model", help="GGUF loaded beside the starter in server-two-models.png")
    parser.add_argument("--only-two-models", action="store_true", help="render server-two-models.png alone")
    args = parser.parse_args()
    if args.scale != 1.0:
        os.environ["QT_SCALE_FACTOR"] = str(args.scale)
    # Fresh settings so the pictures never show the local user's models, keys or window size.
    home = tempfile.mkdtemp(prefix="launcher-screens-")
    os.environ["LAUNCHER_HOME"] = home

    from launcher.ui.screenshots import render_screenshots

    outdir = Path(args.outdir)
    outdir.mkdir(parents=True, exist_ok=True)
    try:
        if args.second_model:
            second = Path(args.second_model).resolve()
        else:
            from tests.fixtures.models import write_tiny_gguf

            second = write_tiny_gguf(Path(home) / "tiny-llama.gguf", seed=1)
        written = render_screenshots(
            outdir,
            pick_machine(args.machine),
            live=not args.no_live,
            second_model=second,
            only_two_models=args.only_two_models,
        )
    finally:
        shutil.rmtree(home, ignore_errors=True)
    for path in written:
        print(path)
    return 0
