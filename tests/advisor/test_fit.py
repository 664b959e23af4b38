"""Memory fit, with numbers checked by hand (see each test's arithmetic)."""

from __future__ import annotations

import pytest

from launcher.advisor.fit import fit_model, kv_cache_bytes, weights_bytes
from launcher.catalog.schema import Architecture
from launcher.core.units import GIB
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


def test_kv_cache_llama_8b_at_8k_is_one_gib() -> None:
    # 2 (K and V) * 32 layers * 8 KV heads * 128 dims * 2 bytes = 128 KiB per token; * 8192 = 1 GiB.
    assert kv_cache_bytes(LLAMA_8B, 8192) == 1 * GIB
    assert kv_cache_bytes(LLAMA_8B, 8192, parallel=4) == 4 * GIB
    # q8_0 stores 34 bytes per 32 values.
    assert kv_cache_bytes(LLAMA_8B, 8192, kv_type="q8_0") == int(GIB * 34 / 64)


def test_sliding_window_layers_keep_only_the_window() -> None:
    # Gemma 3 27B: 8 KiB per token per layer; 10 global layers * 32768 + 52 local layers * 1024 tokens.
    per_layer_token = 2 * 16 * 128 * 2
    expected = per_layer_token * (10 * 32768 + 52 * 1024)
    assert kv_cache_bytes(GEMMA3_27B, 32768) == expected
    assert kv_cache_bytes(GEMMA3_27B, 32768, sliding_window_aware=False) == per_layer_token * 62 * 32768
    assert expected < 0.2 * per_layer_token * 62 * 32768


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
