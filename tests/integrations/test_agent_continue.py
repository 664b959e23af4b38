"""Continue's `cn` run: a run-only config given with --config, the key in the environment only."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml

from launcher.integrations import Endpoint, get_agent
from launcher.integrations.agents import continue_dev
from launcher.integrations.endpoint import NO_KEY_PLACEHOLDER
from launcher.integrations.setup import output_tokens_for

KEYED = Endpoint("http://127.0.0.1:8420", "sk-local-123", "qwen3-coder-30b", 65536)
NO_KEY = Endpoint("http://127.0.0.1:8420/v1", None, "qwen3-coder-30b", None)


def _run_entry(endpoint: Endpoint, run_dir: Path) -> dict[str, Any]:
    """The one models[] entry of the run's config file."""
    run = get_agent("continue").run_config_for(endpoint, run_dir)
    ((_, text),) = run.files.items()
    document = yaml.safe_load(text)
    assert {"name", "version", "schema"} <= document.keys()  # required by Continue's config schema
    (entry,) = document["models"]
    assert isinstance(entry, dict)
    return entry


def test_the_agent_names_its_cli_and_where_it_installs_from() -> None:
    agent = get_agent("continue")
    assert agent.binary == "cn"
    assert agent.install is not None
    assert agent.install.command == "npm install -g @continuedev/cli"
    assert agent.run_config is not None


def test_a_run_points_cn_at_a_config_file_inside_the_run_folder(tmp_path: Path) -> None:
    run = get_agent("continue").run_config_for(KEYED, tmp_path / "run")
    ((path, _),) = run.files.items()
    assert path.parent == tmp_path / "run"
    assert path.suffix == ".yaml"  # cn takes a --config value with .yaml in it as a file, not a Hub slug
    assert run.args == ("--config", str(path))
    assert not (tmp_path / "run").exists()  # launch writes the files; building the run writes nothing


def test_the_run_config_holds_the_servers_model_window_and_output_budget(tmp_path: Path) -> None:
    entry = _run_entry(KEYED, tmp_path)
    assert entry["provider"] == "openai"
    assert entry["apiBase"] == "http://127.0.0.1:8420/v1"
    assert entry["model"] == "qwen3-coder-30b"
    assert "chat" in entry["roles"]  # cn only picks models with the chat role
    assert entry["defaultCompletionOptions"] == {
        "contextLength": 65536,
        "maxTokens": output_tokens_for(65536),
    }


def test_the_key_travels_in_the_environment_not_in_the_file(tmp_path: Path) -> None:
    run = get_agent("continue").run_config_for(KEYED, tmp_path)
    ((_, text),) = run.files.items()
    assert "sk-local-123" not in text
    (entry,) = yaml.safe_load(text)["models"]
    assert entry["apiKey"] == "${{ secrets.LAUNCHER_AGENT_API_KEY }}"  # cn looks in its environment first
    assert run.env == {continue_dev.RUN_KEY_VARIABLE: "sk-local-123"}


def test_without_a_key_the_run_gets_the_placeholder(tmp_path: Path) -> None:
    # cn resolves a secret it cannot find in the environment by asking Continue's Hub: always set it.
    run = get_agent("continue").run_config_for(NO_KEY, tmp_path)
    assert run.env == {continue_dev.RUN_KEY_VARIABLE: NO_KEY_PLACEHOLDER}


def test_an_unknown_window_leaves_cn_its_own_defaults(tmp_path: Path) -> None:
    assert "defaultCompletionOptions" not in _run_entry(NO_KEY, tmp_path)


def test_the_run_uses_the_same_model_entry_as_the_written_config(tmp_path: Path) -> None:
    # `launcher connect continue --write` and `launcher launch continue` must configure the same model.
    written = yaml.safe_load(get_agent("continue").setup_for(KEYED).config_edits[0].fragment_text())
    (saved,) = written["models"]
    assert {**saved, "apiKey": None} == {**_run_entry(KEYED, tmp_path), "apiKey": None}
    assert saved["apiKey"] == "sk-local-123"
