"""A pytest plugin that adds the ExLlama engines to the conformance suite, for scripts/gpu-check.

    LAUNCHER_GPU_CHECK_EXL3=/path/to/exl3-folder pytest -p tests.engines.exllama.gpu_conformance \
        tests/conformance -k exllamav3

It appends ServerSpecs to tests.conformance.servers.SERVERS (plugins given with -p load before
the conformance conftest reads that list) and provides their model fixtures from environment
variables, so the suite's own `launcher serve` subprocesses run the converted models. Without the
variables it adds nothing. Needs an NVIDIA GPU: these engines are verified only there.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from tests.conformance.servers import SERVERS, ServerSpec

_MODELS = {"exllamav3": "LAUNCHER_GPU_CHECK_EXL3", "exllamav2": "LAUNCHER_GPU_CHECK_EXL2"}
_ARGS = ("--context", "4096", "--parallel", "4")


def _available(variable: str) -> str | None:
    return None if os.environ.get(variable) else f"{variable} is not set (scripts/gpu-check sets it)"


for _engine, _variable in _MODELS.items():
    if os.environ.get(_variable) and not any(s.engine == _engine for s in SERVERS):
        SERVERS.append(
            ServerSpec(
                _engine,
                f"gpu_{_engine}_model",
                _ARGS,
                lambda variable=_variable: _available(variable),  # type: ignore[misc]
            )
        )


@pytest.fixture(scope="session")
def gpu_exllamav3_model() -> Path:
    """The EXL3 folder scripts/gpu-check converted."""
    return Path(os.environ["LAUNCHER_GPU_CHECK_EXL3"])


@pytest.fixture(scope="session")
def gpu_exllamav2_model() -> Path:
    """The EXL2 folder scripts/gpu-check converted."""
    return Path(os.environ["LAUNCHER_GPU_CHECK_EXL2"])
