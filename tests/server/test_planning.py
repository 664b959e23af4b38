"""The serve plan: the advisor fills in engine, context and GPU layers, and refuses what cannot fit."""

from __future__ import annotations

import dataclasses
import os
from pathlib import Path

import pytest

from launcher.core.config import ServeConfig
from launcher.core.errors import ModelDoesNotFitError
from launcher.hardware.machine import MemoryInfo
from launcher.hardware.recorded import load_recorded
from launcher.server.pool.planning import plan


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


def test_mlx_directory_gets_the_advisors_engine_and_reason(tiny_mlx_model: Path) -> None:
    setup = plan(ServeConfig(model=str(tiny_mlx_model)), load_recorded("macbook-air-m2-16gb"))
    assert setup.engine == "mlx"
    assert "MLX" in setup.engine_reason
    assert setup.config.context is not None  # the advisor sized the context for this machine


def test_exl3_directory_without_nvidia_is_refused_with_the_reason(tiny_mlx_model: Path, tmp_path: Path) -> None:
    import json
    import shutil

    exl3 = tmp_path / "exl3"
    shutil.copytree(tiny_mlx_model, exl3)
    config = json.loads((exl3 / "config.json").read_text())
    config.pop("quantization", None)
    config["quantization_config"] = {"quant_method": "exl3", "bits": 4.0}
    (exl3 / "config.json").write_text(json.dumps(config))
    with pytest.raises(ModelDoesNotFitError, match="NVIDIA"):
        plan(ServeConfig(model=str(exl3)), load_recorded("cpu-avx2-laptop-16gb"))


def test_the_kv_cache_type_is_the_advisors_unless_pinned(tiny_gguf: Path) -> None:
    from launcher.advisor import plan_local
    from launcher.catalog.gguf_meta import read_gguf_metadata

    meta = read_gguf_metadata(tiny_gguf)
    arch, weights = meta.to_architecture(), meta.file_bytes
    laptop = load_recorded("cpu-avx2-laptop-16gb")

    def with_ram(available: int) -> object:
        return dataclasses.replace(laptop, memory=MemoryInfo(total=available, available=available))

    def fits(available: int, kv_type: str) -> bool:
        machine = with_ram(available)
        return plan_local(machine, "gguf", arch, weights, context=4096, parallel=4, kv_type=kv_type).fit.fits  # type: ignore[arg-type]

    # The least RAM with which a q8_0 KV cache fits; with f16 it does not.
    low, high = 0, 64 * 1024**3
    while high - low > 1:
        middle = (low + high) // 2
        low, high = (low, middle) if fits(middle, "q8_0") else (middle, high)
    tight = with_ram(high)
    assert not fits(high, "f16")
    setup = plan(ServeConfig(model=str(tiny_gguf), context=4096), tight)  # type: ignore[arg-type]
    assert setup.config.kv_cache_type == "q8_0"
    assert plan(ServeConfig(model=str(tiny_gguf), context=4096), laptop).config.kv_cache_type == "f16"
    with pytest.raises(ModelDoesNotFitError, match=r"f16"):
        plan(ServeConfig(model=str(tiny_gguf), context=4096, kv_cache_type="f16"), tight)  # type: ignore[arg-type]


def test_an_engine_that_cannot_load_the_format_is_refused_before_loading(tiny_gguf: Path) -> None:
    from launcher.core.errors import ModelFormatError

    with pytest.raises(
        ModelFormatError, match=r"MLX \(mlx-lm\) \(--engine mlx\) does not load GGUF models; llamacpp does"
    ):
        plan(ServeConfig(model=str(tiny_gguf), engine="mlx"), load_recorded("macbook-air-m2-16gb"))


def test_a_downloaded_draft_model_is_planned_for_its_catalog_pair(tiny_gguf: Path) -> None:
    # Qwen2.5-Coder 7B and its catalog draft (0.5B) both pulled into the Hugging Face cache: `launcher serve
    # qwen2.5-coder-7b` drafts with the 0.5B, and counts its memory; without the 0.5B it plans none.
    from tests.advisor.machines import desktop_4090
    from tests.catalog.helpers import make_cached_repo

    cache = Path(os.environ["HF_HUB_CACHE"])
    weights = tiny_gguf.read_bytes()  # the files' contents do not matter to the plan beyond their header
    make_cached_repo(
        cache, "bartowski/Qwen2.5-Coder-7B-Instruct-GGUF", {"Qwen2.5-Coder-7B-Instruct-Q4_K_M.gguf": weights}
    )
    alone = plan(ServeConfig(model="qwen2.5-coder-7b"), desktop_4090())
    assert alone.config.draft is None
    make_cached_repo(
        cache, "bartowski/Qwen2.5-Coder-0.5B-Instruct-GGUF", {"Qwen2.5-Coder-0.5B-Instruct-Q8_0.gguf": weights}
    )
    paired = plan(ServeConfig(model="qwen2.5-coder-7b"), desktop_4090())
    assert paired.config.draft is not None and paired.config.draft.endswith("Qwen2.5-Coder-0.5B-Instruct-Q8_0.gguf")
    assert paired.needed_bytes > alone.needed_bytes
    assert plan(ServeConfig(model="qwen2.5-coder-7b", speculative="ngram"), desktop_4090()).config.draft is None
