"""A request through the real server (launcher.server's app under uvicorn, the openai SDK) to an ExLlama engine.

THESE ENGINES ARE VERIFIED ONLY ON AN NVIDIA GPU (scripts/gpu-check). Here the engine runs on
the CPU stand-in runtime; the HTTP server, chat template, tool-call parsing and constraints are real.
"""

from __future__ import annotations

import json
from typing import Any

import httpx
import openai
import pytest

from launcher.core.config import ServeConfig
from launcher.server.app import create_app
from tests.engines.exllama.conftest import LoadFn
from tests.engines.exllama.standin import Behaviour, Runtime
from tests.server.harness import running_app

TOOLS: Any = [
    {
        "type": "function",
        "function": {
            "name": "get_weather",
            "description": "Weather for a city",
            "parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]},
        },
    }
]


@pytest.mark.parametrize("kind", ["exl3", "exl2"])
def test_chat_tool_call_and_metrics_through_the_server(load: LoadFn, kind: str) -> None:
    runtime = Runtime(Behaviour(stop_after=5))
    model = load(kind, runtime=runtime, parallel=2)
    app = create_app(model, ServeConfig(port=0, parallel=2), engine_name=model.info.engine)
    with running_app(app) as url:
        api = openai.OpenAI(base_url=f"{url}/v1", api_key="none", max_retries=0)
        reply = api.chat.completions.create(model="x", messages=[{"role": "user", "content": "Hello there!"}])
        assert reply.choices[0].finish_reason == "stop"
        assert reply.usage is not None and reply.usage.completion_tokens == 5
        assert reply.choices[0].message.content
        prompt = runtime.log.jobs[-1].prompt
        assert model.detokenize(prompt).startswith("<|im_start|>user\nHello there!<|im_end|>")  # the model's template

        streamed = api.chat.completions.create(
            model="x", messages=[{"role": "user", "content": "Hello there!"}], stream=True, max_tokens=3
        )
        text = "".join(c.choices[0].delta.content or "" for c in streamed if c.choices)
        assert text and runtime.log.jobs[-1].max_new_tokens == 3

        call = api.chat.completions.create(
            model="x",
            messages=[{"role": "user", "content": "Weather in Paris?"}],
            tools=TOOLS,
            tool_choice="required",
        )
        calls = call.choices[0].message.tool_calls
        assert call.choices[0].finish_reason == "tool_calls"
        assert calls is not None and calls[0].function.name == "get_weather"
        assert set(json.loads(calls[0].function.arguments)) == {"city"}

        metrics = httpx.get(f"{url}/metrics").text
        assert "launcher_kv_cache_total_tokens" in metrics
        total = float(model.stats().kv_cache_total_tokens)
        assert f'launcher_kv_cache_total_tokens{{model="{model.info.id}"}} {total}' in metrics


def test_json_schema_response_format_is_enforced(load: LoadFn) -> None:
    model = load()
    schema = {"type": "object", "properties": {"answer": {"type": "integer"}}, "required": ["answer"]}
    with running_app(create_app(model, ServeConfig(port=0))) as url:
        api = openai.OpenAI(base_url=f"{url}/v1", api_key="none", max_retries=0)
        reply = api.chat.completions.create(
            model="x",
            messages=[{"role": "user", "content": "2+2?"}],
            response_format={"type": "json_schema", "json_schema": {"name": "a", "schema": schema}},
            max_tokens=100,
        )
        assert isinstance(json.loads(reply.choices[0].message.content or "")["answer"], int)


@pytest.mark.parametrize("kind", ["exl3", "exl2"])
@pytest.mark.parametrize("grammar", ["lazy", "off"])
def test_a_call_started_on_tool_choice_auto_is_well_formed_with_the_lazy_grammar(
    load: LoadFn, kind: str, grammar: str
) -> None:
    # The stand-in writes a few words and the call marker, then its own tokens: junk unless the lazy
    # call grammar holds them to a call (tests/engines/exllama/test_lazy_tool_calls.py).
    model = load(kind, runtime=Runtime(Behaviour(lead="Let me check. <tool_call>")))
    app = create_app(model, ServeConfig(port=0, tool_call_grammar=grammar))  # type: ignore[arg-type]
    with running_app(app) as url:
        api = openai.OpenAI(base_url=f"{url}/v1", api_key="none", max_retries=0)
        reply = api.chat.completions.create(
            model="x", messages=[{"role": "user", "content": "Weather in Paris?"}], tools=TOOLS, max_tokens=120
        )
    calls = reply.choices[0].message.tool_calls
    if grammar == "off":
        assert not calls and reply.choices[0].finish_reason == "length"
        return
    assert reply.choices[0].finish_reason == "tool_calls", reply.choices[0].message
    assert calls is not None and len(calls) == 1 and calls[0].function.name == "get_weather"
    assert isinstance(json.loads(calls[0].function.arguments)["city"], str)
    assert (reply.choices[0].message.content or "").strip() == "Let me check."
