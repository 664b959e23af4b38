"""Serving the library: models loaded by name on request, several within memory, idle ones unloaded.

Real `launcher serve` processes with the real llama.cpp engine, on two tiny GGUFs (different
random weights) and the starter model; agents' names arrive through the official SDKs.
"""

from __future__ import annotations

import concurrent.futures
import os
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import anthropic
import httpx
import openai
import pytest

from launcher.catalog.library import add_imported
from launcher.core.config import ServeConfig
from launcher.server.pool.planning import plan
from tests.conformance.servers import REPO_ROOT, SERVERS, RunningServer, launch_serve, start_server
from tests.fixtures.models import write_tiny_gguf
from tests.metrics_text import metric_total

LLAMACPP = next(spec for spec in SERVERS if spec.engine == "llamacpp")
HELLO = [{"role": "user", "content": "hello"}]


@pytest.fixture(scope="module")
def two_models(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    folder = tmp_path_factory.mktemp("two-models")
    return write_tiny_gguf(folder / "tiny-a.gguf", seed=1), write_tiny_gguf(folder / "tiny-b.gguf", seed=2)


def presets(tmp_path: Path, a: Path, b: Path, serve: str = "") -> Path:
    """A --config file: `small` (tiny-a) for claude-haiku-*, `big` (tiny-b) for claude-sonnet-* and the rest."""
    path = tmp_path / "models.toml"
    path.write_text(
        f"[serve]\nparallel = 2\n{serve}\n"
        f'[models.small]\nmodel = "{a}"\naliases = ["claude-haiku-*"]\ncontext = 2048\n\n'
        f'[models.big]\nmodel = "{b}"\naliases = ["claude-sonnet-*"]\ndefault = true\n'
    )
    return path


def serve_many(home: Path, *flags: str) -> RunningServer:
    """`launcher serve` with presets and without a MODEL: everything loads on request (a MODEL given
    as well would be loaded at the start). Only the presets: the library (its starter) is served by
    default, and these tests look at what the presets do."""
    argv = ["--port", "0", "--engine", "llamacpp", *LLAMACPP.extra_args, "--no-library", *flags]
    return launch_serve(argv, home / "home", "serve-many")


@pytest.fixture
def running(tmp_path: Path) -> Iterator[list[RunningServer]]:
    """Servers a test starts, always stopped."""
    servers: list[RunningServer] = []
    yield servers
    for server in servers:
        server.stop()


def loaded(server: RunningServer) -> list[str]:
    listing = httpx.get(server.url + "/launcher/models").json()
    return [model["id"] for model in listing["models"]]


def chat(server: RunningServer, model: str, *, timeout: float = 120, **extra: object) -> httpx.Response:
    body = {"model": model, "messages": HELLO, "max_tokens": 4, **extra}
    return httpx.post(server.base_url + "/chat/completions", json=body, timeout=timeout)


def needed_bytes(path: Path, context: int | None = None) -> int:
    """What the advisor says a model takes at the settings the presets give it (parallel 2)."""
    return plan(ServeConfig(model=str(path), parallel=2, context=context, engine="llamacpp")).needed_bytes


def test_a_request_loads_its_model_by_name_and_the_listing_says_what_is_loaded(
    two_models: tuple[Path, Path], tmp_path: Path, running: list[RunningServer]
) -> None:
    server = serve_many(tmp_path, "--config", str(presets(tmp_path, *two_models)))
    running.append(server)
    listed = {card["id"]: card for card in httpx.get(server.base_url + "/models").json()["data"]}
    assert {name: card["loaded"] for name, card in listed.items()} == {
        "big": False,
        "small": False,
        "claude-haiku-*": False,
        "claude-sonnet-*": False,
    }
    assert loaded(server) == []

    reply = openai.OpenAI(base_url=server.base_url, api_key="x").chat.completions.create(
        model="small",
        messages=HELLO,  # type: ignore[arg-type]
        max_tokens=4,
    )
    assert reply.model == "small" and reply.choices[0].message.content

    listed = {card["id"]: card for card in httpx.get(server.base_url + "/models").json()["data"]}
    assert listed["small"]["loaded"] and listed["small"]["context_length"] == 2048
    assert listed["small"]["engine"] == "llamacpp" and listed["small"]["memory_bytes"] > 0
    assert not listed["big"]["loaded"]
    assert loaded(server) == ["small"]
    metrics = httpx.get(server.url + "/metrics").text
    assert metric_total(metrics, "launcher_generation_tokens_total", model="small") >= 1
    assert 'model="big"' not in metrics  # nothing loaded or generated under that name yet


def test_a_burst_for_a_cold_model_loads_it_once(
    two_models: tuple[Path, Path], tmp_path: Path, running: list[RunningServer]
) -> None:
    server = serve_many(tmp_path, "--config", str(presets(tmp_path, *two_models)))
    running.append(server)

    def stream(index: int) -> str:
        body = {"model": "big", "messages": HELLO, "max_tokens": 3, "stream": True}
        with httpx.stream("POST", server.base_url + "/chat/completions", json=body, timeout=120) as response:
            assert response.status_code == 200
            return response.read().decode()

    with concurrent.futures.ThreadPoolExecutor(8) as pool:
        bodies = list(pool.map(stream, range(8)))
    assert all(body.rstrip().endswith("data: [DONE]") and '"model":"big"' in body for body in bodies)
    assert httpx.get(server.url + "/launcher/models").json()["loads"] == {"big": 1}


def test_the_least_recently_used_idle_model_makes_room_within_the_budget(
    two_models: tuple[Path, Path], tmp_path: Path, running: list[RunningServer]
) -> None:
    a, b = two_models
    small, big = needed_bytes(a, 2048), needed_bytes(b)
    budget = max(small, big) + min(small, big) // 2  # either fits alone, not both together
    server = serve_many(tmp_path, "--config", str(presets(tmp_path, a, b)), "--memory-budget", str(budget))
    running.append(server)

    assert chat(server, "small").status_code == 200
    assert loaded(server) == ["small"]
    assert chat(server, "big").status_code == 200
    assert loaded(server) == ["big"]  # small, idle and least recently used, was unloaded
    listing = httpx.get(server.url + "/launcher/models").json()
    assert listing["memory_used_bytes"] <= listing["memory_budget_bytes"] == budget
    assert chat(server, "claude-haiku-4-5").status_code == 200
    assert loaded(server) == ["small"]
    assert httpx.get(server.url + "/launcher/models").json()["loads"] == {"small": 2, "big": 1}


def test_a_model_answering_a_request_is_not_unloaded_under_it(
    two_models: tuple[Path, Path], starter_gguf: Path, tmp_path: Path, running: list[RunningServer]
) -> None:
    """With room for one model, a request for the other waits until the running stream ends.

    The starter streams (a tiny model would be done before the test could look), tiny-b waits."""
    config = tmp_path / "models.toml"
    config.write_text(
        f'[models.starter]\nmodel = "{starter_gguf}"\ncontext = 2048\nparallel = 1\n\n'
        f'[models.big]\nmodel = "{two_models[1]}"\nparallel = 1\n'
    )
    # --swap-wait well past the stream: on a loaded 2-core machine 200 tokens of the starter can take
    # longer than the default 120 s, and the bound is not what this test is about
    server = serve_many(tmp_path, "--config", str(config), "--max-models", "1", "--swap-wait", "900")
    running.append(server)
    long = {"model": "starter", "prompt": "Once upon a time", "max_tokens": 200, "ignore_eos": True, "stream": True}
    with httpx.Client(timeout=300) as client, concurrent.futures.ThreadPoolExecutor(1) as pool:
        with client.stream("POST", server.base_url + "/completions", json=long) as streaming:
            lines = streaming.iter_lines()
            assert next(line for line in lines if line.startswith("data: "))  # the starter is generating
            other = pool.submit(chat, server, "big", timeout=900)
            time.sleep(1.0)
            assert not other.done()  # big waits for the room the starter holds
            assert loaded(server) == ["starter"]
            rest = [line for line in lines if line]  # read the stream to its end: nothing cut it short
        assert rest[-1] == "data: [DONE]"
        assert '"finish_reason":"length"' in "".join(rest)
        assert other.result(timeout=60).status_code == 200
    assert loaded(server) == ["big"]


def test_an_agents_names_reach_the_models_their_aliases_name(
    two_models: tuple[Path, Path], tmp_path: Path, running: list[RunningServer]
) -> None:
    server = serve_many(tmp_path, "--config", str(presets(tmp_path, *two_models)))
    running.append(server)
    claude = anthropic.Anthropic(base_url=server.url, api_key="x")
    claude.messages.create(model="claude-haiku-4-5-20251001", max_tokens=4, messages=HELLO)  # type: ignore[arg-type]
    assert loaded(server) == ["small"]
    claude.messages.create(model="claude-sonnet-4-6", max_tokens=4, messages=HELLO)  # type: ignore[arg-type]
    assert loaded(server) == ["big", "small"]
    codex = openai.OpenAI(base_url=server.base_url, api_key="x")
    assert codex.chat.completions.create(model="gpt-5-codex", messages=HELLO, max_tokens=2).model == "big"  # type: ignore[arg-type]
    wanted = ("model=small asked=claude-haiku-4-5-20251001", "model=big asked=gpt-5-codex")
    log = server.wait_for_log(*wanted)
    assert all(line in log for line in wanted)


def test_a_model_too_big_for_the_budget_is_refused_with_the_numbers(
    two_models: tuple[Path, Path], tmp_path: Path, running: list[RunningServer]
) -> None:
    server = serve_many(tmp_path, "--config", str(presets(tmp_path, *two_models)), "--memory-budget", "1MiB")
    running.append(server)
    response = chat(server, "big")
    assert response.status_code == 400
    error = response.json()["error"]
    assert error["code"] == "model_too_large" and error["param"] == "model"
    assert "needs" in error["message"] and "MiB" in error["message"] and "budget of 1.0 MiB" in error["message"]
    assert loaded(server) == []
    assert chat(server, "gpt-5-codex").status_code == 400  # a name nothing else matches goes to big: the same


def _rss(pid: int) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) * 1024
    raise AssertionError("no VmRSS")


@pytest.mark.skipif(not Path("/proc/self/status").exists(), reason="reads RSS from /proc")
def test_an_idle_model_is_unloaded_after_its_ttl_and_its_memory_goes_back(
    starter_gguf: Path, tmp_path: Path, running: list[RunningServer]
) -> None:
    server = start_server(LLAMACPP, starter_gguf, tmp_path, "--ttl", "2", "--context", "2048", "--parallel", "1")
    running.append(server)
    assert chat(server, "anything").status_code == 200
    with_model = _rss(server.process.pid)
    assert loaded(server) == [server.ready["model"]]
    deadline = time.monotonic() + 30
    while loaded(server) and time.monotonic() < deadline:
        time.sleep(0.25)
    assert loaded(server) == []
    without = _rss(server.process.pid)
    assert with_model - without > 150 * 1024**2, (with_model, without)  # the 253 MB of weights, at least most
    assert chat(server, "anything").status_code == 200  # asked again: loaded again
    assert httpx.get(server.url + "/launcher/models").json()["loads"] == {server.ready["model"]: 2}


def test_launcher_ps_lists_and_unloads(
    two_models: tuple[Path, Path], tmp_path: Path, running: list[RunningServer]
) -> None:
    server = serve_many(tmp_path, "--config", str(presets(tmp_path, *two_models)))
    running.append(server)
    assert chat(server, "small").status_code == 200
    env = {**os.environ, "PYTHONPATH": str(REPO_ROOT)}

    def ps(*args: str) -> subprocess.CompletedProcess[str]:
        command = [sys.executable, "-m", "launcher", "ps", "--url", server.url, *args]
        return subprocess.run(command, capture_output=True, text=True, env=env, timeout=60, check=False)

    listing = ps()
    assert listing.returncode == 0, listing.stderr
    assert listing.stdout.splitlines()[1].split()[:2] == ["small", "llamacpp"]
    assert "Loads on request: big" in listing.stdout
    assert ps("--unload", "small").stdout.strip() == "Unloaded small."
    assert loaded(server) == []
    assert "No model is loaded." in ps().stdout
    refused = ps("--unload", "small")
    assert refused.returncode != 0 and "is not loaded" in refused.stderr


def test_connect_gives_each_agent_the_small_model_the_server_maps_its_names_to(
    two_models: tuple[Path, Path], tmp_path: Path, running: list[RunningServer]
) -> None:
    from launcher.integrations.agents import get_agent
    from launcher.integrations.endpoint import discover_endpoint

    server = serve_many(tmp_path, "--config", str(presets(tmp_path, *two_models)))
    running.append(server)
    endpoint = discover_endpoint(server.base_url)
    assert (endpoint.model_id, endpoint.small_model_id) == ("big", "small")  # the default, and claude-haiku-*'s
    claude = get_agent("claude-code").build(endpoint)
    assert claude.env["ANTHROPIC_MODEL"] == "big" and claude.env["ANTHROPIC_DEFAULT_HAIKU_MODEL"] == "small"
    opencode = get_agent("opencode").build(endpoint).config_edits[0].fragment
    assert opencode["model"] == "launcher/big" and opencode["small_model"] == "launcher/small"
    aider = get_agent("aider").build(endpoint).config_edits[0].fragment
    assert aider["model"] == "openai/big" and aider["weak-model"] == "openai/small"


def test_a_preset_naming_no_model_stops_the_start_and_an_unknown_name_is_a_404(
    two_models: tuple[Path, Path], tmp_path: Path, running: list[RunningServer]
) -> None:
    bad = tmp_path / "bad.toml"
    bad.write_text('[models.x]\nmodel = "no-such-model"\n')
    env = {**os.environ, "LAUNCHER_HOME": str(tmp_path / "home"), "PYTHONPATH": str(REPO_ROOT)}
    command = [sys.executable, "-m", "launcher", "serve", "--config", str(bad), "--port", "0"]
    result = subprocess.run(command, capture_output=True, text=True, env=env, timeout=60, check=False)
    assert result.returncode != 0 and "[models.x] model = 'no-such-model'" in result.stderr

    a, _ = two_models
    only = tmp_path / "one.toml"
    only.write_text(f'[models.small]\nmodel = "{a}"\n')  # no default: nothing answers other names
    server = serve_many(tmp_path, "--config", str(only))
    running.append(server)
    response = chat(server, "gpt-5-codex")
    assert response.status_code == 404
    assert (
        response.json()["error"]["code"] == "model_not_found"
        and "Models: small." in response.json()["error"]["message"]
    )


def test_a_library_model_gets_its_own_plan_not_the_startup_models(
    two_models: tuple[Path, Path], tmp_path: Path, running: list[RunningServer]
) -> None:
    """The starter, loaded by name beside a tiny model, is planned for itself (context up to its
    32k), not given the tiny model's (at most its 4k)."""
    argv = [str(two_models[0]), "--port", "0", "--library", "--parallel", "1"]  # no --context: each its own
    server = launch_serve(argv, tmp_path / "home")
    running.append(server)
    tiny = server.ready["context_length"]
    assert tiny <= 4096  # the tiny model's own limit
    assert chat(server, "gemma-3-270m").status_code == 200
    contexts = {m["id"]: m["context_length"] for m in httpx.get(server.url + "/launcher/models").json()["models"]}
    assert contexts[server.ready["model"]] == tiny and contexts["gemma-3-270m"] > 4096


def test_serve_model_loads_the_other_library_models_by_name_unless_no_library(
    two_models: tuple[Path, Path], tmp_path: Path, running: list[RunningServer], monkeypatch: pytest.MonkeyPatch
) -> None:
    """Without a flag, as LM Studio and Ollama do: a request naming another library model loads it
    beside MODEL, and MODEL's own file under its library name is the model loaded already, not a
    second copy. With `--no-library` MODEL answers that name, as every other."""
    a, b = two_models
    home = tmp_path / "home"
    monkeypatch.setenv("LAUNCHER_HOME", str(home))
    add_imported(a, "first")  # MODEL's file, named otherwise in the library
    add_imported(b, "second")
    argv = [str(a), "--port", "0", "--engine", "llamacpp", "--context", "2048", "--parallel", "1"]
    server = launch_serve(argv, home)
    running.append(server)
    assert server.ready["model"] == "tiny-a"
    assert chat(server, "second").json()["model"] == "second"
    assert chat(server, "first").json()["model"] == "tiny-a"
    assert chat(server, "claude-sonnet-4-6").json()["model"] == "tiny-a"  # names no model has: MODEL's
    assert loaded(server) == ["second", "tiny-a"]
    assert httpx.get(server.url + "/launcher/models").json()["loads"] == {"tiny-a": 1, "second": 1}
    cards = {card["id"]: card for card in httpx.get(server.base_url + "/models").json()["data"]}
    assert cards["first"]["alias_for"] == "tiny-a" and cards["second"]["loaded"]

    alone = launch_serve([*argv, "--no-library"], home, "serve-alone")
    running.append(alone)
    assert chat(alone, "second").json()["model"] == "tiny-a"
    assert loaded(alone) == ["tiny-a"]
    assert [card["id"] for card in httpx.get(alone.base_url + "/models").json()["data"]] == ["tiny-a"]


def test_serve_alone_loads_the_starter_at_the_start_and_the_library_on_request(
    two_models: tuple[Path, Path], tmp_path: Path, running: list[RunningServer], monkeypatch: pytest.MonkeyPatch
) -> None:
    home = tmp_path / "home"
    monkeypatch.setenv("LAUNCHER_HOME", str(home))
    add_imported(two_models[1], "second")
    server = launch_serve(["--port", "0", "--context", "2048", "--parallel", "1"], home)
    running.append(server)
    starter = server.ready["model"]
    assert starter == "gemma-3-270m" and loaded(server) == [starter]  # loaded before the first request
    assert chat(server, "second").json()["model"] == "second"
    assert chat(server, "gpt-5-codex").json()["model"] == starter
    assert loaded(server) == [starter, "second"]
    assert sorted(httpx.get(server.url + "/launcher/models").json()["available"]) == [starter, "second"]
