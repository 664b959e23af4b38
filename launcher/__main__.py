"""`python -m launcher` is the same as the `launcher` command. It is also the frozen app's entry
(packaging/launcher.spec), so everything a child of the app does first happens here, once."""

from __future__ import annotations


def run() -> int:
    """Tie this process to the app that started it (when it did), then run the command line."""
    from launcher.core.child_process import follow_parent

    follow_parent()
    from launcher.cli import main

    return main()


if __name__ == "__main__":
    raise SystemExit(run())
