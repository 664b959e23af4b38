"""Fixtures for the ExLlama engine tests: tiny HF-layout model folders and engines over the stand-in runtime.

These engines are verified only on an NVIDIA GPU (scripts/gpu-check). Here the runtime is the
stand-in in standin.py, injected through the engines' `runtime=` parameter (never sys.modules).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from launcher.core.config import ServeConfig
from launcher.core.model_types import LocalModel
from launcher.engines.exllama_common._availability import CudaStatus, Environment
from launcher.engines.exllama_common._model import ExLlamaModel
from launcher.engines.exllamav2.engine import ExLlamaV2Engine, V2Runtime
from launcher.engines.exllamav3.engine import ExLlamaV3Engine, V3Runtime
from launcher.hardware.machine import Machine
from launcher.hardware.recorded import load_recorded
from tests.engines.exllama.standin import Behaviour, Runtime
from tests.engines.exllama.tiny_hf import write_tiny_hf_model

INSTALLED = {"exllamav3": "0.0.6", "exllamav2": "0.2.8", "torch": "2.6.0", "flash_attn": "2.7.4"}


def environment(**versions: str | None) -> Environment:
    """Package versions as given (None = not installed) over INSTALLED, and a working CUDA torch."""
    table = {**INSTALLED, **versions}
    return Environment(package_version=table.get, cuda=lambda: CudaStatus(True, "2.6.0", "12.4"))


@pytest.fixture(scope="session")
def exl3_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A tiny model folder whose config.json says EXL3 4.0 bpw."""
    return write_tiny_hf_model(tmp_path_factory.mktemp("exl3") / "tiny-exl3", quant_method="exl3")


@pytest.fixture(scope="session")
def exl2_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A tiny model folder whose config.json says EXL2 4.0 bpw."""
    return write_tiny_hf_model(tmp_path_factory.mktemp("exl2") / "tiny-exl2", quant_method="exl2")


def v3_engine(runtime: Runtime, machine: Machine, env: Environment | None = None) -> ExLlamaV3Engine:
    """ExLlamaV3Engine over the stand-in runtime on a recorded machine."""
    return ExLlamaV3Engine(
        lambda: V3Runtime(runtime.exllamav3, runtime.torch), env=env or environment(), machine=lambda: machine
    )


def v2_engine(runtime: Runtime, machine: Machine, env: Environment | None = None) -> ExLlamaV2Engine:
    """ExLlamaV2Engine over the stand-in runtime on a recorded machine."""
    return ExLlamaV2Engine(
        lambda: V2Runtime(runtime.exllamav2, runtime.v2_generator, runtime.v2_filters, runtime.v2_attn, runtime.torch),
        env=env or environment(),
        machine=lambda: machine,
    )


LoadFn = Callable[..., ExLlamaModel]


@pytest.fixture
def load(exl3_dir: Path, exl2_dir: Path) -> Iterator[LoadFn]:
    """`load(kind="exl3", machine="rtx4090-desktop", runtime=None, **serve_config)`; closes every model after."""
    loaded: list[ExLlamaModel] = []

    def start(
        kind: str = "exl3",
        machine: str = "rtx4090-desktop",
        runtime: Runtime | None = None,
        env: Environment | None = None,
        **config: object,
    ) -> ExLlamaModel:
        runtime = runtime or Runtime()
        box = load_recorded(machine)
        engine = v3_engine(runtime, box, env) if kind == "exl3" else v2_engine(runtime, box, env)
        directory = exl3_dir if kind == "exl3" else exl2_dir
        local = LocalModel(path=directory, format="exl3" if kind == "exl3" else "exl2", name=directory.name)
        model = engine.load(local, ServeConfig(**config))  # type: ignore[arg-type]
        loaded.append(model)
        return model

    yield start
    for model in loaded:
        model.close()


@pytest.fixture
def runtime() -> Runtime:
    """A fresh stand-in runtime (default behaviour)."""
    return Runtime(Behaviour())
