"""Speculative decoding as the server's clients see it: the per-request `speculative` field on every API,
its 400 in each API's shape, the /metrics counters and the request log's draft figures.

The scripted model stands in for an engine that drafted (the engine side is tested in
tests/engines/llamacpp/test_speculation.py); the last test runs the real llama.cpp engine on the tiny GGUF.
"""

from __future__ import annotations

import logging
import time
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path

import anthropic
import httpx
import openai
import pytest

from launcher.core.config import ServeConfig
from launcher.core.model_types import LocalModel
from launcher.engines.base import EngineStats, GenerationEvent, GenerationRequest
from launcher.engines.llamacpp.engine import LlamaCppEngine
from launcher.server.app import create_app
from launcher.server.core.chat import ChatOptions
from launcher.server.core.generation import GenerationSettings
from launcher.server.core.messages import ChatMessage
from launcher.server.openai_api.routes_openai import chat_options
from launcher.server.openai_api.schemas_openai import ChatCompletionRequest
from launcher.server.upstreams.remote_request import request_body
from tests.metrics_text import metric_total
from tests.server.conftest import ServeFn
from tests.server.fake_model import FakeModel
from tests.server.harness import running_app

REPLY = "x" * 200
DRAFTED, ACCEPTED = 167, 145
SPEC_STATS = EngineStats(
    kv_cache_total_tokens=1024, speculative_draft_tokens_total=4_000, speculative_accepted_tokens_total=3_100
)

# (path, body without the field) for each API a client may send `speculative` on
ENDPOINTS = {
    "chat": ("/v1/chat/completions", {"model": "x", "messages": [{"role": "user", "content": "hi"}]}),
    "completions": ("/v1/completions", {"model": "x", "prompt": "hi", "max_tokens": 8}),
    "responses": ("/v1/responses", {"model": "x", "input": "hi"}),
    "messages": ("/v1/messages", {"model": "x", "max_tokens": 8, "messages": [{"role": "user", "content": "hi"}]}),
}


@dataclass
class DraftingModel(FakeModel):
    """Reports that the reply took `drafted` draft tokens, `accepted` of them accepted (0: no speculation)."""

    drafted: int = DRAFTED
    accepted: int = ACCEPTED

    async def _run(self, request: GenerationRequest) -> AsyncIterator[GenerationEvent]:
        text = self.reply("")
        for char in text:
            yield GenerationEvent(token_ids=(ord(char),), text=char)
        yield GenerationEvent(
            finish_reason="stop",
            prompt_tokens=len(request.prompt_tokens),
            completion_tokens=len(text),
            draft_tokens=self.drafted,
            accepted_draft_tokens=self.accepted if self.drafted else 0,
        )

    def stats(self) -> EngineStats:
        """A model that has drafted since it was loaded."""
        return SPEC_STATS


@pytest.mark.parametrize("api", list(ENDPOINTS))
@pytest.mark.parametrize("stream", [False, True])
def test_each_api_passes_the_requests_speculative_mode_to_the_engine(
    serve: ServeFn, fake_model: FakeModel, api: str, stream: bool
) -> None:
    path, body = ENDPOINTS[api]
    with serve(fake_model) as url:
        for mode in ("off", "ngram", "auto"):
            response = httpx.post(url + path, json={**body, "stream": stream, "speculative": mode}, timeout=30)
            assert response.status_code == 200, response.text
            assert fake_model.requests[-1].speculative == mode
        assert httpx.post(url + path, json={**body, "stream": stream}, timeout=30).status_code == 200
    assert fake_model.requests[-1].speculative is None  # the server's --speculative decides


def test_the_sdks_send_it_as_an_extra_body_field(serve: ServeFn, fake_model: FakeModel) -> None:
    with (
        serve(fake_model) as url,
        openai.OpenAI(base_url=f"{url}/v1", api_key="x", max_retries=0) as api,
        anthropic.Anthropic(base_url=url, api_key="x", max_retries=0) as claude,
    ):
        api.chat.completions.create(
            model="x", messages=[{"role": "user", "content": "hi"}], extra_body={"speculative": "off"}
        )
        assert fake_model.requests[-1].speculative == "off"
        claude.messages.create(
            model="x", max_tokens=8, messages=[{"role": "user", "content": "hi"}], extra_body={"speculative": "ngram"}
        )
        assert fake_model.requests[-1].speculative == "ngram"


@pytest.mark.parametrize("api", ["chat", "completions", "responses"])
@pytest.mark.parametrize("value", ["sometimes", "OFF", True, 1])
def test_a_wrong_value_is_a_400_in_openai_shape(serve: ServeFn, fake_model: FakeModel, api: str, value: object) -> None:
    path, body = ENDPOINTS[api]
    with serve(fake_model) as url:
        for stream in (False, True):
            response = httpx.post(url + path, json={**body, "stream": stream, "speculative": value}, timeout=30)
            assert response.status_code == 400, response.text
            error = response.json()["error"]
            assert error["type"] == "invalid_request_error" and error["param"] == "speculative"
            assert "speculative" in error["message"] and "'ngram'" in error["message"], error
    assert fake_model.requests == []


@pytest.mark.parametrize("value", ["sometimes", None, 2])
def test_a_wrong_value_is_a_400_in_anthropic_shape(serve: ServeFn, fake_model: FakeModel, value: object) -> None:
    path, body = ENDPOINTS["messages"]
    with serve(fake_model) as url:
        response = httpx.post(url + path, json={**body, "speculative": value}, timeout=30)
    if value is None:  # null is "not set", as for the other optional fields
        assert response.status_code == 200, response.text
        assert fake_model.requests[-1].speculative is None
        return
    assert response.status_code == 400, response.text
    reply = response.json()
    assert reply["type"] == "error" and reply["error"]["type"] == "invalid_request_error"
    assert "speculative" in reply["error"]["message"] and "'ngram'" in reply["error"]["message"]
    assert fake_model.requests == []


def test_the_sdks_raise_their_bad_request_error_for_a_wrong_value(serve: ServeFn, fake_model: FakeModel) -> None:
    with (
        serve(fake_model) as url,
        openai.OpenAI(base_url=f"{url}/v1", api_key="x", max_retries=0) as api,
        anthropic.Anthropic(base_url=url, api_key="x", max_retries=0) as claude,
    ):
        with pytest.raises(openai.BadRequestError, match="speculative"):
            api.chat.completions.create(
                model="x", messages=[{"role": "user", "content": "hi"}], extra_body={"speculative": "fast"}
            )
        with pytest.raises(anthropic.BadRequestError, match="speculative"):
            claude.messages.create(
                model="x", max_tokens=8, messages=[{"role": "user", "content": "hi"}], extra_body={"speculative": 3}
            )
    assert fake_model.requests == []


def test_a_remote_model_is_not_sent_the_field() -> None:
    # vLLM, SGLang and hosted APIs would refuse or ignore a field they do not know
    parsed = ChatCompletionRequest.model_validate(
        {"model": "x", "messages": [{"role": "user", "content": "hi"}], "speculative": "off"}
    )
    options = chat_options(parsed)
    assert options.settings.speculative == "off"
    body, _ = request_body("qwen", options, output_cap=None)
    assert "speculative" not in body
    bare = ChatOptions(
        messages=[ChatMessage(role="user", content="hi")], settings=GenerationSettings(speculative="ngram")
    )
    assert "speculative" not in request_body("qwen", bare, output_cap=None)[0]


def test_metrics_export_the_speculation_counters_per_model(serve: ServeFn) -> None:
    with serve(DraftingModel()) as url:
        text = httpx.get(f"{url}/metrics").text
    assert metric_total(text, "launcher_speculative_draft_tokens_total", model="fake-model") == 4_000
    assert metric_total(text, "launcher_speculative_accepted_tokens_total", model="fake-model") == 3_100
    assert "# TYPE launcher_speculative_draft_tokens_total counter" in text


def test_metrics_say_zero_for_a_model_that_never_drafted(serve: ServeFn, fake_model: FakeModel) -> None:
    with serve(fake_model) as url:
        text = httpx.get(f"{url}/metrics").text
    assert metric_total(text, "launcher_speculative_draft_tokens_total", model="fake-model") == 0
    assert metric_total(text, "launcher_speculative_accepted_tokens_total", model="fake-model") == 0


def _log_lines(caplog: pytest.LogCaptureFixture, count: int) -> list[str]:
    deadline = time.monotonic() + 10
    while True:
        lines = [r.getMessage() for r in caplog.records if r.name == "launcher.requests"]
        if len(lines) >= count or time.monotonic() > deadline:
            return lines
        time.sleep(0.02)


@pytest.mark.parametrize("stream", [False, True])
def test_the_request_log_says_how_many_drafts_were_accepted(
    serve: ServeFn, caplog: pytest.LogCaptureFixture, stream: bool
) -> None:
    caplog.set_level(logging.INFO, logger="launcher.requests")
    path, body = ENDPOINTS["messages"]
    with serve(DraftingModel(reply=lambda prompt: REPLY)) as url:
        response = httpx.post(url + path, json={**body, "max_tokens": 500, "stream": stream}, timeout=30)
        assert response.status_code == 200
    (line,) = _log_lines(caplog, 1)
    assert f" generated=200 (draft {ACCEPTED}/{DRAFTED}) ttft=" in line, line


def test_the_request_log_keeps_its_format_when_nothing_was_drafted(
    serve: ServeFn, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger="launcher.requests")
    path, body = ENDPOINTS["chat"]
    with serve(DraftingModel(reply=lambda prompt: REPLY, drafted=0)) as url:
        assert httpx.post(url + path, json={**body, "speculative": "off"}, timeout=30).status_code == 200
    (line,) = _log_lines(caplog, 1)
    assert "draft" not in line and " generated=200 ttft=" in line, line


REPETITIVE = "alpha beta gamma delta epsilon zeta eta theta " * 6


def test_the_real_engine_drafts_as_the_request_says(tiny_gguf: Path, caplog: pytest.LogCaptureFixture) -> None:
    """A server started with --speculative ngram: a request that says off drafts nothing, one that says
    nothing drafts; the log line and /metrics show what the engine did."""
    caplog.set_level(logging.INFO, logger="launcher.requests")
    config = ServeConfig(port=0, context=1024, parallel=1, threads=2, speculative="ngram", prompt_cache_gb=0)
    model = LlamaCppEngine().load(LocalModel(path=tiny_gguf, format="gguf", name="tiny"), config)
    body = {"model": "tiny", "prompt": REPETITIVE, "max_tokens": 40, "temperature": 0, "ignore_eos": True}
    try:
        with running_app(create_app(model, config, name="tiny")) as url:
            off = httpx.post(f"{url}/v1/completions", json={**body, "speculative": "off"}, timeout=120)
            assert off.status_code == 200, off.text
            (off_line,) = _log_lines(caplog, 1)
            metrics = httpx.get(f"{url}/metrics").text
            assert metric_total(metrics, "launcher_speculative_draft_tokens_total", model="tiny") == 0
            on = httpx.post(f"{url}/v1/completions", json=body, timeout=120)
            assert on.status_code == 200, on.text
            on_line = _log_lines(caplog, 2)[1]
            metrics = httpx.get(f"{url}/metrics").text
    finally:
        model.close()
    assert on.json()["choices"][0]["text"] == off.json()["choices"][0]["text"]  # greedy: the same tokens
    assert "draft" not in off_line and " generated=40 ttft=" in off_line, off_line
    figures = on_line.split(" generated=40 (draft ")[1].split(")")[0]
    accepted, drafted = (int(part.replace(",", "")) for part in figures.split("/"))
    assert drafted > 0 and 0 <= accepted <= drafted, on_line
    assert metric_total(metrics, "launcher_speculative_draft_tokens_total", model="tiny") == drafted
    assert metric_total(metrics, "launcher_speculative_accepted_tokens_total", model="tiny") == accepted
