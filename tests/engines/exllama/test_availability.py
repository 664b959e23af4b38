"""Availability says exactly why an ExLlama engine cannot run, and the advisor falls back accordingly.

THESE ENGINES ARE VERIFIED ONLY ON AN NVIDIA GPU (scripts/gpu-check); here the environment
(installed packages, CUDA) is injected and the machines are recorded ones.
"""

from __future__ import annotations

from launcher.advisor import recommend
from launcher.catalog.catalog import find
from launcher.engine_specs import get_spec
from launcher.engines import registry
from launcher.engines.exllama_common._availability import CudaStatus, Environment
from launcher.engines.exllamav2.engine import ExLlamaV2Engine
from launcher.engines.exllamav3.engine import ExLlamaV3Engine
from launcher.hardware.recorded import load_recorded
from tests.engines.exllama.conftest import INSTALLED, environment


def test_exl3_on_an_rtx_4090_is_usable_and_says_what_it_runs_on() -> None:
    result = ExLlamaV3Engine(env=environment()).availability(load_recorded("rtx4090-desktop"))
    assert result.usable and result.backend == "cuda" and result.version == "0.0.6"
    assert result.reason.startswith("exllamav3 0.0.6 (CUDA 12.4, NVIDIA GeForce RTX 4090")


def test_exl3_on_two_gpus_announces_tensor_parallel() -> None:
    result = ExLlamaV3Engine(env=environment()).availability(load_recorded("2x-rtx3090-nvlink"))
    assert result.usable
    assert "tensor parallel over 2 GPUs" in result.reason


def test_not_installed_says_which_extra_to_install() -> None:
    for engine, extra in (
        (ExLlamaV3Engine(env=environment(exllamav3=None)), "exllamav3"),
        (ExLlamaV2Engine(env=environment(exllamav2=None)), "exllamav2"),
    ):
        result = engine.availability(load_recorded("rtx4090-desktop"))
        assert not result.usable
        assert result.reason == f"not installed: pip install 'launcher[{extra}]'"


def test_missing_torch_is_not_installed_either() -> None:
    result = ExLlamaV3Engine(env=environment(torch=None)).availability(load_recorded("rtx4090-desktop"))
    assert not result.usable and result.reason.startswith("not installed: ExLlamaV3 needs PyTorch with CUDA")


def test_no_nvidia_gpu_means_no_cuda_device() -> None:
    cpu = ExLlamaV3Engine(env=environment()).availability(load_recorded("cpu-avx2-laptop-16gb"))
    assert not cpu.usable and cpu.reason.startswith("no CUDA device: ExLlamaV3 needs an NVIDIA GPU; use GGUF")
    mac = ExLlamaV2Engine(env=environment()).availability(load_recorded("macbook-air-m2-16gb"))
    assert not mac.usable and "use MLX or GGUF" in mac.reason


def test_a_cpu_only_torch_build_means_no_cuda_device() -> None:
    env = Environment(package_version=INSTALLED.get, cuda=lambda: CudaStatus(False, "2.6.0+cpu", None))
    result = ExLlamaV3Engine(env=env).availability(load_recorded("rtx4090-desktop"))
    assert not result.usable
    assert result.reason.startswith("no CUDA device: PyTorch 2.6.0+cpu cannot use the GPU")


def test_exl3_refuses_turing_and_points_to_exl2_or_gguf() -> None:
    result = ExLlamaV3Engine(env=environment()).availability(load_recorded("rtx2080ti"))
    assert not result.usable
    assert result.reason == "compute capability 7.5 < 8.0 (ExLlamaV3 needs Ampere or newer); use EXL2 or GGUF"


def test_exl2_without_flash_attn_is_usable_without_batching() -> None:
    result = ExLlamaV2Engine(env=environment(flash_attn=None)).availability(load_recorded("rtx4090-desktop"))
    assert result.usable
    assert result.reason.endswith(
        ": usable, but without flash-attn the dynamic generator runs one job at a time (no batching)"
    )


def test_exl2_on_turing_batches_only_where_flash_attn_can_run() -> None:
    result = ExLlamaV2Engine(env=environment()).availability(load_recorded("rtx2080ti"))
    assert result.usable and "flash-attn needs compute capability 8.0" in result.reason
    old = ExLlamaV2Engine(env=environment(flash_attn="2.4.2")).availability(load_recorded("rtx4090-desktop"))
    assert old.usable and "flash-attn 2.4.2 < 2.5.7" in old.reason
    full = ExLlamaV2Engine(env=environment()).availability(load_recorded("rtx4090-desktop"))
    assert full.usable and "one job at a time" not in full.reason


def _status(machine_name: str, env: Environment) -> dict[str, str | None]:
    machine = load_recorded(machine_name)
    found = {
        "exllamav3": ExLlamaV3Engine(env=env).availability(machine),
        "exllamav2": ExLlamaV2Engine(env=env).availability(machine),
    }
    return {"llamacpp": None, "mlx": "not installed", **{k: None if v.usable else v.reason for k, v in found.items()}}


def test_the_advisor_falls_back_to_gguf_where_exl3_cannot_run() -> None:
    model = find("qwen3-8b")
    turing = recommend(load_recorded("rtx2080ti"), model, status=_status("rtx2080ti", environment()))
    assert (turing.choice.engine, turing.choice.format) == ("llamacpp", "gguf")
    ampere = recommend(load_recorded("rtx4090-desktop"), model, status=_status("rtx4090-desktop", environment()))
    assert (ampere.choice.engine, ampere.choice.format) == ("exllamav3", "exl3")


def test_the_advisor_repeats_why_exl3_is_not_usable_yet() -> None:
    status = _status("rtx4090-desktop", environment(exllamav3=None))
    advice = recommend(load_recorded("rtx4090-desktop"), find("qwen3-8b"), status=status)
    assert any("not installed: pip install 'launcher[exllamav3]'" in reason for reason in advice.reasons)


def test_the_registry_builds_both_engines_without_importing_a_runtime() -> None:
    import sys

    v3 = registry.get("exllamav3")
    v2 = registry.get("exllamav2")
    assert (v3.name, v2.name) == ("exllamav3", "exllamav2")
    assert (get_spec("exllamav3").formats, get_spec("exllamav2").formats) == (("exl3",), ("exl2",))
    status = registry.status_map(load_recorded("cpu-avx2-laptop-16gb"))
    assert status["exllamav3"] and status["exllamav2"]  # not installed here, or no CUDA device: a reason either way
    assert "exllamav3" not in sys.modules and "exllamav2" not in sys.modules
