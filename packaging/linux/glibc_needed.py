#!/usr/bin/env python3
"""The newest glibc a folder of Linux binaries needs: the highest GLIBC_x.y symbol version any ELF
file in it references (objdump -T). scripts/build-app writes it into the .deb's `libc6 (>= x.y)`,
and scripts/check-frozen-app fails when it is newer than what the README promises.

    packaging/linux/glibc_needed.py FOLDER      prints "2.36 path/of/the/file/that/needs/it"
"""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

_SYMBOL = re.compile(r"GLIBC_(\d+(?:\.\d+)+)")


def newest_glibc_needed(folder: Path) -> tuple[tuple[int, ...], Path | None]:
    """The newest GLIBC_x.y symbol version any ELF file in `folder` needs, and which file needs it."""
    newest: tuple[int, ...] = (0,)
    needed_by: Path | None = None
    for file in sorted(folder.rglob("*")):
        if not file.is_file() or file.is_symlink():
            continue
        with file.open("rb") as handle:
            if handle.read(4) != b"\x7fELF":
                continue
        symbols = subprocess.run(["objdump", "-T", str(file)], capture_output=True, text=True).stdout
        for version in set(_SYMBOL.findall(symbols)):
            parsed = tuple(int(part) for part in version.split("."))
            if parsed > newest:
                newest, needed_by = parsed, file
    return newest, needed_by


if __name__ == "__main__":
    found, file = newest_glibc_needed(Path(sys.argv[1]))
    print(".".join(map(str, found)), file or "-")
