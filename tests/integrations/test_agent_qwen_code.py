"""Qwen Code gets a `launcher` model provider with the server's window and output limit, in
~/.qwen/settings.json for `launcher connect --write` or in a run-only system settings file."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from launcher.integrations import Endpoint, apply_edit, plan_edit
from launcher.integrations.agents import qwen_code
from launcher.integrations.endpoint import NO_KEY_PLACEHOLDER

LOCAL = Endpoint("http://127.0.0.1:8420/v1", None, "qwen3-coder-30b", 65536)
KEYED = Endpoint("http://127.0.0.1:8420", "sk-local-123", "qwen3-coder-30b", 65536, small_model_id="qwen3-0.6b")

EXPECTED_MODEL = {
    "id": "qwen3-coder-30b",
    "name": "qwen3-coder-30b (launcher)",
    "baseUrl": "http://127.0.0.1:8420/v1",
    "envKey": "LAUNCHER_AGENT_API_KEY",
    "generationConfig": {
        "timeout": 1_800_000,
        "streamIdleTimeoutMs": 1_800_000,
        "contextWindowSize": 65536,
        "samplingParams": {"max_tokens": 8192},
    },
}


def test_settings_select_an_openai_protocol_provider_with_the_servers_limits() -> None:
    settings = qwen_code.settings_for(LOCAL)
    assert settings == {
        "modelProviders": {"launcher": [EXPECTED_MODEL]},
        "providerProtocol": {"launcher": "openai"},
        "security": {"auth": {"selectedType": "openai"}},  # without it a headless run refuses to start
        "model": {"name": "qwen3-coder-30b", "baseUrl": "http://127.0.0.1:8420/v1"},
    }


def test_small_model_fills_the_fast_model_slot_on_the_same_server() -> None:
    settings = qwen_code.settings_for(KEYED)
    assert settings["fastModel"] == "qwen3-0.6b"
    small = settings["modelProviders"]["launcher"][1]
    assert small["id"] == "qwen3-0.6b" and small["baseUrl"] == "http://127.0.0.1:8420/v1"
    assert "contextWindowSize" not in small["generationConfig"]  # the server reports the main model's only


def test_unknown_context_sets_no_window_and_a_modest_output_limit() -> None:
    unknown = Endpoint("http://127.0.0.1:8420/v1", None, "m")
    generation = qwen_code.settings_for(unknown)["modelProviders"]["launcher"][0]["generationConfig"]
    assert "contextWindowSize" not in generation
    assert generation["samplingParams"] == {"max_tokens": 4096}
    assert any("context length is unknown" in w for w in qwen_code.build(unknown).warnings)


def test_build_env_key_command_and_warnings() -> None:
    setup = qwen_code.build(KEYED)
    assert setup.agent_id == "qwen-code" and setup.wire_api == "openai-chat"
    assert setup.command == "qwen"
    assert setup.env == {
        "LAUNCHER_AGENT_API_KEY": "sk-local-123",
        "QWEN_STREAM_MAX_LIFETIME_MS": "1800000",
        "QWEN_USAGE_STATISTICS_ENABLED": "0",
    }
    assert [(f.label, f.secret) for f in setup.fields] == [
        ("baseUrl", False),
        ("model", False),
        ("LAUNCHER_AGENT_API_KEY", True),
    ]
    assert qwen_code.build(LOCAL).env["LAUNCHER_AGENT_API_KEY"] == NO_KEY_PLACEHOLDER  # an unset envKey is refused
    small = Endpoint("http://127.0.0.1:8420/v1", None, "tiny", 8192)
    assert any("--context 32768" in w for w in qwen_code.build(small).warnings)
    assert not any("--context" in w for w in setup.warnings)


def test_written_settings_keep_the_users_own_and_carry_the_env(tmp_path: Path) -> None:
    path = tmp_path / ".qwen" / "settings.json"
    path.parent.mkdir()
    user: dict[str, Any] = {
        "$version": 4,
        "ui": {"theme": "GitHub"},
        "modelProviders": {"openai": [{"id": "gpt-4o", "envKey": "OPENAI_API_KEY"}]},
        "security": {"auth": {"selectedType": "qwen-oauth"}, "folderTrust": {"enabled": True}},
        "env": {"OPENAI_API_KEY": "sk-theirs"},
    }
    path.write_text(json.dumps(user))
    edit = qwen_code.build(KEYED).config_edits[0]
    assert edit.relative_path == qwen_code.AGENT.config_file == ".qwen/settings.json"
    plan = plan_edit(edit, home=tmp_path)
    assert plan.changed and '"selectedType": "openai"' in plan.diff
    result = apply_edit(edit, home=tmp_path)
    assert result.written and result.backup is not None
    written = json.loads(path.read_text())
    assert written["$version"] == 4 and written["ui"] == {"theme": "GitHub"}
    assert written["modelProviders"]["openai"] == user["modelProviders"]["openai"]  # theirs stay selectable
    assert [m["id"] for m in written["modelProviders"]["launcher"]] == ["qwen3-coder-30b", "qwen3-0.6b"]
    assert written["security"] == {"auth": {"selectedType": "openai"}, "folderTrust": {"enabled": True}}
    assert written["model"] == {"name": "qwen3-coder-30b", "baseUrl": "http://127.0.0.1:8420/v1"}
    assert written["fastModel"] == "qwen3-0.6b"
    assert written["env"] == {
        "OPENAI_API_KEY": "sk-theirs",
        "LAUNCHER_AGENT_API_KEY": "sk-local-123",
        "QWEN_STREAM_MAX_LIFETIME_MS": "1800000",
        "QWEN_USAGE_STATISTICS_ENABLED": "0",
    }
    assert not apply_edit(edit, home=tmp_path).written  # a second write changes nothing


def test_new_settings_file_leaves_the_version_stamp_to_qwen_code(tmp_path: Path) -> None:
    # A file without `$version` is migrated from the oldest format; stamping 4 on a user's old file
    # would skip that, so only a file we own entirely (the run-only one) carries it.
    apply_edit(qwen_code.build(LOCAL).config_edits[0], home=tmp_path)
    written = json.loads((tmp_path / ".qwen" / "settings.json").read_text())
    assert "$version" not in written
    assert written["modelProviders"]["launcher"] == [EXPECTED_MODEL]


def test_run_config_is_a_run_only_system_settings_file(tmp_path: Path) -> None:
    run = qwen_code.run_config(KEYED, tmp_path)
    path = tmp_path / "qwen-settings.json"
    assert list(run.files) == [path]
    assert run.args == ()
    assert run.env == {
        "LAUNCHER_AGENT_API_KEY": "sk-local-123",
        "QWEN_STREAM_MAX_LIFETIME_MS": "1800000",
        "QWEN_USAGE_STATISTICS_ENABLED": "0",
        "QWEN_CODE_SYSTEM_SETTINGS_PATH": str(path),
    }
    settings = json.loads(run.files[path])
    assert settings == {"$version": 4, **qwen_code.settings_for(KEYED)}
    assert settings["modelProviders"]["launcher"][0]["generationConfig"]["contextWindowSize"] == 65536
    assert not list(tmp_path.iterdir())  # `launcher launch` writes the files, not run_config


def test_agent_declares_its_command_and_package() -> None:
    agent = qwen_code.AGENT
    assert (agent.id, agent.binary, agent.wire_api, agent.needs_tools) == ("qwen-code", "qwen", "openai-chat", True)
    assert agent.install is not None and agent.install.command == "npm install -g @qwen-code/qwen-code"
    assert agent.run_config_for(LOCAL, Path("/run")).env["LAUNCHER_AGENT_API_KEY"] == NO_KEY_PLACEHOLDER
    assert agent.setup_for(LOCAL).config_edits[0].relative_path == agent.config_file
