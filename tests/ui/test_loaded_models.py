"""The Server page's reading of `/launcher/models` and of a two-model /metrics scrape, without widgets."""

from __future__ import annotations

import httpx
import pytest

from launcher.core.errors import ServerError
from launcher.ui.loaded_models import decode_text, duration_text, parse_loaded_models, unload_model
from launcher.ui.metrics import LiveSample, Measured, ProcessMemory, parse_metrics

MIB = 1024**2

# The shape `server/pool/model_slot.py` `describe` and `routes_models.loaded_models` answer.
LISTING = {
    "models": [
        {
            "id": "coder",
            "engine": "llamacpp",
            "format": "gguf",
            "quant": "Q4_K_M",
            "context_length": 32768,
            "parallel": 2,
            "memory_bytes": 5_000 * MIB,
            "estimated_bytes": 5_200 * MIB,
            "requests_running": 2,
            "requests_waiting": 1,
            "busy": True,
            "idle_seconds": 0.0,
            "ttl_seconds": None,
            "load_seconds": 4.21,
            "loaded_at": 1_760_000_000.0,
        },
        {
            "id": "small",
            "engine": "llamacpp",
            "format": "gguf",
            "quant": None,
            "context_length": 4096,
            "parallel": 1,
            "memory_bytes": 300 * MIB,
            "estimated_bytes": 310 * MIB,
            "requests_running": 0,
            "requests_waiting": 0,
            "busy": False,
            "idle_seconds": 75.4,
            "ttl_seconds": 600.0,
            "load_seconds": 0.3,
            "loaded_at": 1_760_000_100.0,
        },
    ],
    "available": ["coder", "qwen3-8b", "small"],
    "memory_budget_bytes": 12 * 1024 * MIB,
    "memory_used_bytes": 5_510 * MIB,
    "max_models": None,
    "loads": {"coder": 1, "small": 2},
}


def test_a_listing_reads_into_rows_with_their_words() -> None:
    listing = parse_loaded_models(LISTING, fetched_at=5.0)
    coder, small = listing.models
    assert (coder.id, coder.engine_text, coder.memory_text, coder.context_text) == (
        "coder",
        "llamacpp · Q4_K_M",
        "4.9 GiB",
        "32,768 × 2",
    )
    assert coder.busy and coder.activity_text == "2 running · 1 waiting"
    assert (small.engine_text, small.context_text) == ("llamacpp", "4,096")
    assert small.activity_text == "idle 1 min · unloads in 9 min"  # 600 s TTL, 75 s idle: 8 min 45 s left
    assert listing.on_request == ("qwen3-8b",)
    assert listing.loads == {"coder": 1, "small": 2} and listing.fetched_at == 5.0
    assert listing.summary_text == "2 models loaded · 5.4 GiB of the 12.0 GiB memory budget · 1 more load on request."


def test_activity_of_a_model_held_by_a_request_that_has_not_started() -> None:
    held = parse_loaded_models({"models": [{**LISTING["models"][1], "busy": True}]}).models[0]  # type: ignore[index]
    assert held.activity_text == "busy"


def test_idle_without_a_ttl_and_an_empty_server() -> None:
    kept = parse_loaded_models({"models": [{**LISTING["models"][1], "ttl_seconds": None}]}).models[0]  # type: ignore[index]
    assert kept.activity_text == "idle 1 min"
    empty = parse_loaded_models({"models": [], "available": ["a", "b"], "memory_used_bytes": 0})
    assert empty.summary_text == "No model is loaded · 2 more load on request."


def test_remote_models_are_named_apart_from_those_that_load_here() -> None:
    remote = {"team/llama": {"remote": "team", "url": "https://vllm.example/v1", "model": "llama"}}
    listing = parse_loaded_models({"models": [], "available": ["a", "team/llama"], "remote_models": remote})
    assert listing.on_request == ("a",)
    assert listing.summary_text == "No model is loaded · 1 more load on request · 1 remote (https://vllm.example/v1)."


@pytest.mark.parametrize(
    ("seconds", "text"),
    [(0, "0 s"), (59.9, "59 s"), (60, "1 min"), (3599, "59 min"), (3600, "1 h"), (4000, "1 h 6 min")],
)
def test_durations_in_whole_units(seconds: float, text: str) -> None:
    assert duration_text(seconds) == text


@pytest.mark.parametrize(
    ("seconds", "text"), [(0.2, "1 s"), (59, "59 s"), (59.5, "1 min"), (61, "2 min"), (599.6, "10 min")]
)
def test_a_countdown_rounds_up(seconds: float, text: str) -> None:
    assert duration_text(seconds, round_up=True) == text


def test_decode_rates_read_as_tok_s() -> None:
    assert (decode_text(None), decode_text(0.0), decode_text(42.25), decode_text(1234.5)) == (
        "–",
        "0.0 tok/s",
        "42.2 tok/s",
        "1234 tok/s",
    )


@pytest.mark.parametrize("answer", [None, [], {"models": None}, {"models": [{"engine": "x"}]}])
def test_a_malformed_listing_is_a_value_error(answer: object) -> None:
    with pytest.raises(ValueError):
        parse_loaded_models(answer)


def test_an_unreachable_server_is_a_clear_unload_error() -> None:
    with pytest.raises(ServerError, match="did not answer"):
        unload_model("http://127.0.0.1:9", "small", transport=httpx.HTTPTransport(retries=0))


# What /metrics says of a server with two models loaded (labels as `server/metrics.py` writes them).
TWO_MODELS = """\
# TYPE launcher_decode_tokens_per_second gauge
launcher_decode_tokens_per_second{model="coder"} 30.0
launcher_decode_tokens_per_second{model="small"} 120.5
# TYPE launcher_kv_cache_used_tokens gauge
launcher_kv_cache_used_tokens{model="coder"} 1000.0
launcher_kv_cache_used_tokens{model="small"} 3000.0
# TYPE launcher_kv_cache_total_tokens gauge
launcher_kv_cache_total_tokens{model="coder"} 2000.0
launcher_kv_cache_total_tokens{model="small"} 6000.0
# TYPE launcher_kv_cache_usage_ratio gauge
launcher_kv_cache_usage_ratio{model="coder"} 0.5
launcher_kv_cache_usage_ratio{model="small"} 0.5
# TYPE launcher_engine_memory_bytes gauge
launcher_engine_memory_bytes{kind="weights",model="coder"} 4000.0
launcher_engine_memory_bytes{kind="kv_cache",model="coder"} 1000.0
launcher_engine_memory_bytes{kind="weights",model="small"} 300.0
launcher_engine_memory_bytes{kind="kv_cache",model="small"} 100.0
# TYPE launcher_stream_decode_tokens_total counter
launcher_stream_decode_tokens_total{model="coder"} 60.0
launcher_stream_decode_tokens_total{model="small"} 9000.0
# TYPE launcher_stream_decode_seconds_total counter
launcher_stream_decode_seconds_total{model="coder"} 2.0
launcher_stream_decode_seconds_total{model="small"} 3.0
"""


def test_the_server_wide_gauges_add_up_two_models() -> None:
    snapshot = parse_metrics(TWO_MODELS, 1.0)
    assert snapshot.engine_memory == {"weights": 4300.0, "kv_cache": 1100.0}
    assert snapshot.kv_usage_ratio == 0.5  # 4,000 of 8,000 cells, not 0.5 + 0.5
    assert snapshot.decode_tokens_per_second == 150.5
    assert snapshot.decode_tps_by_model == {"coder": 30.0, "small": 120.5}
    sample = LiveSample.between(None, snapshot, ProcessMemory())
    assert (sample.kv_used_tokens, sample.kv_total_tokens, sample.kv_usage_ratio) == (4000, 8000, 0.5)


def test_the_served_models_prediction_is_measured_on_its_own_series() -> None:
    sample = LiveSample.between(None, parse_metrics(TWO_MODELS, 1.0), ProcessMemory())
    coder = sample.snapshot.for_model("coder")
    assert coder.engine_memory == {"weights": 4000.0, "kv_cache": 1000.0} and coder.kv_usage_ratio == 0.5
    assert Measured.from_sample(sample, "coder").decode_tps == 30.0  # 60 tokens in 2 s, not small's 3,000 tok/s
    assert Measured.from_sample(sample).decode_tps == 9060 / 5  # the whole server
    assert sample.snapshot.for_model("not-loaded") is sample.snapshot  # a server without model labels
