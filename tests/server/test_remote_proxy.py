"""Remote endpoints: a local `launcher serve` that serves other servers' models as NAME/model.

The remotes are real servers: `lab` is a real `launcher serve` on the tiny GGUF (llama.cpp), behind
its own key; `script` is the launcher's app around a scripted model (in this process, so a test can
see what it received and whether its generation was closed); `doomed` is the same app in a process
of its own, killed mid-reply. They are registered with `launcher remote add`, their keys in a test
keyring (a file: CI has no Secret Service), and a real local `launcher serve` with its own key
serves them to the official OpenAI and Anthropic SDKs.
"""

from __future__ import annotations

import io
import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import anthropic
import httpx
import openai
import pytest

from launcher.cli import main as launcher_main
from tests.conformance.servers import REPO_ROOT, RunningServer, launch_serve, start_port_printer
from tests.fixtures.models import write_tiny_gguf
from tests.metrics_text import metric_total
from tests.server import keyring_backend
from tests.server.fake_model import FakeModel
from tests.server.harness import running_app
from tests.server.scripted_remote import (
    GREETING,
    LONG_REQUEST,
    MODEL_ID,
    WEATHER,
    SeenRequest,
    scripted_remote,
)

LOCAL_KEY = "local-key-the-remotes-must-never-see"
LAB_KEY = "lab-key"
SCRIPT_KEY = "script-key"
SCRIPTED = f"script/{MODEL_ID}"
WEATHER_TOOL = {
    "type": "function",
    "function": {
        "name": "get_weather",
        "description": "The weather in a city.",
        "parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]},
    },
}


@dataclass
class Remotes:
    """The running remotes and the local server that serves them."""

    local: RunningServer
    lab: RunningServer
    script_model: FakeModel
    script_seen: list[SeenRequest]
    doomed: subprocess.Popen[str]
    openai: openai.OpenAI  # both with the local server's key
    anthropic: anthropic.Anthropic


def _remote_add(name: str, url: str, key: str | None = None) -> None:
    """`launcher remote add NAME URL [--api-key-stdin]`, the key typed on stdin."""
    argv = ["remote", "add", name, url, "--no-check"]
    stdin = sys.stdin
    if key is not None:
        argv.append("--api-key-stdin")
        sys.stdin = io.StringIO(key + "\n")
    try:
        assert launcher_main(argv) == 0
    finally:
        sys.stdin = stdin


@pytest.fixture(scope="module")
def remotes(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Remotes]:
    folder = tmp_path_factory.mktemp("remotes")
    home = folder / "home"
    tiny = write_tiny_gguf(folder / "tiny.gguf")
    lab = launch_serve(
        [
            str(tiny),
            "--port",
            "0",
            "--engine",
            "llamacpp",
            "--context",
            "2048",
            "--alias",
            "tiny",
            "--api-key",
            LAB_KEY,
            "--no-library",  # a server of one model: its remote listing is that model
        ],
        folder / "lab-home",
        "lab",
    )
    # the scripted remote, slow, in a process of its own: long enough a reply to kill it during
    doomed, doomed_url = start_port_printer("tests.server.scripted_remote", "--delay", "0.01")
    app, script_model, seen = scripted_remote(api_key=SCRIPT_KEY, delay=0.002)
    local: RunningServer | None = None
    with pytest.MonkeyPatch.context() as patch, running_app(app) as script_url:
        patch.setenv("LAUNCHER_HOME", str(home))
        patch.setenv("PYTHON_KEYRING_BACKEND", keyring_backend.BACKEND)
        patch.setenv(keyring_backend.FILE_ENV, str(folder / "keyring.json"))
        import keyring

        patch.setattr(keyring.core, "_keyring_backend", keyring_backend.FileKeyring())
        try:
            _remote_add("lab", lab.url, LAB_KEY)  # a bare host: /v1 is added
            _remote_add("script", script_url + "/v1", SCRIPT_KEY)
            _remote_add("doomed", doomed_url)
            _remote_add("badkey", lab.url, "not-the-lab-key")
            presets = folder / "serve.toml"
            presets.write_text(
                '[models.helper]\nmodel = "script/scripted-model"\naliases = ["claude-haiku-*"]\n\n'
                '[models.wrongkey]\nmodel = "badkey/tiny"\n'
            )
            local = launch_serve(
                ["--port", "0", "--config", str(presets), "--api-key", LOCAL_KEY, "--alias", f"claude-*={SCRIPTED}"],
                home,
                "local",
            )
            _wait_for_listing(local, "lab/tiny")  # the remotes' lists come in the background
            with (
                openai.OpenAI(base_url=local.base_url, api_key=LOCAL_KEY, max_retries=0) as openai_client,
                anthropic.Anthropic(base_url=local.url, api_key=LOCAL_KEY, max_retries=0) as anthropic_client,
            ):
                yield Remotes(local, lab, script_model, seen, doomed, openai_client, anthropic_client)
        finally:
            if local is not None:
                local.stop()
            lab.stop()
            if doomed.poll() is None:
                doomed.kill()
            doomed.wait(timeout=10)
            if doomed.stdout is not None:
                doomed.stdout.close()


def _wait_for_listing(local: RunningServer, name: str) -> None:
    """Until `name` is listed and ready: a server does not wait for its remotes to start serving."""
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        reply = httpx.get(local.base_url + "/models", headers={"Authorization": f"Bearer {LOCAL_KEY}"}, timeout=30)
        if any(card["id"] == name and card["loaded"] for card in reply.json()["data"]):
            return
        time.sleep(0.2)
    raise AssertionError(f"{name} was not listed within 60 s")


def _remote_gauges(remotes: Remotes) -> str:
    """/metrics once it holds the lab's own gauges (read in the background: the first scrape may not)."""
    deadline = time.monotonic() + 30
    while True:
        metrics = _get(remotes, "/metrics").text
        if 'launcher_kv_cache_total_tokens{model="lab/tiny"}' in metrics or time.monotonic() > deadline:
            return metrics
        time.sleep(0.3)


def _get(remotes: Remotes, path: str) -> httpx.Response:
    return httpx.get(remotes.local.url + path, headers={"Authorization": f"Bearer {LOCAL_KEY}"}, timeout=30)


def _post(remotes: Remotes, path: str, body: dict[str, object]) -> httpx.Response:
    return httpx.post(
        remotes.local.base_url + path, json=body, headers={"Authorization": f"Bearer {LOCAL_KEY}"}, timeout=60
    )


def test_the_remotes_models_are_listed_by_their_remote_names(remotes: Remotes) -> None:
    cards = {card["id"]: card for card in _get(remotes, "/v1/models").json()["data"]}
    assert {"lab/tiny", SCRIPTED, f"doomed/{MODEL_ID}", "helper", "wrongkey", "claude-*"} <= set(cards)
    lab = cards["lab/tiny"]
    assert lab["owned_by"] == "lab" and lab["remote"] == "lab" and lab["loaded"]
    assert lab["context_length"] == 2048  # what the remote's own /v1/models says
    assert cards["claude-*"]["alias_for"] == SCRIPTED
    listing = _get(remotes, "/launcher/models").json()
    assert listing["models"] == []  # nothing is loaded here
    assert listing["remote_models"]["lab/tiny"] == {"remote": "lab", "url": remotes.lab.base_url, "model": "tiny"}
    env = {**os.environ, "PYTHONPATH": str(REPO_ROOT)}
    ps = [sys.executable, "-m", "launcher", "ps", "--url", remotes.local.url, "--api-key", LOCAL_KEY]
    shown = subprocess.run(ps, capture_output=True, text=True, env=env, timeout=60, check=True).stdout
    assert f"Remote: lab/tiny -> tiny at {remotes.lab.base_url}" in shown
    assert "lab/tiny" not in shown.split("Remote:")[0]  # not among the models that load here


def test_openai_sdk_streams_and_not_through_a_remote_launcher(remotes: Remotes) -> None:
    client = remotes.openai
    reply = client.chat.completions.create(
        model="lab/tiny",
        messages=[{"role": "user", "content": "hello"}],
        max_tokens=6,
    )
    assert reply.model == "lab/tiny"
    assert reply.usage is not None and reply.usage.prompt_tokens > 0 and reply.usage.completion_tokens > 0
    assert reply.choices[0].finish_reason in ("stop", "length")

    chunks = list(
        client.chat.completions.create(
            model="lab/tiny",
            messages=[{"role": "user", "content": "hello"}],
            max_tokens=6,
            stream=True,
            stream_options={"include_usage": True},
        )
    )
    finishes = [c.choices[0].finish_reason for c in chunks if c.choices and c.choices[0].finish_reason]
    assert finishes and finishes[-1] in ("stop", "length")
    assert chunks[-1].usage is not None and chunks[-1].usage.completion_tokens > 0
    metrics = _remote_gauges(remotes)
    assert metric_total(metrics, "launcher_generation_tokens_total", model="lab/tiny") > 0
    # the lab's own gauges, read from its /metrics (another launcher: its launcher_* series)
    assert metric_total(metrics, "launcher_requests_running", model="lab/tiny") == 0
    assert metric_total(metrics, "launcher_kv_cache_total_tokens", model="lab/tiny") > 0


def test_tool_calls_go_up_and_come_back_with_the_remotes_key_only(remotes: Remotes) -> None:
    before = len(remotes.script_seen)
    client = remotes.openai
    ask = [{"role": "user", "content": "What is the weather in Paris?"}]
    reply = client.chat.completions.create(model=SCRIPTED, messages=ask, tools=[WEATHER_TOOL])  # type: ignore[list-item]
    choice = reply.choices[0]
    assert choice.finish_reason == "tool_calls"
    call = choice.message.tool_calls[0]  # type: ignore[index]
    assert call.function.name == "get_weather" and json.loads(call.function.arguments) == {"city": "Paris"}

    history = [
        *ask,
        {"role": "assistant", "content": None, "tool_calls": [call.model_dump()]},
        {"role": "tool", "tool_call_id": call.id, "content": "sunny, 24 C"},
    ]
    stream = client.chat.completions.create(model=SCRIPTED, messages=history, tools=[WEATHER_TOOL], stream=True)  # type: ignore[arg-type,list-item]
    text = "".join(chunk.choices[0].delta.content or "" for chunk in stream if chunk.choices)
    assert text == WEATHER

    seen = remotes.script_seen[before:]
    assert [request.path for request in seen] == ["/v1/chat/completions"] * 2
    for request in seen:
        assert request.headers["authorization"] == f"Bearer {SCRIPT_KEY}"  # the key stored for it
        assert not any(LOCAL_KEY in value for value in request.headers.values())  # never the client's


def test_anthropic_messages_over_a_chat_completions_remote(remotes: Remotes) -> None:
    before = len(remotes.script_seen)
    client = remotes.anthropic
    with client.messages.stream(
        model="claude-sonnet-4-6",  # the alias claude-* -> script/scripted-model
        max_tokens=200,
        messages=[{"role": "user", "content": "What is the weather in Paris?"}],
        tools=[
            {
                "name": "get_weather",
                "description": "The weather in a city.",
                "input_schema": {"type": "object", "properties": {"city": {"type": "string"}}},
            }
        ],
    ) as stream:
        message = stream.get_final_message()
    assert message.stop_reason == "tool_use"
    use = next(block for block in message.content if block.type == "tool_use")
    assert use.name == "get_weather" and use.input == {"city": "Paris"}

    with client.messages.stream(
        model="claude-haiku-5",  # the preset helper's alias: the same remote model under a preset
        max_tokens=50,
        messages=[{"role": "user", "content": "hi"}],
    ) as stream:
        text = "".join(stream.text_stream)
        final = stream.get_final_message()
    assert text == GREETING and final.stop_reason == "end_turn" and final.usage.output_tokens > 0
    assert {request.path for request in remotes.script_seen[before:]} == {"/v1/chat/completions"}


def test_responses_api_over_a_chat_completions_remote(remotes: Remotes) -> None:
    client = remotes.openai
    response = client.responses.create(model=SCRIPTED, input="hi")
    assert response.output_text == GREETING
    events = list(client.responses.create(model=SCRIPTED, input="hi", stream=True))
    assert events[-1].type == "response.completed"
    assert "".join(e.delta for e in events if e.type == "response.output_text.delta") == GREETING


def test_the_remotes_errors_reach_the_client_in_its_own_shape(remotes: Remotes) -> None:
    too_long = [{"role": "user", "content": "hello there " * 3000}]
    with pytest.raises(openai.BadRequestError) as refused:
        remotes.openai.chat.completions.create(model="lab/tiny", messages=too_long, max_tokens=4)  # type: ignore[arg-type]
    assert "context" in str(refused.value)  # the remote's own words: its context is 2048 tokens

    with pytest.raises(anthropic.BadRequestError) as refused_too:
        remotes.anthropic.messages.create(model="lab/tiny", max_tokens=4, messages=too_long)  # type: ignore[arg-type]
    assert refused_too.value.body["error"]["type"] == "invalid_request_error"  # type: ignore[index,call-overload]

    wrong_key = _post(
        remotes, "/chat/completions", {"model": "wrongkey", "messages": [{"role": "user", "content": "x"}]}
    )
    assert wrong_key.status_code == 502 and "refused this server's key" in wrong_key.json()["error"]["message"]

    unknown = _post(remotes, "/chat/completions", {"model": "lab/nope", "messages": [{"role": "user", "content": "x"}]})
    assert unknown.status_code == 404 and "lab/tiny" in unknown.json()["error"]["message"]

    embedding = _post(remotes, "/embeddings", {"model": "lab/tiny", "input": "x"})
    assert embedding.status_code == 400 and embedding.json()["error"]["code"] == "remote_model"


def test_a_client_that_goes_away_closes_the_upstream_request(remotes: Remotes) -> None:
    closed_before = remotes.script_model.closed_early
    body = {"model": SCRIPTED, "stream": True, "messages": [{"role": "user", "content": LONG_REQUEST}]}
    headers = {"Authorization": f"Bearer {LOCAL_KEY}"}
    with httpx.stream("POST", remotes.local.base_url + "/chat/completions", json=body, headers=headers) as response:
        assert response.status_code == 200
        pieces = 0
        for line in response.iter_lines():
            pieces += '"content":"' in line and '"content":""' not in line
            if pieces == 3:
                break  # and hang up mid-story
    deadline = time.monotonic() + 10
    while remotes.script_model.closed_early == closed_before and time.monotonic() < deadline:
        time.sleep(0.05)
    assert remotes.script_model.closed_early == closed_before + 1  # the remote stopped generating


def test_a_remote_that_dies_mid_reply_ends_the_stream_with_an_error(remotes: Remotes) -> None:
    body = {"model": f"doomed/{MODEL_ID}", "stream": True, "messages": [{"role": "user", "content": LONG_REQUEST}]}
    headers = {"Authorization": f"Bearer {LOCAL_KEY}"}
    events: list[str] = []
    with httpx.stream(
        "POST", remotes.local.base_url + "/chat/completions", json=body, headers=headers, timeout=30
    ) as response:
        assert response.status_code == 200
        for line in response.iter_lines():
            if line.startswith("data: "):
                events.append(line[6:])
            if len(events) == 5:
                remotes.doomed.send_signal(signal.SIGKILL)
    assert events[-1] == "[DONE]"
    errors = [json.loads(event)["error"]["message"] for event in events[:-1] if '"error"' in event]
    assert len(errors) == 1 and "doomed" in errors[0] and "mid-reply" in errors[0]
    assert '"error"' in events[-2]  # the error event ends the reply: it is not marked complete
    finishes = [c["finish_reason"] for e in events[:-1] for c in json.loads(e).get("choices", []) if c["finish_reason"]]
    assert finishes == []

    gone = _post(
        remotes, "/chat/completions", {"model": f"doomed/{MODEL_ID}", "messages": [{"role": "user", "content": "x"}]}
    )
    assert gone.status_code == 502 and "cannot be reached" in gone.json()["error"]["message"]


def test_remote_list_says_which_answer(remotes: Remotes, capsys: pytest.CaptureFixture[str]) -> None:
    home = Path(remotes.local.stderr_path).parent
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("LAUNCHER_HOME", str(home))
        patch.setenv(keyring_backend.FILE_ENV, str(home.parent / "keyring.json"))
        import keyring

        patch.setattr(keyring.core, "_keyring_backend", keyring_backend.FileKeyring())
        capsys.readouterr()
        assert launcher_main(["remote", "list", "--json"]) == 0
    rows = {row["name"]: row for row in json.loads(capsys.readouterr().out)}
    assert rows["lab"]["reachable"] and rows["lab"]["models"] == ["lab/tiny"] and rows["lab"]["key"]
    assert not rows["badkey"]["reachable"] and "refused the key" in rows["badkey"]["error"]
    assert rows["script"]["models"] == [SCRIPTED]


def test_a_server_started_with_a_remote_model_answers_every_name_with_it(remotes: Remotes) -> None:
    home = Path(remotes.local.stderr_path).parent
    server = launch_serve([SCRIPTED, "--port", "0"], home, "default-remote")  # no key: loopback
    try:
        assert server.ready["model"] == SCRIPTED and server.ready["engine"] == "remote"
        with openai.OpenAI(base_url=server.base_url, api_key="x", max_retries=0) as client:
            reply = client.chat.completions.create(model="gpt-5", messages=[{"role": "user", "content": "hi"}])
        assert reply.model == SCRIPTED and reply.choices[0].message.content == GREETING
    finally:
        server.stop()
