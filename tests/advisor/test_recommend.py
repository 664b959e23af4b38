"""Recorded machines x catalog models give the engine, format and verdict the advisor promises."""

from __future__ import annotations

import pytest

from launcher.advisor import plan_local, recommend
from launcher.advisor.options import build_option
from launcher.catalog.catalog import default_catalog
from launcher.catalog.schema import CatalogModel
from launcher.cli.recommend import format_recommendation, recommendation_json
from launcher.core.units import GIB, MIB
from launcher.hardware.recorded import load_recorded, recorded_names
from tests.advisor.machines import laptop_cpu, macbook_m2


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


def test_llamacpp_plans_count_the_windowed_sliding_cache_and_its_checkpoints() -> None:
    # Our llama.cpp engine runs llama.cpp's windowed SWA cache, one for all sequences, plus checkpoints in
    # host RAM; MLX's rotating caches keep each sequence's window and no checkpoints.
    from launcher.advisor.fit import kv_cache_bytes, swa_checkpoint_bytes

    arch = default_catalog().starter.architecture
    machine = load_recorded("this-linux-vm")
    plan = plan_local(machine, "gguf", arch, 253_000_000, context=32768, parallel=2)
    # gemma-3-270m, 1024 B per cell per layer: 3 full layers * 65536 cells + 15 sliding * pad256(2 * 512 + 512) = 1536.
    assert plan.fit.kv_bytes == kv_cache_bytes(arch, 32768, 2, sliding="llamacpp") == 1024 * (3 * 65536 + 15 * 1536)
    assert plan.fit.checkpoint_bytes == swa_checkpoint_bytes(arch, 32768, 2) == 2 * 8 * 15 * 512 * 1024
    assert plan.kv_type == "f16"
    mlx_plan = plan_local(machine, "mlx", arch, 253_000_000, context=32768, parallel=2)
    assert mlx_plan.fit.kv_bytes == kv_cache_bytes(arch, 32768, 2)
    assert mlx_plan.fit.checkpoint_bytes == 0


def _only_gguf(model_id: str, quant: str) -> CatalogModel:
    """A catalog entry with one GGUF quant and no other formats."""
    model = default_catalog().get(model_id)
    assert model is not None and model.gguf is not None
    gguf = model.gguf.model_copy(update={"quants": {quant: model.gguf.quants[quant]}})
    return model.model_copy(update={"gguf": gguf, "mlx": {}, "exl3": {}, "exl2": {}})


def test_q8_0_kv_cache_comes_before_a_smaller_context() -> None:
    # Llama 3.1 8B Q4_K_M (4.92e9 B) on a 14 GiB CPU laptop (8.8 GiB usable). At 32k the f16 KV cache is
    # 2 * 32 * 8 * 128 * 2 B * 32768 = 4.0 GiB: ~9.4 GiB in all, over. q8_0 holds it in 4 GiB * 34/64 = 2.1 GiB,
    # ~7.4 GiB in all.
    model = _only_gguf("llama-3.1-8b", "Q4_K_M")
    machine = laptop_cpu(14)
    f16 = build_option(machine, model, "llamacpp", "gguf", "Q4_K_M", context=32768, parallel=1)
    assert f16.fit.verdict == "wont_fit" and f16.fit.kv_bytes == 4 * GIB
    rec = recommend(machine, model)
    assert (rec.context, rec.kv_type, rec.choice.fit.verdict) == (32768, "q8_0", "cpu")
    assert rec.choice.fit.kv_bytes == 4 * GIB * 34 // 64
    assert rec.choice.label == "llama.cpp + GGUF Q4_K_M + q8_0 KV cache"
    (why,) = [r for r in rec.reasons if "q8_0" in r]
    assert "--kv-cache-type q8_0" in why
    assert "2.1 GiB instead of 4.0 GiB at f16" in why
    assert "near-lossless in llama.cpp's perplexity tests" in why and "slower attention on the CPU" in why
    assert "With an f16 KV cache nothing would fit at 32k context" in why
    assert recommendation_json(rec)["kv_type"] == "q8_0"
    assert "KV cache q8_0" in format_recommendation(rec)
    # Where f16 fits, it stays f16.
    assert recommend(laptop_cpu(32), model).kv_type == "f16"


def test_q8_0_kv_cache_is_not_used_to_trade_up_within_the_quality_band() -> None:
    # Mistral Small 3.2 24B on a 24 GiB RTX 4090 at 32k: with an f16 KV cache (5.0 GiB) Q5_K_M fits on the GPU,
    # with q8_0 (2.7 GiB) Q6_K would too. Both are in the sweet spot; Q6_K would decode ~13% slower for little
    # quality, so the KV cache stays f16.
    rec = recommend(load_recorded("rtx4090-desktop"), default_catalog().get("mistral-small-3.2-24b"))  # type: ignore[arg-type]
    assert (rec.choice.quant, rec.kv_type, rec.choice.fit.verdict, rec.context) == ("Q5_K_M", "f16", "full_gpu", 32768)


def test_the_serve_plan_takes_q8_0_only_when_the_kv_type_is_left_to_it() -> None:
    model = _only_gguf("llama-3.1-8b", "Q4_K_M")
    machine = laptop_cpu(14)
    auto = plan_local(machine, "gguf", model.architecture, 4_920_000_000, context=32768)
    assert (auto.fit.verdict, auto.kv_type, auto.context) == ("cpu", "q8_0", 32768)
    assert "--kv-cache-type q8_0" in auto.reason and "4.0 GiB at f16" in auto.reason
    # A pinned KV type (launcher serve passes --kv-cache-type) is kept, and the plan says it does not fit.
    pinned = plan_local(machine, "gguf", model.architecture, 4_920_000_000, context=32768, kv_type="f16")
    assert (pinned.fit.verdict, pinned.kv_type) == ("wont_fit", "f16")
    # Without a context the plan keeps 32k with q8_0 instead of lowering it with f16.
    assert plan_local(machine, "gguf", model.architecture, 4_920_000_000).context == 32768
    # Only llama.cpp: MLX plans stay f16.
    assert plan_local(macbook_m2(8), "mlx", model.architecture, 4_500_000_000).kv_type == "f16"


def test_gemma_3_27b_fits_a_24_gb_card_at_32k_with_llamacpp() -> None:
    # With llama.cpp's windowed SWA cache the KV is 8 KiB * (10 * 32768 + 52 * 1536) = 3.1 GiB, not 15.5 GiB:
    # Q4_K_M goes fully on the GPU; the checkpoints (1 GiB at most) stay in RAM.
    rec = recommend(load_recorded("rtx4090-desktop"), default_catalog().get("gemma-3-27b"))  # type: ignore[arg-type]
    assert (rec.choice.engine, rec.choice.quant, rec.choice.fit.verdict, rec.context) == (
        "llamacpp",
        "Q4_K_M",
        "full_gpu",
        32768,
    )
    assert rec.choice.fit.kv_bytes == 8192 * (10 * 32768 + 52 * 1536)
    assert rec.choice.fit.checkpoint_bytes == 1024 * MIB
    assert rec.choice.fit.devices[-1].device == "CPU RAM"
