"""`SamplingParams` -> each runtime's sampler arguments.

ExLlamaV3: `ComboSampler(rep_p, freq_p, pres_p, temperature, min_p, top_k, top_p, logit_bias)`
(exllamav3/generator/sampler/presets.py): steps left at their defaults are no-ops and
temperature 0 becomes argmax.
ExLlamaV2: `ExLlamaV2Sampler.Settings(...)` (exllamav2/generator/sampler.py), whose own defaults
are NOT neutral (top_k 50, top_p 0.8, repetition penalty 1.025), so every field is set.
"""

from __future__ import annotations

from typing import Any

from launcher.engines.base import SamplingParams


def combo_sampler_kwargs(params: SamplingParams) -> dict[str, Any]:
    """Keyword arguments for exllamav3's ComboSampler."""
    kwargs: dict[str, Any] = {
        "rep_p": params.repeat_penalty,
        "freq_p": params.frequency_penalty,
        "pres_p": params.presence_penalty,
        "temperature": max(0.0, params.temperature),
        "min_p": params.min_p,
        "top_k": max(0, params.top_k),
        "top_p": params.top_p if 0.0 < params.top_p <= 1.0 else 1.0,
    }
    if params.logit_bias:
        kwargs["logit_bias"] = dict(params.logit_bias)
    return kwargs


def v2_settings_kwargs(params: SamplingParams) -> dict[str, Any]:
    """Keyword arguments for exllamav2's ExLlamaV2Sampler.Settings (token_bias is set separately)."""
    greedy = params.temperature <= 0.0 or params.top_k == 1
    return {
        "temperature": 1.0 if greedy else params.temperature,
        "top_k": 1 if greedy else max(0, params.top_k),
        "top_p": 0.0 if greedy or not 0.0 < params.top_p < 1.0 else params.top_p,
        "min_p": 0.0 if greedy else params.min_p,
        "token_repetition_penalty": params.repeat_penalty,
        "token_frequency_penalty": params.frequency_penalty,
        "token_presence_penalty": params.presence_penalty,
    }
