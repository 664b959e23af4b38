"""Each agent's settings carry the exact keys its docs name, for the endpoint the user has."""

from __future__ import annotations

import json
import tomllib

import pytest
import yaml

from launcher.core.errors import ConfigError
from launcher.integrations import AGENTS, Endpoint, get_agent
from launcher.integrations.endpoint import NO_KEY_PLACEHOLDER, normalize_base_url

LOCAL = Endpoint("http://127.0.0.1:8420/v1", None, "qwen3-coder-30b", 65536)
KEYED = Endpoint("http://127.0.0.1:8420", "sk-local-123", "qwen3-coder-30b", 65536)


def test_registry_has_the_seven_agents() -> None:
    assert list(AGENTS) == ["claude-code", "codex", "opencode", "aider", "continue", "cline", "qwen-code"]
    for agent in AGENTS.values():
        assert agent.docs_url.startswith("https://")
        setup = agent.setup_for(LOCAL)
        # The declared file is the first one the writer touches.
        written = [edit.relative_path for edit in setup.config_edits][:1]
        assert written == ([agent.config_file] if agent.config_file else [])


def test_aliases_and_unknown_agent() -> None:
    assert get_agent("Claude").id == "claude-code"
    assert get_agent("codex_cli").id == "codex"
    with pytest.raises(ConfigError, match="known agents: claude-code, codex"):
        get_agent("cursor")


@pytest.mark.parametrize(
    ("given", "expected"),
    [
        ("http://127.0.0.1:8420", "http://127.0.0.1:8420/v1"),
        ("http://127.0.0.1:8420/v1/", "http://127.0.0.1:8420/v1"),
        ("localhost:9000", "http://localhost:9000/v1"),
    ],
)
def test_base_url_is_normalized(given: str, expected: str) -> None:
    assert normalize_base_url(given) == expected
    assert Endpoint(given, None, "m").root_url == expected.removesuffix("/v1")


def test_claude_code_env_uses_root_url_bearer_token_and_all_model_slots() -> None:
    setup = get_agent("claude-code").setup_for(KEYED)
    env = setup.env
    assert env["ANTHROPIC_BASE_URL"] == "http://127.0.0.1:8420"  # no /v1: the SDK appends /v1/messages
    assert env["ANTHROPIC_AUTH_TOKEN"] == "sk-local-123"
    assert "ANTHROPIC_API_KEY" not in env  # would trigger Claude Code's "use this key?" prompt
    for slot in ("ANTHROPIC_MODEL", "ANTHROPIC_DEFAULT_HAIKU_MODEL", "ANTHROPIC_SMALL_FAST_MODEL"):
        assert env[slot] == "qwen3-coder-30b"
    assert setup.wire_api == "anthropic"
    assert setup.config_edits[0].fragment == {"env": env}  # ~/.claude/settings.json "env" block
    assert setup.command == "claude"
    # its real window (not an assumed 1M), compaction before overflow, no per-session billing line
    assert env["CLAUDE_CODE_MAX_CONTEXT_TOKENS"] == env["CLAUDE_CODE_AUTO_COMPACT_WINDOW"] == "65536"
    assert env["CLAUDE_CODE_ATTRIBUTION_HEADER"] == "0"


def test_claude_code_warns_when_context_is_below_32k() -> None:
    small = Endpoint("http://127.0.0.1:8420/v1", None, "tiny", 8192)
    warnings = " ".join(get_agent("claude-code").setup_for(small).warnings)
    assert "8,192" in warnings and "32,768" in warnings and "--context 32768" in warnings
    roomy = " ".join(get_agent("claude-code").setup_for(LOCAL).warnings)
    assert "--context" not in roomy


def test_claude_code_without_key_uses_a_placeholder_token() -> None:
    setup = get_agent("claude-code").setup_for(LOCAL)
    assert setup.env["ANTHROPIC_AUTH_TOKEN"] == NO_KEY_PLACEHOLDER


def test_codex_config_declares_a_responses_provider() -> None:
    setup = get_agent("codex").setup_for(KEYED)
    document = tomllib.loads(setup.config_edits[0].fragment_text())
    assert document["model"] == "qwen3-coder-30b"
    assert document["model_provider"] == "launcher"
    assert document["model_context_window"] == 65536
    assert document["model_providers"]["launcher"] == {
        "name": "Launcher (local)",
        "base_url": "http://127.0.0.1:8420/v1",
        "wire_api": "responses",
        "env_key": "LAUNCHER_API_KEY",
    }
    assert setup.env == {"LAUNCHER_API_KEY": "sk-local-123"}
    assert setup.wire_api == "openai-responses"


def test_codex_without_key_sets_no_env_key() -> None:
    # Codex refuses to start when env_key names an unset variable, so none is declared.
    setup = get_agent("codex").setup_for(LOCAL)
    assert "env_key" not in setup.config_edits[0].fragment["model_providers"]["launcher"]
    assert setup.env == {}


def test_opencode_provider_uses_openai_compatible_package_with_limits() -> None:
    setup = get_agent("opencode").setup_for(KEYED)
    document = json.loads(setup.config_edits[0].fragment_text())
    provider = document["provider"]["launcher"]
    assert provider["npm"] == "@ai-sdk/openai-compatible"
    assert provider["options"] == {"baseURL": "http://127.0.0.1:8420/v1", "apiKey": "sk-local-123"}
    assert provider["models"]["qwen3-coder-30b"]["limit"] == {"context": 65536, "output": 8192}
    assert document["model"] == "launcher/qwen3-coder-30b"
    assert document["$schema"] == "https://opencode.ai/config.json"


def test_aider_env_model_prefix_and_metadata_file() -> None:
    setup = get_agent("aider").setup_for(KEYED)
    assert setup.env == {"OPENAI_API_BASE": "http://127.0.0.1:8420/v1", "OPENAI_API_KEY": "sk-local-123"}
    assert setup.command == "aider --model openai/qwen3-coder-30b"
    settings = yaml.safe_load(setup.config_edits[0].fragment_text())  # ~/.aider.conf.yml: no env needed
    assert settings == {
        "model": "openai/qwen3-coder-30b",
        "openai-api-base": "http://127.0.0.1:8420/v1",
        "openai-api-key": "sk-local-123",
    }
    metadata = json.loads(setup.config_edits[1].fragment_text())["openai/qwen3-coder-30b"]
    assert metadata["max_input_tokens"] == 65536
    assert metadata["litellm_provider"] == "openai"
    assert get_agent("aider").needs_tools is False


def test_aider_without_known_context_writes_no_metadata() -> None:
    setup = get_agent("aider").setup_for(Endpoint("http://h:1/v1", None, "m"))
    assert [edit.relative_path for edit in setup.config_edits] == [".aider.conf.yml"]
    assert any("context length is unknown" in warning for warning in setup.warnings)


def test_continue_model_entry_and_required_top_level_keys() -> None:
    edit = get_agent("continue").setup_for(KEYED).config_edits[0]
    document = yaml.safe_load(edit.fragment_text())
    assert {"name", "version", "schema"} <= document.keys()
    (entry,) = document["models"]
    assert entry["provider"] == "openai"
    assert entry["apiBase"] == "http://127.0.0.1:8420/v1"
    assert entry["model"] == "qwen3-coder-30b"
    assert entry["apiKey"] == "sk-local-123"
    assert entry["defaultCompletionOptions"]["contextLength"] == 65536
    assert "tool_use" in entry["capabilities"]
    assert entry["roles"] == ["chat", "edit", "apply"]


def test_cline_writes_the_clis_providers_file_and_still_gives_the_panel_fields() -> None:
    setup = get_agent("cline").setup_for(KEYED)
    fields = {field.label: field.value for field in setup.fields}
    assert fields["API Provider"] == "OpenAI Compatible"
    assert fields["Base URL"] == "http://127.0.0.1:8420/v1"
    assert fields["API Key"] == "sk-local-123"
    assert fields["Model ID"] == "qwen3-coder-30b"
    assert fields["Context Window Size"] == "65536"
    assert next(f for f in setup.fields if f.label == "API Key").secret
    (edit,) = setup.config_edits
    assert edit.relative_path == ".cline/data/settings/providers.json"
    settings = edit.fragment["providers"]["openai-compatible"]["settings"]
    assert settings["baseUrl"] == "http://127.0.0.1:8420/v1"
    assert settings["contextWindow"] == 65536


def test_as_dict_is_json_with_every_shell() -> None:
    data = json.loads(get_agent("aider").setup_for(KEYED).to_json())
    assert set(data["shell"]) == {"bash", "fish", "powershell"}
    assert [f["path"] for f in data["config_files"]] == [".aider.conf.yml", ".aider.model.metadata.json"]
