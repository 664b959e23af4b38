"""Run a script under the project's .venv Python, where the launcher and its dependencies are installed."""

from __future__ import annotations

import os
import sys
from pathlib import Path

VENV = Path(__file__).resolve().parents[1] / ".venv"


def run_in_venv(script: str) -> None:
    """Replace this process with .venv's Python running `script` with the same arguments.

    Returns only when this already is .venv's Python or there is no .venv: the script then runs
    under this Python, and an import it lacks says which package is missing.
    """
    python = VENV / "bin" / "python"
    if python.exists() and Path(sys.prefix).resolve() != VENV.resolve():
        os.execv(str(python), [str(python), script, *sys.argv[1:]])
