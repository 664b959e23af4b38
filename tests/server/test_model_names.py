"""What agents ask for by name is answered: the names they know, aliases, routes without /v1, a reply cap."""

from __future__ import annotations

import anthropic
import httpx
import openai
import pytest

from tests.server.conftest import ServeFn
from tests.server.fake_model import FakeModel

HI = [{"role": "user", "content": "hi"}]


def test_the_names_agents_know_are_answered_by_the_served_model(serve: ServeFn, fake_model: FakeModel) -> None:
    with (
        serve(fake_model) as url,
        openai.OpenAI(base_url=f"{url}/v1", api_key="x", max_retries=0) as chat,
        anthropic.Anthropic(base_url=url, api_key="x", max_retries=0) as claude,
    ):
        for name in ("gpt-5.1-codex", "o4-mini", "fake-model", "anything"):
            reply = chat.chat.completions.create(model=name, messages=HI)  # type: ignore[arg-type]
            assert reply.choices[0].message.content == "Hello from the fake model." and reply.model == "fake-model"
        for name in ("claude-sonnet-5", "claude-haiku-4-5", "claude-opus-4-8[1m]"):
            message = claude.messages.create(model=name, max_tokens=100, messages=HI)  # type: ignore[arg-type]
            assert message.content[0].text == "Hello from the fake model."  # type: ignore[union-attr]


def test_aliases_route_names_and_are_listed(serve: ServeFn, fake_model: FakeModel) -> None:
    with serve(fake_model, alias=["coder", "claude-haiku-*=coder", "gpt-5=fake-model"]) as url:
        models = httpx.get(f"{url}/v1/models").json()["data"]
        assert [m["id"] for m in models] == ["coder", "claude-haiku-*", "gpt-5"]
        assert {m.get("alias_for") for m in models[1:]} == {"coder"}
        assert httpx.get(f"{url}/v1/models/gpt-5").json()["alias_for"] == "coder"
        body = {"model": "claude-haiku-4-5", "max_tokens": 50, "messages": HI}
        assert httpx.post(f"{url}/v1/messages", json=body).status_code == 200


def test_an_alias_to_a_model_not_served_fails_the_start() -> None:
    from launcher.core.config import ServeConfig
    from launcher.core.errors import ConfigError
    from launcher.server.app import create_app

    with pytest.raises(ConfigError, match="serves one model, 'fake-model'"):
        create_app(FakeModel(), ServeConfig(port=0, alias=["claude-opus-*=qwen3-32b"]))


@pytest.mark.parametrize("path", ["/chat/completions", "/completions", "/responses", "/messages", "/models"])
def test_routes_answer_without_the_v1_prefix(serve: ServeFn, fake_model: FakeModel, path: str) -> None:
    bodies = {
        "/chat/completions": {"messages": HI},
        "/completions": {"prompt": "hi"},
        "/responses": {"input": "hi"},
        "/messages": {"max_tokens": 50, "messages": HI},
    }
    with serve(fake_model) as url:
        if path == "/models":
            response = httpx.get(url + path)
        else:
            response = httpx.post(url + path, json={"model": "m", **bodies[path]})
        assert response.status_code == 200, response.text
        metrics = httpx.get(f"{url}/metrics").text
    assert f'launcher_requests_total{{endpoint="/v1{path}",status="200"}} 1.0' in metrics


def test_max_output_tokens_caps_every_reply_and_is_shown(serve: ServeFn, fake_model: FakeModel) -> None:
    with serve(fake_model, max_output_tokens=5) as url:
        assert httpx.get(f"{url}/v1/models").json()["data"][0]["max_output_tokens"] == 5
        body = {"model": "claude-sonnet-4-5", "max_tokens": 32000, "messages": HI}
        reply = httpx.post(f"{url}/v1/messages", json=body).json()
        assert reply["content"][0]["text"] == "Hello" and reply["stop_reason"] == "end_turn"  # not "continue"
        codex = httpx.post(f"{url}/v1/responses", json={"model": "gpt-5", "input": "hi"}).json()  # no cap asked
        assert codex["status"] == "completed" and codex["usage"]["output_tokens"] == 5
        small = httpx.post(f"{url}/v1/chat/completions", json={"model": "m", "messages": HI, "max_tokens": 2}).json()
        assert small["choices"][0]["message"]["content"] == "He" and small["choices"][0]["finish_reason"] == "length"


def test_unknown_paths_share_one_metric_label(serve: ServeFn, fake_model: FakeModel) -> None:
    with serve(fake_model) as url:
        for n in range(5):
            assert httpx.post(f"{url}/v1/x-{n}", json={}).status_code == 404
        metrics = httpx.get(f"{url}/metrics").text
    assert 'launcher_requests_total{endpoint="other",status="404"} 5.0' in metrics and "x-3" not in metrics


@pytest.mark.parametrize(
    ("user_agent", "name"),
    [
        ("claude-cli/2.1.332 (external, sdk-cli)", "claude-code/2.1.332"),
        ("codex_exec/0.171.0 (Debian 12.0.0; x86_64) xterm (codex_exec; 0.171.0)", "codex/0.171.0"),
        ("opencode/1.18.33 ai-sdk/provider-utils/3.0.0 runtime/bun/1.3.0", "opencode/1.18.33"),
        ("OpenAI/Python 2.20.0", "openai-sdk/2.20.0"),  # Aider, through litellm
        ("python-httpx/0.28.1", "python-httpx/0.28.1"),
        ("", ""),
    ],
)
def test_the_request_log_names_the_client(user_agent: str, name: str) -> None:
    from launcher.server.request_log import client_name

    assert client_name(user_agent) == name
