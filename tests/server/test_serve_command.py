"""`launcher serve` as a user runs it: flags, config file, ready line, clear start errors, clean exit."""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
from pathlib import Path

import httpx
import pytest

from launcher.cli import build_parser
from launcher.cli.serve import build_config
from launcher.core.config import ServeConfig
from launcher.core.errors import ConfigError
from tests.conformance.servers import REPO_ROOT, SERVERS, start_server

LLAMACPP = next(spec for spec in SERVERS if spec.engine == "llamacpp")
READY_KEYS = {
    "serving",
    "models",
    "url",
    "base_url",
    "model",
    "engine",
    "engine_reason",
    "context_length",
    "parallel",
    "api_key_required",
    "pid",
}


def parse(*argv: str) -> ServeConfig:
    return build_config(build_parser().parse_args(["serve", *argv]))


def test_every_config_field_has_a_flag() -> None:
    serve_parser = build_parser()._subparsers._group_actions[0].choices["serve"]  # type: ignore[union-attr,index]
    flags = {option for action in serve_parser._actions for option in action.option_strings}
    for name in ServeConfig.model_fields:
        if name not in ("model", "presets"):  # presets are [models.NAME] tables of --config
            assert "--" + name.replace("_", "-") in flags


def test_flags_build_the_config() -> None:
    config = parse(
        "model.gguf",
        "--context",
        "4096",
        "--cors-origins",
        "http://a,http://b",
        "--engine",
        "llamacpp",
        "--port",
        "0",
        "--alias",
        "coder",
        "--alias",
        "claude-haiku-*=coder,gpt-5=coder",
        "--max-output-tokens",
        "256",
    )
    assert config.model == "model.gguf" and config.context == 4096 and config.port == 0
    assert config.cors_origins == ["http://a", "http://b"] and config.engine == "llamacpp"
    assert config.served_name == "coder" and config.max_output_tokens == 256
    assert config.alias_map == {"claude-haiku-*": "coder", "gpt-5": "coder"}
    assert ServeConfig.model_validate(config.model_dump()) == config
    assert parse(*config.to_argv()) == config  # what the app passes to its server child


def test_the_apps_library_and_idle_unload_settings_reach_its_server_child() -> None:
    config = ServeConfig(model="model.gguf", ttl=600, max_models=2)
    assert parse().library and parse(*config.to_argv()) == config  # the library is served by default
    argv = config.model_copy(update={"library": False}).to_argv()
    assert "--no-library" in argv and "False" not in argv  # a switch, as the CLI's BooleanOptionalAction takes it
    assert parse(*argv).library is False


def test_the_call_grammar_can_be_turned_off() -> None:
    assert parse().tool_call_grammar == "lazy"
    config = parse("--tool-call-grammar", "off")
    assert config.tool_call_grammar == "off" and parse(*config.to_argv()) == config
    with pytest.raises(SystemExit):
        parse("--tool-call-grammar", "strict")


def test_config_file_is_merged_and_flags_win(tmp_path: Path) -> None:
    path = tmp_path / "serve.toml"
    path.write_text('[serve]\nparallel = 2\nport = 9000\nalias = "from-file"\n')
    config = parse("--config", str(path), "--port", "9001")
    assert config.parallel == 2 and config.port == 9001 and config.served_name == "from-file"


def test_bad_values_are_rejected_before_starting(tmp_path: Path) -> None:
    with pytest.raises(SystemExit):
        parse("--engine", "tensorrt")
    path = tmp_path / "serve.toml"
    path.write_text("[serve]\nparallel = 0\n")
    from launcher.core.errors import ConfigError

    with pytest.raises(ConfigError, match="parallel"):
        parse("--config", str(path))


def run_serve(*argv: str, home: Path) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "LAUNCHER_HOME": str(home), "PYTHONPATH": str(REPO_ROOT)}
    return subprocess.run(
        [sys.executable, "-m", "launcher", "serve", *argv],
        capture_output=True,
        text=True,
        env=env,
        timeout=120,
        check=False,
    )


def error_line(result: subprocess.CompletedProcess[str]) -> dict[str, str]:
    lines = [line for line in result.stdout.splitlines() if line.startswith("LAUNCHER_ERROR ")]
    assert len(lines) == 1, result.stdout + result.stderr
    payload: dict[str, str] = json.loads(lines[0].split(" ", 1)[1])
    return payload


def test_missing_file_is_a_clear_error(tmp_path: Path) -> None:
    result = run_serve(str(tmp_path / "nope.gguf"), "--port", "0", home=tmp_path)
    assert result.returncode != 0
    error = error_line(result)
    assert error["kind"] == "ModelNotFoundError" and "nope.gguf" in error["message"]
    assert "Traceback" not in result.stderr


def test_not_a_gguf_is_a_clear_error(tmp_path: Path) -> None:
    fake = tmp_path / "fake.gguf"
    fake.write_bytes(b"PK\x03\x04 this is a zip file, not a model" * 10)
    result = run_serve(str(fake), "--port", "0", home=tmp_path)
    assert result.returncode != 0
    error = error_line(result)
    assert error["kind"] == "ModelFormatError" and "Traceback" not in result.stderr
    message = error["message"]
    assert message.count(str(fake.resolve())) == 1 and message.endswith(".") and not message.endswith("..")
    assert f"error: {message}" in result.stderr.splitlines()


def test_port_in_use_names_the_port_and_the_way_out(tiny_gguf: Path, tmp_path: Path) -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        result = run_serve(str(tiny_gguf), "--port", str(port), home=tmp_path)
    assert result.returncode != 0
    error = error_line(result)
    assert error["kind"] == "ServerError" and str(port) in error["message"] and "--port 0" in error["message"]


def test_ready_line_then_clean_exit_on_sigterm(tiny_gguf: Path, tmp_path: Path) -> None:
    server = start_server(LLAMACPP, tiny_gguf, tmp_path, "--alias", "my-model")
    try:
        assert set(server.ready) == READY_KEYS
        assert server.ready["model"] == "my-model" and server.ready["pid"] == server.process.pid
        assert server.ready["api_key_required"] is False and server.ready["base_url"] == server.url + "/v1"
        serving = server.ready["serving"]
        assert serving["model_path"] == str(tiny_gguf) and serving["format"] == "gguf"
        assert serving["context"] == server.ready["context_length"] and serving["kv_cache_type"] == "f16"
        assert httpx.get(f"{server.url}/health").json()["serving"] == serving
        assert httpx.get(f"{server.url}/v1/models").json()["data"][0]["id"] == "my-model"
    finally:
        server.process.send_signal(signal.SIGTERM)
        server.process.wait(timeout=30)
        server.stop()
    assert server.process.returncode is not None


def test_non_loopback_bind_generates_and_requires_a_key(tiny_gguf: Path, tmp_path: Path) -> None:
    server = start_server(LLAMACPP, tiny_gguf, tmp_path, "--host", "0.0.0.0")
    try:
        assert server.ready["api_key_required"] is True and server.ready["url"].startswith("http://127.0.0.1:")
        log = server.stderr_path.read_text()
        key = log.split("API key required: ", 1)[1].split()[0]
        assert httpx.get(f"{server.base_url}/models").status_code == 401
        assert httpx.get(f"{server.base_url}/models", headers={"Authorization": f"Bearer {key}"}).status_code == 200
    finally:
        server.stop()


def test_the_log_has_one_line_per_request_naming_the_agent(tiny_gguf: Path, tmp_path: Path) -> None:
    server = start_server(LLAMACPP, tiny_gguf, tmp_path, "--max-output-tokens", "5")
    try:
        headers = {"User-Agent": "claude-cli/2.1.332 (external, sdk-cli)", "anthropic-version": "2023-06-01"}
        body = {"model": "claude-sonnet-4-5", "max_tokens": 32000, "messages": [{"role": "user", "content": "Hi"}]}
        reply = httpx.post(f"{server.url}/v1/messages", json=body, headers=headers, timeout=60)
        assert reply.status_code == 200 and reply.json()["usage"]["output_tokens"] <= 5
        assert (
            httpx.get(f"{server.url}/models", headers={"User-Agent": "codex_exec/0.171.0 (Debian)"}).status_code == 200
        )
        assert httpx.post(f"{server.url}/v1/nowhere", json={}).status_code == 404
    finally:
        server.stop()
    lines = [line for line in server.stderr_path.read_text().splitlines() if "launcher.requests" in line]
    assert len(lines) == 3, lines
    assert "POST /v1/messages 200 claude-code/2.1.332 model=" in lines[0]
    assert "asked=claude-sonnet-4-5" in lines[0] and "generated=5 " in lines[0] and "ttft=" in lines[0]
    assert "GET /models 200 codex/0.171.0" in lines[1]
    assert "POST /v1/nowhere 404" in lines[2]


def test_the_api_key_can_stay_out_of_the_process_list(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    key_file = tmp_path / "key"
    key_file.write_text("from-file\n")
    monkeypatch.setenv("LAUNCHER_API_KEY", "from-env")
    assert parse().api_key == "from-env"
    assert parse("--api-key-file", str(key_file)).api_key == "from-file"
    assert parse("--api-key-file", str(key_file), "--api-key", "from-flag").api_key == "from-flag"
    monkeypatch.delenv("LAUNCHER_API_KEY")
    assert parse().api_key is None
    with pytest.raises(ConfigError, match="Cannot read the API key file"):
        parse("--api-key-file", str(tmp_path / "missing"))
    # the app hands its key to the server child in the environment, not in argv
    config = ServeConfig(api_key="sekret", port=0)
    assert "sekret" not in config.to_argv() and config.to_environment() == {"LAUNCHER_API_KEY": "sekret"}
