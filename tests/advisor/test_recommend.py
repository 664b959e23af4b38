"""Recorded machines x catalog models give the engine, format and verdict DOMAIN.md section 1 asks for."""

from __future__ import annotations

import pytest

from launcher.advisor import plan_local, recommend
from launcher.catalog.catalog import default_catalog
from launcher.hardware.recorded import load_recorded, recorded_names


@pytest.mark.parametrize(
    ("machine", "model", "context", "engine", "fmt", "verdict"),
    [
        ("macbook-air-m2-16gb", "qwen3-8b", None, "mlx", "mlx", "unified"),
        ("mac-studio-m3-ultra-192gb", "qwen3-30b-a3b", None, "mlx", "mlx", "unified"),
        ("mac-studio-m3-ultra-192gb", "llama-3.3-70b", None, "mlx", "mlx", "unified"),
        ("rtx4090-desktop", "qwen3-8b", None, "exllamav3", "exl3", "full_gpu"),
        ("rtx4090-desktop", "llama-3.3-70b", None, "llamacpp", "gguf", "partial"),
        ("2x-rtx3090-nvlink", "qwen3-32b", None, "exllamav3", "exl3", "full_gpu"),
        ("4x-rtx4090", "llama-3.3-70b", None, "llamacpp", "gguf", "full_gpu"),
        ("cpu-avx2-laptop-16gb", "qwen3-8b", None, "llamacpp", "gguf", "cpu"),
        ("cpu-avx2-laptop-16gb", "llama-3.3-70b", None, "llamacpp", "gguf", "wont_fit"),
        ("old-cpu-no-avx2", "gemma-3-270m", None, "llamacpp", "gguf", "cpu"),
        ("8x-h100-server", "llama-3.3-70b", None, "vllm", "fp8", "full_gpu"),
        ("rtx2080ti", "llama-3.1-8b", 8192, "exllamav2", "exl2", "full_gpu"),
        ("rtx2080ti", "qwen3-8b", 8192, "llamacpp", "gguf", "full_gpu"),
        ("this-linux-vm", "gemma-3-270m", None, "llamacpp", "gguf", "cpu"),
    ],
)
def test_recorded_machine_gets_the_expected_engine(
    machine: str, model: str, context: int | None, engine: str, fmt: str, verdict: str
) -> None:
    rec = recommend(load_recorded(machine), default_catalog().get(model), context=context)  # type: ignore[arg-type]
    assert (rec.choice.engine, rec.choice.format, rec.choice.fit.verdict) == (engine, fmt, verdict), rec.reasons
    assert rec.reasons, "every recommendation explains itself"


def test_every_recorded_machine_and_model_gets_an_honest_answer() -> None:
    for name in recorded_names():
        machine = load_recorded(name)
        for model in default_catalog().models:
            rec = recommend(machine, model)
            choice = rec.choice
            assert choice.speed.decode_low <= choice.speed.decode_high
            assert choice.fit.devices, f"{name}/{model.id}: no breakdown"
            if not rec.fits:
                assert choice.fit.advice and "needs" in choice.fit.advice[0]
            # Alternatives are other options, never the choice again.
            assert all(alt is not choice for alt in rec.alternatives)


def test_pre_ampere_card_never_gets_exl3() -> None:
    for model in default_catalog().models:
        rec = recommend(load_recorded("rtx2080ti"), model)
        assert rec.choice.engine != "exllamav3"
        assert all(alt.engine != "exllamav3" for alt in rec.alternatives)


def test_team_workload_on_one_card_hands_off_to_vllm() -> None:
    rec = recommend(load_recorded("rtx4090-desktop"), default_catalog().get("qwen3-8b"), users=8)  # type: ignore[arg-type]
    assert rec.choice.engine == "vllm"
    assert not rec.choice.launchable
    assert any("many users" in reason for reason in rec.reasons)


def test_unusable_engine_is_reported_not_hidden() -> None:
    status = {"exllamav3": "not installed: pip install 'launcher[exllamav3]'", "llamacpp": None}
    rec = recommend(load_recorded("rtx4090-desktop"), default_catalog().get("qwen3-8b"), status=status)  # type: ignore[arg-type]
    assert rec.choice.engine == "exllamav3"
    assert rec.choice.unavailable_reason
    assert any("not usable here" in reason for reason in rec.reasons)
    assert any(alt.runnable_here for alt in rec.alternatives)


def test_partial_offload_says_which_context_would_fit_fully() -> None:
    rec = recommend(load_recorded("rtx2080ti"), default_catalog().get("qwen3-8b"))  # type: ignore[arg-type]
    if rec.choice.fit.verdict == "partial":
        assert any("fits on the GPU" in reason for reason in rec.reasons)


def test_plan_local_on_this_vm_runs_the_starter_on_cpu() -> None:
    starter = default_catalog().starter
    plan = plan_local(load_recorded("this-linux-vm"), "gguf", starter.architecture, 253_000_000)
    assert plan.engine == "llamacpp"
    assert plan.gpu_layers == 0
    assert plan.context == 32768
    assert "CPU" in plan.reason


def test_plan_local_lowers_context_until_the_kv_cache_fits() -> None:
    model = default_catalog().get("qwen3-8b")
    assert model is not None
    plan = plan_local(load_recorded("cpu-avx2-laptop-16gb"), "gguf", model.architecture, 5_000_000_000, parallel=4)
    assert plan.fit.fits
    assert plan.context < 32768
    assert "context" in plan.reason


def test_plan_local_says_exl3_cannot_run_without_nvidia() -> None:
    model = default_catalog().get("qwen3-8b")
    assert model is not None
    plan = plan_local(load_recorded("cpu-avx2-laptop-16gb"), "exl3", model.architecture, 4_500_000_000)
    assert plan.fit.verdict == "wont_fit"
    assert "NVIDIA" in plan.fit.advice[0]


def test_llamacpp_plans_count_full_sliding_window_caches() -> None:
    # Our llama.cpp engine keeps full-size SWA caches (prefix reuse), so the plan must not assume window savings,
    # while MLX's rotating caches do keep only the window.
    from launcher.advisor.fit import kv_cache_bytes

    arch = default_catalog().starter.architecture
    machine = load_recorded("this-linux-vm")
    plan = plan_local(machine, "gguf", arch, 253_000_000, context=32768, parallel=2)
    assert plan.fit.kv_bytes == kv_cache_bytes(arch, 32768, 2, sliding_window_aware=False)
    mlx_plan = plan_local(machine, "mlx", arch, 253_000_000, context=32768, parallel=2)
    assert mlx_plan.fit.kv_bytes == kv_cache_bytes(arch, 32768, 2)
