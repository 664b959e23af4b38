#!/usr/bin/env python3
"""The project's Debian packages (packaging/linux/debian-packages.toml), by group, and installing the missing.

    packaging/linux/debian_packages.py list GROUP...       the packages, space-separated
    packaging/linux/debian_packages.py missing GROUP...    those not installed (exit 1 when any)
    packaging/linux/debian_packages.py install GROUP...    apt-get install the missing ones
    packaging/linux/debian_packages.py libraries GROUP...  the shared libraries those packages hold

`install` runs apt-get as root, or through `sudo -n` (a CI runner's user); where neither works, or
the system has no dpkg (macOS, Fedora), it prints the command to run and exits 1 (2 without dpkg), so
a script that needs the packages stops with what to do rather than failing later in a stranger way.
Runs on the system's Python 3 (3.11+, for tomllib): it is used before any venv exists.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tomllib
from pathlib import Path

LIST = Path(__file__).with_name("debian-packages.toml")


def groups() -> dict[str, dict[str, object]]:
    return tomllib.loads(LIST.read_text())


def packages(*names: str) -> list[str]:
    """The packages of these groups, in order, each once."""
    table = groups()
    found: list[str] = []
    for name in names:
        if name not in table:
            raise SystemExit(f"no group {name!r} in {LIST.name}: {', '.join(table)}")
        found += [package for package in table[name]["packages"] if package not in found]  # type: ignore[attr-defined]
    return found


def missing(wanted: list[str]) -> list[str]:
    """The packages of `wanted` that dpkg does not have installed."""
    result = subprocess.run(
        ["dpkg-query", "-W", "-f", "${Package} ${db:Status-Status}\\n", *wanted],
        capture_output=True,
        text=True,
        check=False,
    )
    installed = {line.split()[0].split(":")[0] for line in result.stdout.splitlines() if line.endswith(" installed")}
    return [package for package in wanted if package not in installed]


def libraries(*names: str) -> list[Path]:
    """The shared libraries (by soname, as programs load them) that the packages of these groups install."""
    wanted = packages(*names)
    absent = missing(wanted)
    if absent:
        raise SystemExit(f"missing Debian packages: {' '.join(absent)} (packaging/linux/debian_packages.py install)")
    listed = subprocess.run(["dpkg-query", "-L", *wanted], capture_output=True, text=True, check=True).stdout
    found = []
    for line in listed.splitlines():
        path = Path(line)
        # libxcb-icccm.so.4 (the soname, a link to libxcb-icccm.so.4.0.0): the name the loader asks for
        if ".so." in path.name and path.name.count(".so.") == 1 and path.name.split(".so.")[1].isdigit():
            found.append(path)
    return found


def _as_root() -> list[str] | None:
    if os.geteuid() == 0:
        return []
    if shutil.which("sudo") and subprocess.run(["sudo", "-n", "true"], capture_output=True).returncode == 0:
        return ["sudo", "-n", "--preserve-env=DEBIAN_FRONTEND"]
    return None


def install(group_names: list[str]) -> int:
    wanted = packages(*group_names)
    if shutil.which("dpkg-query") is None:
        print(f"not a Debian-based system: install the equivalents of {' '.join(wanted)}", file=sys.stderr)
        return 2
    absent = missing(wanted)
    if not absent:
        return 0
    command = ["apt-get", "install", "-y", "--no-install-recommends", *absent]
    prefix = _as_root()
    why = "; ".join(str(groups()[name]["why"]) for name in group_names)
    if prefix is None:
        print(f"missing Debian packages ({why}): run  sudo apt-get update && sudo {' '.join(command)}", file=sys.stderr)
        return 1
    print(f"installing {' '.join(absent)} ({why})", file=sys.stderr, flush=True)
    env = {**os.environ, "DEBIAN_FRONTEND": "noninteractive"}
    subprocess.run([*prefix, "apt-get", "update", "-qq"], check=True, env=env)
    subprocess.run([*prefix, *command, "-qq"], check=True, env=env, stdout=subprocess.DEVNULL)
    still = missing(wanted)
    if still:
        print(f"apt-get did not install {' '.join(still)}", file=sys.stderr)
        return 1
    return 0


def main(argv: list[str]) -> int:
    if len(argv) < 2 or argv[0] not in ("list", "missing", "install", "libraries"):
        print(__doc__, file=sys.stderr)
        return 2
    action, names = argv[0], argv[1:]
    if action == "install":
        return install(names)
    if action == "libraries":
        print("\n".join(str(path) for path in libraries(*names)))
        return 0
    wanted = packages(*names)
    shown = missing(wanted) if action == "missing" else wanted
    if shown:
        print(" ".join(shown))
    return 1 if action == "missing" and shown else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
