"""The serve plan: the advisor fills in engine, context and GPU layers, and refuses what cannot fit."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest

from launcher.core.config import ServeConfig
from launcher.core.errors import ModelDoesNotFitError
from launcher.hardware.machine import MemoryInfo
from launcher.hardware.recorded import load_recorded
from launcher.server.planning import plan


def test_auto_engine_and_numbers_come_from_the_advisor(tiny_gguf: Path) -> None:
    setup = plan(ServeConfig(model=str(tiny_gguf)), load_recorded("cpu-avx2-laptop-16gb"))
    assert setup.engine == "llamacpp" and "GGUF" in setup.engine_reason
    assert setup.config.context is not None and setup.config.gpu_layers is not None


def test_user_choices_are_kept(tiny_gguf: Path) -> None:
    setup = plan(
        ServeConfig(model=str(tiny_gguf), context=1024, gpu_layers=0, alias="x"), load_recorded("cpu-avx2-laptop-16gb")
    )
    assert setup.config.context == 1024 and setup.config.gpu_layers == 0 and setup.model.name == "x"


def test_a_model_that_cannot_fit_is_refused_with_the_numbers(tiny_gguf: Path) -> None:
    machine = load_recorded("cpu-avx2-laptop-16gb")
    tiny_ram = dataclasses.replace(machine, memory=MemoryInfo(total=64 * 1024, available=16 * 1024))
    with pytest.raises(ModelDoesNotFitError, match=r"does not fit.*GiB"):
        plan(ServeConfig(model=str(tiny_gguf), context=4096), tiny_ram)
