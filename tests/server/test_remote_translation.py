"""The pieces of the remote proxy that do not need a server: the upstream request, the tool-call
deltas, the error bodies and the remote metric names.

The metric texts are in the exposition format vLLM and SGLang write (names and labels as in
vllm/v1/metrics/loggers.py and SGLang's docs/references/production_metrics.md).
"""

from __future__ import annotations

import json

import httpx

from launcher.engines.base import Constraint, SamplingParams
from launcher.server.core.chat import ChatOptions, ToolCallDelta
from launcher.server.core.generation import GenerationSettings
from launcher.server.core.messages import ChatMessage, ToolCall
from launcher.server.upstreams.remote_answers import ToolCalls, upstream_error
from launcher.server.upstreams.remote_metrics import _rate, read_samples
from launcher.server.upstreams.remote_request import request_body
from launcher.server.upstreams.upstream import Upstream

VLLM_METRICS = """\
# HELP vllm:num_requests_running Number of requests in model execution batches.
# TYPE vllm:num_requests_running gauge
vllm:num_requests_running{engine="0",model_name="Qwen/Qwen3-8B"} 3.0
vllm:num_requests_running{engine="1",model_name="Qwen/Qwen3-8B"} 2.0
# TYPE vllm:num_requests_waiting gauge
vllm:num_requests_waiting{engine="0",model_name="Qwen/Qwen3-8B"} 1.0
# TYPE vllm:kv_cache_usage_perc gauge
vllm:kv_cache_usage_perc{engine="0",model_name="Qwen/Qwen3-8B"} 0.25
vllm:kv_cache_usage_perc{engine="1",model_name="Qwen/Qwen3-8B"} 0.5
# TYPE vllm:generation_tokens counter
vllm:generation_tokens_total{engine="0",model_name="Qwen/Qwen3-8B"} 1000.0
# TYPE vllm:prompt_tokens counter
vllm:prompt_tokens_total{engine="0",model_name="Qwen/Qwen3-8B"} 5000.0
"""

SGLANG_METRICS = """\
# HELP sglang:num_running_reqs The number of running requests
# TYPE sglang:num_running_reqs gauge
sglang:num_running_reqs{model_name="meta-llama/Llama-3.1-8B-Instruct"} 162.0
# TYPE sglang:num_queue_reqs gauge
sglang:num_queue_reqs{model_name="meta-llama/Llama-3.1-8B-Instruct"} 2826.0
# TYPE sglang:token_usage gauge
sglang:token_usage{model_name="meta-llama/Llama-3.1-8B-Instruct"} 0.28
# TYPE sglang:num_used_tokens gauge
sglang:num_used_tokens{model_name="meta-llama/Llama-3.1-8B-Instruct"} 123859.0
# TYPE sglang:gen_throughput gauge
sglang:gen_throughput{model_name="meta-llama/Llama-3.1-8B-Instruct"} 86.5
# TYPE sglang:func_latency_seconds histogram
sglang:func_latency_seconds_count{name="generate_request"} 14007.0
"""


def test_vllm_metrics_become_the_launchers_gauges() -> None:
    figures = read_samples(VLLM_METRICS, ["Qwen/Qwen3-8B"])
    assert figures == {
        "Qwen/Qwen3-8B": {
            "running": 5.0,  # two data-parallel engines add up
            "waiting": 1.0,
            "kv_ratio": 0.5,  # their fills do not: the fuller one
            "generation_total": 1000.0,
            "prompt_total": 5000.0,
        }
    }
    assert _rate(10.0, (8.0, 5000.0, 800.0), 1000.0, 2) == 100.0  # tokens/s from two scrapes, 2 s apart
    assert _rate(10.0, None, 1000.0, 2) == 0.0  # one scrape is no rate
    assert _rate(100.0, (8.0, 5000.0, 800.0), 1000.0, 2) == 0.0  # nor are scrapes minutes apart


def test_sglang_metrics_become_the_launchers_gauges() -> None:
    figures = read_samples(SGLANG_METRICS, ["meta-llama/Llama-3.1-8B-Instruct", "other"])
    assert figures == {
        "meta-llama/Llama-3.1-8B-Instruct": {
            "running": 162.0,
            "waiting": 2826.0,
            "kv_ratio": 0.28,
            "kv_used": 123859.0,
            "decode_tps": 86.5,
        }
    }


def test_a_series_without_a_model_belongs_to_the_only_model() -> None:
    assert read_samples("vllm:num_requests_running 2\n", ["m"]) == {"m": {"running": 2.0}}
    assert read_samples("vllm:num_requests_running 2\n", ["m", "n"]) == {}


def test_the_upstream_request_is_chat_completions_with_string_arguments() -> None:
    history = [
        ChatMessage(role="user", content="weather?"),
        ChatMessage(role="assistant", content="", tool_calls=(ToolCall(id="c1", name="w", arguments={"city": "P"}),)),
        ChatMessage(role="tool", content="sunny", tool_call_id="c1"),
    ]
    tool = {"type": "function", "function": {"name": "w", "parameters": {"type": "object"}}}
    settings = GenerationSettings(
        max_tokens=500,
        sampling=SamplingParams(temperature=0.2, top_k=20),
        constraint=Constraint(kind="json_object"),
        stops=["END"],
    )
    options = ChatOptions(messages=history, tools=[tool], tool_choice="w", settings=settings)
    body, capped = request_body("qwen", options, output_cap=100)
    assert capped and body["max_tokens"] == 100  # this server's --max-output-tokens
    assert body["messages"][1]["tool_calls"][0]["function"]["arguments"] == '{"city": "P"}'
    assert body["tool_choice"] == {"type": "function", "function": {"name": "w"}}
    assert body["response_format"] == {"type": "json_object"} and body["stop"] == ["END"]
    assert body["temperature"] == 0.2 and body["top_k"] == 20 and "min_p" not in body  # unset knobs stay unsent
    assert body["stream"] and body["stream_options"] == {"include_usage": True}


def test_tool_call_fragments_make_whole_calls_in_order() -> None:
    calls = ToolCalls()
    fragments = [
        {"index": 0, "id": "a", "type": "function", "function": {"name": "read", "arguments": ""}},
        {"index": 0, "function": {"arguments": '{"path": '}},
        {"index": 0, "function": {"arguments": '"x"}'}},
        {"index": 1, "id": "b", "function": {"name": "ls", "arguments": "{}"}},
    ]
    done: list[ToolCallDelta] = []
    for fragment in fragments:
        done += calls.add(fragment)
    assert [(d.index, d.call.name, d.call.arguments, d.call.id) for d in done] == [(0, "read", '{"path": "x"}', "a")]
    done += calls.finish()
    assert [(d.index, d.call.name, json.loads(d.call.arguments), d.call.id) for d in done][1] == (1, "ls", {}, "b")


def test_upstream_errors_keep_their_meaning() -> None:
    upstream = Upstream("gpu", "http://gpu/v1")
    vllm_400 = json.dumps({"object": "error", "message": "max_tokens is too large", "code": 400}).encode()
    refused = upstream_error(upstream, 400, vllm_400, httpx.Headers())
    assert (refused.status, refused.message) == (400, "max_tokens is too large")
    key = upstream_error(upstream, 401, b'{"error": {"message": "bad key"}}', httpx.Headers())
    assert key.status == 502 and "refused this server's key" in key.message  # not the client's key problem
    busy = upstream_error(upstream, 429, b"slow down", httpx.Headers({"retry-after": "7"}))
    assert busy.status == 429 and busy.headers == {"Retry-After": "7"}
    broken = upstream_error(upstream, 500, b"<html>oops</html>", httpx.Headers())
    assert broken.status == 502 and "HTTP 500" in broken.message


def test_a_child_engines_own_series_feed_the_gauges() -> None:
    # A plug-in engine that runs as a child names its /metrics series in its spec: its gauges show in the app.
    from launcher import engine_specs
    from launcher.engine_specs.child import ChildArguments, ChildLaunch
    from launcher.server.upstreams import remote_metrics

    spec = engine_specs.EngineSpec(
        name="plugmetrics",
        label="Plug",
        formats=("safetensors",),
        factory="launcher.engines.child.engine:ChildEngine",
        runtime_module="plugmetrics",
        distribution="plugmetrics",
        pip_extra="plugmetrics",
        runs_as="child",
        child=ChildLaunch(
            program=lambda: None,
            arguments=lambda request: ChildArguments([request.model], request.model),
            looked_for="plug",
            install="plug",
            metric_series={"plug:busy": "running", "plug:cache_fill": "kv_ratio"},
        ),
    )
    engine_specs.register(spec)
    remote_metrics._series.cache_clear()
    try:
        text = (
            'plug:busy{model_name="m"} 3\nplug:cache_fill{model_name="m"} 0.25\nplug:cache_fill{model_name="m"} 0.5\n'
        )
        assert remote_metrics.read_samples(text, ["m"]) == {"m": {"running": 3.0, "kv_ratio": 0.5}}
    finally:
        engine_specs.unregister("plugmetrics")
        remote_metrics._series.cache_clear()
