"""Cline: the CLI's providers.json for `--write`, a sandboxed run for `launch`, the panel fields kept."""

from __future__ import annotations

import json
from datetime import datetime
from pathlib import Path
from typing import Any

from launcher.integrations import Endpoint, get_agent
from launcher.integrations.agents import cline
from launcher.integrations.endpoint import NO_KEY_PLACEHOLDER
from launcher.integrations.setup import output_tokens_for
from launcher.integrations.writer import apply_edit

KEYED = Endpoint("http://127.0.0.1:8420", "sk-local-123", "qwen3-coder-30b", 65536)
NO_KEY = Endpoint("http://127.0.0.1:8420/v1", None, "qwen3-coder-30b", None)


def _entry(document: dict[str, Any]) -> dict[str, Any]:
    """Our provider entry, checked for the keys Cline's schema requires of every entry."""
    assert document["version"] == 1
    assert document["lastUsedProvider"] == "openai-compatible"  # the provider a run uses by default
    entry = document["providers"]["openai-compatible"]
    assert isinstance(entry, dict)
    # Without a UTC `updatedAt` Cline rejects the whole file and replaces it with its defaults.
    assert entry["updatedAt"].endswith("Z")
    datetime.fromisoformat(entry["updatedAt"])
    assert entry["tokenSource"] == "manual"
    return entry


def test_the_agent_names_its_cli_and_where_it_installs_from() -> None:
    agent = get_agent("cline")
    assert agent.binary == "cline"
    assert agent.install is not None
    assert agent.install.command == "npm install -g cline"
    assert agent.run_config is not None
    assert agent.config_file == ".cline/data/settings/providers.json"


def test_write_gives_the_cli_an_openai_compatible_provider_with_the_servers_window() -> None:
    setup = get_agent("cline").setup_for(KEYED)
    (edit,) = setup.config_edits
    assert edit.relative_path == ".cline/data/settings/providers.json"
    assert edit.format == "json"
    settings = _entry(edit.fragment)["settings"]
    assert settings == {
        "provider": "openai-compatible",
        "apiKey": "sk-local-123",
        "model": "qwen3-coder-30b",
        "baseUrl": "http://127.0.0.1:8420/v1",
        "contextWindow": 65536,
        "maxTokens": output_tokens_for(65536),
    }
    assert setup.command == "cline"


def test_without_a_key_or_a_known_window_the_entry_has_a_placeholder_and_no_limits() -> None:
    (edit,) = get_agent("cline").setup_for(NO_KEY).config_edits
    settings = _entry(edit.fragment)["settings"]
    assert settings["apiKey"] == NO_KEY_PLACEHOLDER
    assert "contextWindow" not in settings and "maxTokens" not in settings


def test_the_vs_code_panel_fields_are_still_given() -> None:
    setup = get_agent("cline").setup_for(KEYED)
    fields = {field.label: field.value for field in setup.fields}
    assert fields["API Provider"] == "OpenAI Compatible"
    assert fields["Base URL"] == "http://127.0.0.1:8420/v1"
    assert fields["Model ID"] == "qwen3-coder-30b"
    assert fields["Context Window Size"] == "65536"
    assert next(f for f in setup.fields if f.label == "API Key").secret


def test_write_keeps_the_users_other_providers_and_settings(tmp_path: Path) -> None:
    path = tmp_path / ".cline" / "data" / "settings" / "providers.json"
    path.parent.mkdir(parents=True)
    stamp = "2026-01-01T00:00:00.000Z"
    anthropic = {"settings": {"provider": "anthropic", "apiKey": "sk-ant"}, "updatedAt": stamp}
    theirs: dict[str, Any] = {
        "version": 1,
        "lastUsedProvider": "anthropic",
        "modes": {},
        "providers": {
            "anthropic": anthropic,
            "openai-compatible": {
                "settings": {"provider": "openai-compatible", "headers": {"X-Team": "a"}, "model": "old"},
                "updatedAt": stamp,
                "tokenSource": "manual",
            },
        },
    }
    path.write_text(json.dumps(theirs))
    (edit,) = get_agent("cline").setup_for(KEYED).config_edits
    apply_edit(edit, home=tmp_path)
    document = json.loads(path.read_text())
    assert document["providers"]["anthropic"] == anthropic
    settings = _entry(document)["settings"]
    assert settings["headers"] == {"X-Team": "a"}
    assert settings["model"] == "qwen3-coder-30b"
    assert document["modes"] == {}


def test_a_run_keeps_all_of_clines_state_in_the_run_folder(tmp_path: Path) -> None:
    run_dir = tmp_path / "run"
    run = get_agent("cline").run_config_for(KEYED, run_dir)
    data_dir = run_dir / cline.RUN_DATA_DIR
    # Sandbox mode: providers.json, sessions, logs and databases in one folder, and the local
    # backend, so no hub daemon outlives the run; no detached self-update when it exits.
    assert run.env == {
        "CLINE_SANDBOX": "1",
        "CLINE_SANDBOX_DATA_DIR": str(data_dir),
        "CLINE_NO_AUTO_UPDATE": "1",
    }
    assert run.args == ()  # the user's own arguments (a prompt, --tui, subcommands) stay as they are
    ((path, text),) = run.files.items()
    assert path == data_dir / "settings" / "providers.json"  # where sandbox mode reads it
    assert path.is_relative_to(run_dir)
    settings = _entry(json.loads(text))["settings"]
    assert settings["baseUrl"] == "http://127.0.0.1:8420/v1"
    assert settings["apiKey"] == "sk-local-123"
    assert settings["model"] == "qwen3-coder-30b"
    assert settings["contextWindow"] == 65536
    assert settings["maxTokens"] == output_tokens_for(65536)
    assert not run_dir.exists(), "run_config only describes files; launch writes them"


def test_a_run_without_a_key_sends_the_placeholder(tmp_path: Path) -> None:
    run = get_agent("cline").run_config_for(NO_KEY, tmp_path / "run")
    ((_, text),) = run.files.items()
    settings = _entry(json.loads(text))["settings"]
    assert settings["apiKey"] == NO_KEY_PLACEHOLDER
    assert "contextWindow" not in settings
