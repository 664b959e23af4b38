"""`python -m launcher` is the same as the `launcher` command."""

from launcher.cli import main

if __name__ == "__main__":
    raise SystemExit(main())
