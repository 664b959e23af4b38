"""Memory fit, with numbers checked by hand (see each test's arithmetic)."""

from __future__ import annotations

import pytest

from launcher.advisor.fit import fit_model, kv_cache_bytes, swa_checkpoint_bytes, weights_bytes
from launcher.core.config import DEFAULT_SWA_CHECKPOINT_MB, DEFAULT_SWA_CHECKPOINTS
from launcher.core.model_types import Architecture
from launcher.core.units import GIB, MIB
from tests.advisor.machines import desktop_4090, laptop_cpu, macbook_m2

LLAMA_8B = Architecture(
    params_total_b=8.03,
    params_active_b=8.03,
    layers=32,
    attention_heads=32,
    kv_heads=8,
    head_dim=128,
    hidden_size=4096,
    max_context=131072,
)
LLAMA_70B = Architecture(
    params_total_b=70.6,
    params_active_b=70.6,
    layers=80,
    attention_heads=64,
    kv_heads=8,
    head_dim=128,
    hidden_size=8192,
    max_context=131072,
)
GEMMA3_27B = Architecture(
    params_total_b=27.4,
    params_active_b=27.4,
    layers=62,
    attention_heads=32,
    kv_heads=16,
    head_dim=128,
    hidden_size=5376,
    max_context=131072,
    sliding_window=1024,
    full_attention_layers=10,
)
GEMMA3_270M = Architecture(  # google/gemma-3-270m config.json; the starter model
    params_total_b=0.268,
    params_active_b=0.268,
    layers=18,
    attention_heads=4,
    kv_heads=1,
    head_dim=256,
    hidden_size=640,
    max_context=32768,
    sliding_window=512,
    full_attention_layers=3,
)
GPT_OSS_20B = Architecture(
    params_total_b=20.9,
    params_active_b=3.6,
    layers=24,
    attention_heads=64,
    kv_heads=8,
    head_dim=64,
    hidden_size=2880,
    max_context=131072,
    sliding_window=128,
    full_attention_layers=12,
    experts=32,
    experts_active=4,
)


def test_kv_cache_llama_8b_at_8k_is_one_gib() -> None:
    # 2 (K and V) * 32 layers * 8 KV heads * 128 dims * 2 bytes = 128 KiB per token; * 8192 = 1 GiB.
    assert kv_cache_bytes(LLAMA_8B, 8192) == 1 * GIB
    assert kv_cache_bytes(LLAMA_8B, 8192, parallel=4) == 4 * GIB
    # q8_0 stores 34 bytes per 32 values.
    assert kv_cache_bytes(LLAMA_8B, 8192, kv_type="q8_0") == int(GIB * 34 / 64)


def test_sliding_window_layers_keep_only_the_window() -> None:
    # Gemma 3 27B: 8 KiB per token per layer; 10 global layers * 32768 + 52 local layers * 1024 tokens
    # (mlx-lm's rotating caches, vLLM: each sequence keeps its own window).
    per_layer_token = 2 * 16 * 128 * 2
    expected = per_layer_token * (10 * 32768 + 52 * 1024)
    assert kv_cache_bytes(GEMMA3_27B, 32768) == expected
    assert kv_cache_bytes(GEMMA3_27B, 32768, sliding="window") == expected
    assert kv_cache_bytes(GEMMA3_27B, 32768, sliding="full") == per_layer_token * 62 * 32768
    assert expected < 0.2 * per_layer_token * 62 * 32768


def test_llamacpp_sliding_layers_share_one_padded_window_cache() -> None:
    # gemma-3-270m: 2 (K, V) * 1 KV head * 256 dims * 2 bytes = 1024 B per cell per layer; 3 full + 15 sliding layers.
    # One sequence: full layers 32768 cells; sliding layers min(32768, pad256(512 * 1 + 512)) = 1024 cells.
    one = 1024 * (3 * 32768 + 15 * 1024)
    assert one == 116_391_936  # 111.0 MiB, where the old full-size SWA cache took 18 * 32768 cells = 576 MiB
    assert kv_cache_bytes(GEMMA3_270M, 32768, 1, sliding="llamacpp") == one
    # Four sequences in the unified cache: full layers 131072 cells; sliding min(131072, pad256(512 * 4 + 512)) = 2560.
    four = 1024 * (3 * 131072 + 15 * 2560)
    assert four == 441_974_784  # 421.5 MiB
    assert kv_cache_bytes(GEMMA3_270M, 32768, 4, sliding="llamacpp") == four
    # mlx/vLLM keep each sequence's own 512-token window: 4 * 1024 * (3 * 32768 + 15 * 512) = 414 MiB.
    assert kv_cache_bytes(GEMMA3_270M, 32768, 4, sliding="window") == 4 * 1024 * (3 * 32768 + 15 * 512)
    # q8_0 stores 34 bytes per 32 values: 544 B per cell per layer.
    assert kv_cache_bytes(GEMMA3_270M, 32768, 4, "q8_0", sliding="llamacpp") == 544 * (3 * 131072 + 15 * 2560)


def test_llamacpp_sliding_cache_rounds_up_to_256_cells_and_never_exceeds_the_context() -> None:
    # gpt-oss-20b: 2 * 8 * 64 * 2 = 2048 B per cell per layer, 12 full and 12 sliding layers with a 128-token window.
    # One sequence: 128 + 512 = 640 cells, padded to 768; three: 384 + 512 = 896, padded to 1024.
    assert kv_cache_bytes(GPT_OSS_20B, 32768, 1, sliding="llamacpp") == 2048 * (12 * 32768 + 12 * 768)
    assert kv_cache_bytes(GPT_OSS_20B, 32768, 3, sliding="llamacpp") == 2048 * (12 * 3 * 32768 + 12 * 1024)
    # A context smaller than window + micro-batch: the sliding layers are as big as the full ones.
    assert kv_cache_bytes(GEMMA3_270M, 512, 1, sliding="llamacpp") == 1024 * 18 * 512
    # Models without sliding layers are the same for every engine.
    assert kv_cache_bytes(LLAMA_8B, 8192, 2, sliding="llamacpp") == kv_cache_bytes(LLAMA_8B, 8192, 2) == 2 * GIB


def test_llamacpp_checkpoints_are_bounded_per_slot_and_in_total() -> None:
    assert (DEFAULT_SWA_CHECKPOINTS, DEFAULT_SWA_CHECKPOINT_MB) == (8, 1024)
    # One checkpoint is one sequence's window in the 15 sliding layers: 15 * 512 * 1024 B = 7.5 MiB.
    assert swa_checkpoint_bytes(GEMMA3_270M, 32768, 1) == 8 * 15 * 512 * 1024  # 8 per slot: 60 MiB
    assert swa_checkpoint_bytes(GEMMA3_270M, 32768, 4) == 4 * 8 * 15 * 512 * 1024  # 240 MiB
    assert swa_checkpoint_bytes(GEMMA3_270M, 32768, 1, "q8_0") == 8 * 15 * 512 * 544
    assert swa_checkpoint_bytes(GEMMA3_270M, 256, 1) == 8 * 15 * 256 * 1024  # the window is capped by the context
    # Gemma 3 27B: 52 * 1024 * 8 KiB = 416 MiB each; 8 of them would be 3.25 GiB, but all together hold 1024 MiB.
    assert swa_checkpoint_bytes(GEMMA3_27B, 32768, 1) == 1024 * MIB
    assert swa_checkpoint_bytes(GEMMA3_27B, 32768, 1, per_slot=2) == 2 * 52 * 1024 * 8192
    # No sliding layers, no checkpoints.
    assert swa_checkpoint_bytes(LLAMA_8B, 32768, 4) == 0


def test_llamacpp_fit_shows_checkpoints_in_host_ram() -> None:
    weights = 253_000_000
    # On a GPU: weights and KV on the card, the checkpoints in a CPU RAM share of their own.
    fit = fit_model(desktop_4090(), GEMMA3_270M, weights, context=32768, parallel=4, sliding="llamacpp")
    assert fit.verdict == "full_gpu"
    assert fit.kv_bytes == 441_974_784
    assert fit.checkpoint_bytes == 240 * MIB
    gpu, host = fit.devices
    assert gpu.checkpoints == 0 and gpu.kv_cache == fit.kv_bytes
    assert (host.device, host.weights, host.kv_cache, host.checkpoints) == ("CPU RAM", 0, 0, 240 * MIB)
    assert fit.needed_bytes == weights + fit.kv_bytes + fit.overhead_bytes + 240 * MIB
    assert "KV checkpoints 240.0 MiB" in fit.breakdown()
    # CPU only: in the same share as everything else.
    (cpu,) = fit_model(laptop_cpu(16), GEMMA3_270M, weights, context=32768, parallel=4, sliding="llamacpp").devices
    assert cpu.checkpoints == 240 * MIB and cpu.used == cpu.weights + cpu.kv_cache + cpu.overhead + 240 * MIB
    # Apple: outside the GPU's wired limit, on the CPU side of unified memory.
    apple = fit_model(macbook_m2(16), GEMMA3_270M, weights, context=32768, parallel=4, sliding="llamacpp")
    pool, side = apple.devices
    assert apple.verdict == "unified"
    assert pool.checkpoints == 0 and side.checkpoints == 240 * MIB and side.device == "CPU side of unified memory"
    # Other engines keep no checkpoints.
    assert fit_model(macbook_m2(16), GEMMA3_270M, weights, context=32768, parallel=4).checkpoint_bytes == 0
    assert (
        "checkpoints" not in fit_model(desktop_4090(), LLAMA_8B, 4 * GIB, context=8192, sliding="llamacpp").breakdown()
    )


def test_8b_q4_k_m_at_8k_fits_a_4090_with_room() -> None:
    # 8.03e9 * 4.90 / 8 = 4.92e9 B of weights + 1 GiB KV + ~1.1 GB overhead ~= 7.1 GB of 23 GiB free.
    weights = weights_bytes(LLAMA_8B, 4.90)
    assert weights == pytest.approx(4.918e9, rel=1e-3)
    fit = fit_model(desktop_4090(), LLAMA_8B, weights, context=8192)
    assert fit.verdict == "full_gpu"
    assert fit.gpu_layers == 32
    assert 6.5e9 < fit.needed_bytes < 7.5e9
    (gpu,) = fit.devices
    assert gpu.fits and gpu.free == 23 * GIB


def test_70b_q4_k_m_on_a_4090_offloads_part_of_the_layers() -> None:
    # 70.6e9 * 4.90 / 8 = 43.2 GB; at 8k the KV is 2*80*8*128*2*8192 = 2.5 GiB; per layer ~0.57 GB,
    # and ~22 GB usable VRAM holds ~38 of 80 layers; the rest (~24 GB) goes to the 60 GiB of free RAM.
    fit = fit_model(desktop_4090(), LLAMA_70B, weights_bytes(LLAMA_70B, 4.90), context=8192)
    assert fit.verdict == "partial"
    assert 34 <= fit.gpu_layers <= 40
    assert fit.devices[-1].device == "CPU RAM" and fit.devices[-1].fits
    assert "layers on GPU" in fit.label


def test_70b_does_not_fit_a_16_gib_laptop() -> None:
    fit = fit_model(laptop_cpu(16), LLAMA_70B, weights_bytes(LLAMA_70B, 4.90), context=8192)
    assert fit.verdict == "wont_fit"
    assert not fit.fits


def test_8b_runs_cpu_only_on_the_laptop() -> None:
    fit = fit_model(laptop_cpu(16), LLAMA_8B, weights_bytes(LLAMA_8B, 4.90), context=8192)
    assert fit.verdict == "cpu"
    assert fit.gpu_layers == 0


def test_apple_unified_memory_respects_the_gpu_wired_limit() -> None:
    # M2 16 GiB: the GPU may wire ~10.7 GiB. 8B Q4_K_M at 8k (~7 GB) fits; at Q8_0 (8.5 GB + 1 GiB KV + overhead)
    # it is over the GPU limit although it would fit in RAM, so llama.cpp splits (MLX could not).
    m2 = macbook_m2(16)
    assert fit_model(m2, LLAMA_8B, weights_bytes(LLAMA_8B, 4.90), context=8192).verdict == "unified"
    over = fit_model(m2, LLAMA_8B, weights_bytes(LLAMA_8B, 8.51), context=32768)
    assert over.verdict in ("partial", "wont_fit")
    assert (
        fit_model(m2, LLAMA_8B, weights_bytes(LLAMA_8B, 8.51), context=32768, allow_offload=False).verdict == "wont_fit"
    )


def test_multi_gpu_split_uses_each_cards_free_memory() -> None:
    from dataclasses import replace

    one = desktop_4090()
    two = replace(one, gpus=(one.gpus[0], replace(one.gpus[0], index=1, memory_free=12 * GIB)))
    fit = fit_model(two, LLAMA_70B, weights_bytes(LLAMA_70B, 3.17), context=4096)  # Q2_K ~28 GB
    assert fit.verdict == "full_gpu"
    card0, card1 = fit.devices
    assert card0.weights > card1.weights  # the card with more free memory takes more layers
    assert all(d.fits for d in fit.devices)
