"""What `launcher launch` hands each agent for one run: the server's truth, and nothing in HOME.

Each run_config gives the model id, the context window, the key (a placeholder when the server
needs none) and the small model where the agent has a slot for it, through the environment,
arguments before the user's own, and files inside the run folder only. The real agents run with
these settings in tests/agents; here, the values themselves.
"""

from __future__ import annotations

import json
import tomllib
from pathlib import Path
from typing import Any

import pytest

from launcher.integrations import get_agent
from launcher.integrations.agents import AGENTS, codex
from launcher.integrations.agents.base import RunConfig
from launcher.integrations.endpoint import NO_KEY_PLACEHOLDER, RUN_KEY_ENV, Endpoint
from launcher.integrations.setup import output_tokens_for

LOCAL = Endpoint("http://127.0.0.1:8420/v1", None, "qwen3-coder-30b", 65536)
KEYED = Endpoint("http://127.0.0.1:8420", "sk-local-123", "qwen3-coder-30b", 65536)
WITH_SMALL = Endpoint("http://127.0.0.1:8420/v1", None, "qwen3-coder-30b", 65536, small_model_id="qwen3-0.6b")
UNKNOWN_WINDOW = Endpoint("http://127.0.0.1:8420/v1", None, "qwen3-coder-30b")
RUN_AGENTS = tuple(agent.id for agent in AGENTS.values() if agent.run_config is not None)


def run_config(agent_id: str, endpoint: Endpoint, tmp_path: Path) -> RunConfig:
    return get_agent(agent_id).run_config_for(endpoint, tmp_path / "run")


PINS = tomllib.loads((Path(__file__).parents[1] / "agents" / "pins.toml").read_text(encoding="utf-8"))


def test_every_launchable_agent_is_the_one_the_agent_tier_verifies() -> None:
    # launch tells users to install what the tier runs: the same package and command.
    assert set(RUN_AGENTS) == set(PINS)
    for agent_id, pin in PINS.items():
        agent = get_agent(agent_id)
        registry = "npm" if "npm" in pin else "pypi"
        assert agent.binary == pin["binary"]
        assert agent.install is not None
        assert (agent.install.registry, agent.install.package) == (registry, pin[registry])


@pytest.mark.parametrize("agent_id", RUN_AGENTS)
@pytest.mark.parametrize("endpoint", [LOCAL, KEYED, WITH_SMALL, UNKNOWN_WINDOW])
def test_run_files_stay_in_the_run_folder_and_every_value_is_text(
    agent_id: str, endpoint: Endpoint, tmp_path: Path
) -> None:
    config = run_config(agent_id, endpoint, tmp_path)
    for path in config.files:
        assert path.is_relative_to(tmp_path / "run")
    assert all(isinstance(value, str) for value in config.env.values())
    assert all(isinstance(arg, str) for arg in config.args)
    assert not (tmp_path / "run").exists(), "run_config only describes files; launch writes them"


# ----- Claude Code ----------------------------------------------------------------------------


def test_claude_code_gets_builds_variables_in_env_and_in_a_settings_file(tmp_path: Path) -> None:
    config = run_config("claude-code", KEYED, tmp_path)
    assert config.env == get_agent("claude-code").setup_for(KEYED).env
    assert config.env["ANTHROPIC_AUTH_TOKEN"] == "sk-local-123"
    assert config.env["CLAUDE_CODE_MAX_CONTEXT_TOKENS"] == "65536"
    # The user's settings.json `env` block overrides the process environment; --settings outranks it.
    assert config.args[0] == "--settings"
    settings = Path(config.args[1])
    assert json.loads(config.files[settings]) == {"env": config.env}


def test_claude_code_without_a_key_sends_the_placeholder_and_maps_the_small_model(tmp_path: Path) -> None:
    env = run_config("claude-code", WITH_SMALL, tmp_path).env
    assert env["ANTHROPIC_AUTH_TOKEN"] == NO_KEY_PLACEHOLDER
    assert "ANTHROPIC_API_KEY" not in env
    assert env["ANTHROPIC_MODEL"] == "qwen3-coder-30b"
    assert env["ANTHROPIC_DEFAULT_HAIKU_MODEL"] == env["ANTHROPIC_SMALL_FAST_MODEL"] == "qwen3-0.6b"


# ----- Codex ----------------------------------------------------------------------------------


def codex_overrides(config: RunConfig) -> dict[str, Any]:
    """The `-c key=value` pairs, each value parsed as TOML the way Codex parses it."""
    pairs = list(zip(config.args[::2], config.args[1::2], strict=True))
    assert all(flag == "-c" for flag, _ in pairs)
    document = tomllib.loads("\n".join(override for _, override in pairs))
    flat: dict[str, Any] = {}

    def walk(prefix: str, value: Any) -> None:
        if isinstance(value, dict):
            for key, inner in value.items():
                walk(f"{prefix}.{key}" if prefix else key, inner)
        else:
            flat[prefix] = value

    walk("", document)
    assert len(flat) == len(pairs), "a key was given twice"
    return flat


def test_codex_overrides_parse_as_toml_and_carry_the_server(tmp_path: Path) -> None:
    config = run_config("codex", KEYED, tmp_path)
    overrides = codex_overrides(config)
    catalog = tmp_path / "run" / codex.CATALOG_FILE
    assert overrides == {
        "model": "qwen3-coder-30b",
        "model_provider": "launcher",
        "model_catalog_json": str(catalog),
        "model_providers.launcher.name": "Launcher (local)",
        "model_providers.launcher.base_url": "http://127.0.0.1:8420/v1",
        "model_providers.launcher.wire_api": "responses",
        "model_providers.launcher.env_key": RUN_KEY_ENV,
        "model_context_window": 65536,
    }
    assert config.env == {RUN_KEY_ENV: "sk-local-123"}
    assert set(config.files) == {catalog}


def test_codex_without_a_key_names_the_variable_anyway_and_fills_it_with_the_placeholder(tmp_path: Path) -> None:
    config = run_config("codex", LOCAL, tmp_path)
    assert codex_overrides(config)["model_providers.launcher.env_key"] == RUN_KEY_ENV
    assert config.env == {RUN_KEY_ENV: NO_KEY_PLACEHOLDER}


def test_codex_catalog_lists_the_model_with_the_servers_window_and_codexs_own_prompt(tmp_path: Path) -> None:
    config = run_config("codex", LOCAL, tmp_path)
    (entry,) = json.loads(config.files[tmp_path / "run" / codex.CATALOG_FILE])["models"]
    assert entry["slug"] == "qwen3-coder-30b"
    # Both: Codex caps model_context_window at max_context_window (272,000 in its fallback metadata).
    assert entry["context_window"] == entry["max_context_window"] == 65536
    assert entry["base_instructions"] == codex.PROMPT_FILE.read_text(encoding="utf-8")
    assert entry["base_instructions"].startswith("You are a coding agent running in the Codex CLI")
    # The fields Codex 0.171.0 refuses a catalog entry without.
    for required in (
        "display_name",
        "supported_reasoning_levels",
        "shell_type",
        "visibility",
        "supported_in_api",
        "priority",
        "support_verbosity",
        "truncation_policy",
        "experimental_supported_tools",
    ):
        assert required in entry


def test_codex_catalog_claims_no_window_the_server_did_not_report(tmp_path: Path) -> None:
    config = run_config("codex", UNKNOWN_WINDOW, tmp_path)
    (entry,) = json.loads(config.files[tmp_path / "run" / codex.CATALOG_FILE])["models"]
    assert "context_window" not in entry and "max_context_window" not in entry
    assert "model_context_window" not in codex_overrides(config)


@pytest.mark.parametrize(
    "text", ["plain", "true", "1e3", 'quote " and \\ backslash', "line\nbreak", "emoji 😀", "del\x7f"]
)
def test_codex_string_values_stay_strings_through_toml(text: str) -> None:
    assert tomllib.loads(f"key = {codex.toml_value(text)}")["key"] == text


def test_codex_write_leaves_codexs_own_model_list_alone() -> None:
    # A catalog written for good would replace Codex's list of OpenAI models in every later session.
    (config_toml,) = get_agent("codex").setup_for(LOCAL).config_edits
    assert config_toml.relative_path == ".codex/config.toml"
    assert "model_catalog_json" not in config_toml.fragment
    assert config_toml.fragment["model_context_window"] == 65536


# ----- OpenCode -------------------------------------------------------------------------------


def opencode_content(config: RunConfig) -> dict[str, Any]:
    assert config.args == () and config.files == {}
    assert set(config.env) == {"OPENCODE_CONFIG_CONTENT"}
    content: dict[str, Any] = json.loads(config.env["OPENCODE_CONFIG_CONTENT"])
    return content


def test_opencode_gets_the_provider_and_limits_inline(tmp_path: Path) -> None:
    content = opencode_content(run_config("opencode", KEYED, tmp_path))
    provider = content["provider"]["launcher"]
    assert provider["options"] == {"baseURL": "http://127.0.0.1:8420/v1", "apiKey": "sk-local-123"}
    assert provider["models"]["qwen3-coder-30b"]["limit"] == {"context": 65536, "output": output_tokens_for(65536)}
    assert content["model"] == "launcher/qwen3-coder-30b"
    assert "small_model" not in content


def test_opencode_without_a_key_sends_the_placeholder_and_sets_the_small_model(tmp_path: Path) -> None:
    content = opencode_content(run_config("opencode", WITH_SMALL, tmp_path))
    assert content["provider"]["launcher"]["options"]["apiKey"] == NO_KEY_PLACEHOLDER
    assert content["small_model"] == "launcher/qwen3-0.6b"
    assert "qwen3-0.6b" in content["provider"]["launcher"]["models"]


def test_opencode_inline_config_is_the_written_one_but_for_the_key(tmp_path: Path) -> None:
    content = opencode_content(run_config("opencode", KEYED, tmp_path))
    (written,) = get_agent("opencode").setup_for(KEYED).config_edits
    assert content == written.fragment


# ----- Aider ----------------------------------------------------------------------------------


def test_aider_gets_the_server_in_env_and_the_model_and_its_window_as_arguments(tmp_path: Path) -> None:
    config = run_config("aider", KEYED, tmp_path)
    assert config.env == {
        "OPENAI_API_BASE": "http://127.0.0.1:8420/v1",
        "OPENAI_API_KEY": "sk-local-123",
        # Aider's own option names: they outrank an openai-api-base left in ~/.aider.conf.yml.
        "AIDER_OPENAI_API_BASE": "http://127.0.0.1:8420/v1",
        "AIDER_OPENAI_API_KEY": "sk-local-123",
    }
    metadata_file = tmp_path / "run" / "aider-model-metadata.json"
    assert config.args == ("--model", "openai/qwen3-coder-30b", "--model-metadata-file", str(metadata_file))
    metadata = json.loads(config.files[metadata_file])["openai/qwen3-coder-30b"]
    assert metadata["max_input_tokens"] == 65536
    assert metadata["max_output_tokens"] == output_tokens_for(65536)


def test_aider_weak_model_placeholder_and_unknown_window(tmp_path: Path) -> None:
    small = run_config("aider", WITH_SMALL, tmp_path)
    assert small.args[2:4] == ("--weak-model", "openai/qwen3-0.6b")
    assert small.env["OPENAI_API_KEY"] == small.env["AIDER_OPENAI_API_KEY"] == NO_KEY_PLACEHOLDER
    unknown = run_config("aider", UNKNOWN_WINDOW, tmp_path)
    assert unknown.args == ("--model", "openai/qwen3-coder-30b")
    assert unknown.files == {}
