#!/usr/bin/env python3
"""An Xvfb display for the checks that run the real window (scripts/check-frozen-app, scripts/check-fresh-machine)."""

from __future__ import annotations

import os
import subprocess


class DisplayFailed(Exception):
    pass


def start_xvfb(size: str = "1440x900x24") -> tuple[subprocess.Popen[bytes], str]:
    """Start Xvfb on the first free display and return it with its name (":N") once it listens:
    Xvfb writes the number it took to -displayfd when it is ready, so there is no guessing or polling."""
    read_fd, write_fd = os.pipe()
    xvfb = subprocess.Popen(
        ["Xvfb", "-displayfd", str(write_fd), "-screen", "0", size, "-nolisten", "tcp"],
        pass_fds=(write_fd,),
        stderr=subprocess.DEVNULL,
    )
    os.close(write_fd)
    number = b""
    with os.fdopen(read_fd, "rb", buffering=0) as reader:
        while not number.endswith(b"\n"):
            chunk = reader.read(32)
            if not chunk:
                xvfb.kill()
                raise DisplayFailed("Xvfb did not start")
            number += chunk
    return xvfb, ":" + number.decode().strip()
