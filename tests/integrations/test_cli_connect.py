"""`launcher connect` as a user runs it: list, print, dry-run, write, and test against a real server."""

from __future__ import annotations

import json
import tomllib
from pathlib import Path

import pytest

from launcher.cli import main
from launcher.core.net import free_port
from tests.integrations.conftest import SERVER_CONTEXT, LiveServer


@pytest.fixture
def home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A fake home directory: `--write` must land here, never in the real one."""
    monkeypatch.setenv("HOME", str(tmp_path))
    monkeypatch.setenv("USERPROFILE", str(tmp_path))
    monkeypatch.delenv("LAUNCHER_API_KEY", raising=False)
    return tmp_path


def test_list_names_every_agent(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["connect", "--list"]) == 0
    out = capsys.readouterr().out
    for agent_id in ("claude-code", "codex", "opencode", "aider", "continue", "cline"):
        assert agent_id in out
    assert "~/.codex/config.toml" in out


def test_prints_env_and_file_for_the_chosen_shell(home: Path, capsys: pytest.CaptureFixture[str]) -> None:
    argv = ["connect", "claude-code", "--base-url", "http://127.0.0.1:9/v1", "--model", "m", "--context", "8192"]
    assert main([*argv, "--shell", "fish"]) == 0
    out = capsys.readouterr().out
    assert "set -gx ANTHROPIC_BASE_URL 'http://127.0.0.1:9'" in out
    assert "~/.claude/settings.json" in out
    assert "warning: The server's context is 8,192 tokens but Claude Code needs at least 32,768" in out
    assert not (home / ".claude").exists()  # printing writes nothing


def test_json_output_is_the_setup(home: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["connect", "cline", "--base-url", "localhost:9", "--model", "m", "--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert data["agent"] == "cline"
    assert [f["path"] for f in data["config_files"]] == [".cline/data/settings/providers.json"]
    assert {"label": "Base URL", "value": "http://localhost:9/v1", "secret": False} in data["fields"]


def test_dry_run_then_write_with_backup(home: Path, capsys: pytest.CaptureFixture[str]) -> None:
    config = home / ".codex" / "config.toml"
    config.parent.mkdir()
    config.write_text('approval_policy = "never"\n')
    argv = ["connect", "codex", "--base-url", "http://127.0.0.1:9/v1", "--model", "m", "--context", "32768"]

    assert main([*argv, "--dry-run"]) == 0
    out = capsys.readouterr().out
    assert '+model_provider = "launcher"' in out
    assert config.read_text() == 'approval_policy = "never"\n'

    assert main([*argv, "--write"]) == 0
    out = capsys.readouterr().out
    assert f"wrote {config}" in out
    document = tomllib.loads(config.read_text())
    assert document["approval_policy"] == "never"
    assert document["model_providers"]["launcher"]["base_url"] == "http://127.0.0.1:9/v1"
    (backup,) = config.parent.glob("config.toml.*.bak")
    assert backup.read_text() == 'approval_policy = "never"\n'


def test_cline_write_creates_the_clis_providers_file(home: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["connect", "cline", "--base-url", "localhost:9", "--model", "m", "--write"]) == 0
    path = home / ".cline" / "data" / "settings" / "providers.json"
    assert f"created {path}" in capsys.readouterr().out
    document = json.loads(path.read_text())
    assert document["lastUsedProvider"] == "openai-compatible"
    settings = document["providers"]["openai-compatible"]["settings"]
    assert settings["baseUrl"] == "http://localhost:9/v1"
    assert settings["model"] == "m"


def test_unknown_agent_is_a_clear_error(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["connect", "cursor", "--base-url", "localhost:9", "--model", "m"]) == 2
    assert "unknown agent 'cursor'; known agents: claude-code" in capsys.readouterr().err


def test_no_server_says_how_to_start_one(home: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["connect", "opencode", "--base-url", f"http://127.0.0.1:{free_port()}"]) == 1
    err = capsys.readouterr().err
    assert err.startswith("error: no server answered at http://127.0.0.1:")
    assert "Traceback" not in err


def test_discovers_model_and_context_from_the_server(
    live_server: LiveServer, home: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    argv = ["connect", "opencode", "--base-url", live_server.base_url, "--api-key", live_server.api_key, "--json"]
    assert main(argv) == 0
    data = json.loads(capsys.readouterr().out)
    assert data["context_length"] == SERVER_CONTEXT
    content = json.loads(data["config_files"][0]["content"])
    assert content["model"] == f"launcher/{live_server.model}"


def test_refused_key_is_a_clear_error(live_server: LiveServer, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["connect", "aider", "--base-url", live_server.base_url]) == 1
    assert "refused the API key (HTTP 401): pass --api-key" in capsys.readouterr().err


def test_write_and_test_against_the_real_server(
    live_server: LiveServer, home: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("LAUNCHER_API_KEY", live_server.api_key)  # the documented fallback for --api-key
    argv = ["connect", "continue", "--base-url", live_server.base_url, "--write", "--test", "--timeout", "300"]
    assert main(argv) == 0
    out = capsys.readouterr().out
    assert (home / ".continue" / "config.yaml").exists()
    assert "[PASS] Tool call parsed: get_weather(" in out
    assert "Continue should work with" in out


def test_failed_live_test_exits_non_zero(
    live_server: LiveServer, home: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # Claude Code needs 32k; the test server has 16k, so the report fails and says how to fix it.
    argv = ["connect", "claude-code", "--base-url", live_server.base_url, "--api-key", live_server.api_key]
    argv += ["--test", "--timeout", "300"]
    assert main(argv) == 1
    assert "restart the server with --context 32768" in capsys.readouterr().out
