"""`launcher ... | head`: a reader that stops early ends the command quietly, without a traceback."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from launcher.cli import READER_LEFT_EXIT_CODE

REPO_ROOT = Path(__file__).resolve().parents[1]

# Every catalog model's recommendation for a recorded machine: offline, and far more than the
# 64 KiB a pipe holds, so the writer is still writing when the reader goes.
LONG_OUTPUT = ("recommend", "--json", "--machine", "cpu-avx2-laptop-16gb")
BROKEN_PIPE_SIGNS = ("Traceback", "BrokenPipeError", "Exception ignored")


def launcher(*argv: str) -> list[str]:
    return [sys.executable, "-m", "launcher", *argv]


def child_env() -> dict[str, str]:
    return {**os.environ, "PYTHONPATH": str(REPO_ROOT)}


def test_a_reader_gone_before_the_first_byte_is_no_error() -> None:
    read_end, write_end = os.pipe()
    os.close(read_end)  # every write the command makes meets a closed pipe, however short its output
    try:
        result = subprocess.run(
            launcher("models", "--json", "--no-engines"),
            stdout=write_end,
            stderr=subprocess.PIPE,
            text=True,
            env=child_env(),
            timeout=120,
            check=False,
        )
    finally:
        os.close(write_end)
    assert not any(sign in result.stderr for sign in BROKEN_PIPE_SIGNS), result.stderr
    assert result.returncode == READER_LEFT_EXIT_CODE


def test_a_reader_that_stops_after_a_few_bytes_is_no_error() -> None:
    with subprocess.Popen(
        launcher(*LONG_OUTPUT), stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=child_env()
    ) as child:
        assert child.stdout is not None and child.stderr is not None
        assert child.stdout.read(10)  # like `head -c 10`
        child.stdout.close()
        stderr = child.stderr.read().decode()
        code = child.wait(timeout=120)
    assert not any(sign in stderr for sign in BROKEN_PIPE_SIGNS), stderr
    assert code == READER_LEFT_EXIT_CODE
