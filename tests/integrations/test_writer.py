"""The config writer keeps the user's settings, backs up the old file and replaces it atomically."""

from __future__ import annotations

import errno
import json
import tomllib
from datetime import datetime
from pathlib import Path

import pytest
import yaml

from launcher.core.errors import ConfigError
from launcher.integrations import Endpoint, apply_edit, get_agent, plan_edit
from launcher.integrations.setup import ConfigEdit
from launcher.integrations.writer import backup_path_for

ENDPOINT = Endpoint("http://127.0.0.1:8420/v1", "sk-local", "qwen3-coder", 65536)
NOON = datetime(2026, 11, 29, 12, 0, 0)


def edit_for(agent_id: str, path: str | None = None) -> ConfigEdit:
    edits = get_agent(agent_id).setup_for(ENDPOINT).config_edits
    return next(edit for edit in edits if path is None or edit.relative_path == path)


def backups(path: Path) -> list[Path]:
    return sorted(path.parent.glob(f"{path.name}.*.bak"))


def test_creates_missing_file_and_folders_without_backup(tmp_path: Path) -> None:
    result = apply_edit(edit_for("codex"), home=tmp_path)
    path = tmp_path / ".codex" / "config.toml"
    assert result.written and result.path == path and result.backup is None
    assert tomllib.loads(path.read_text())["model_provider"] == "launcher"
    assert str(result) == f"created {path}"


def test_codex_merge_keeps_user_settings_and_backs_up_old_file(tmp_path: Path) -> None:
    path = tmp_path / ".codex" / "config.toml"
    path.parent.mkdir()
    old = (
        'model = "gpt-5"\napproval_policy = "on-request"\n\n'
        '[model_providers.ollama]\nname = "Ollama"\nbase_url = "http://localhost:11434/v1"\n\n'
        '[mcp_servers.docs]\ncommand = "docs-mcp"\n'
    )
    path.write_text(old)
    result = apply_edit(edit_for("codex"), home=tmp_path, now=NOON)

    merged = tomllib.loads(path.read_text())
    assert merged["approval_policy"] == "on-request"
    assert merged["model_providers"]["ollama"]["base_url"] == "http://localhost:11434/v1"
    assert merged["mcp_servers"]["docs"]["command"] == "docs-mcp"
    assert merged["model"] == "qwen3-coder"  # ours wins where both set it
    assert merged["model_providers"]["launcher"]["wire_api"] == "responses"
    assert result.backup == path.with_name("config.toml.20261129-120000.bak")
    assert result.backup.read_text() == old
    assert backups(path) == [result.backup]


def test_opencode_merge_keeps_other_providers(tmp_path: Path) -> None:
    path = tmp_path / ".config" / "opencode" / "opencode.json"
    path.parent.mkdir(parents=True)
    old = {"theme": "tokyonight", "provider": {"ollama": {"npm": "@ai-sdk/openai-compatible", "models": {"a": {}}}}}
    path.write_text(json.dumps(old))
    apply_edit(edit_for("opencode"), home=tmp_path)
    merged = json.loads(path.read_text())
    assert merged["theme"] == "tokyonight"
    assert merged["provider"]["ollama"] == old["provider"]["ollama"]
    assert merged["provider"]["launcher"]["options"]["baseURL"] == "http://127.0.0.1:8420/v1"
    assert merged["$schema"] == "https://opencode.ai/config.json"  # a default: filled in only where missing
    assert merged["model"] == "launcher/qwen3-coder"


def test_continue_replaces_its_own_entry_and_keeps_others(tmp_path: Path) -> None:
    path = tmp_path / ".continue" / "config.yaml"
    path.parent.mkdir()
    user_model = {"name": "GPT-4o", "provider": "openai", "model": "gpt-4o"}
    path.write_text(yaml.safe_dump({"name": "Mine", "version": "0.0.1", "schema": "v1", "models": [user_model]}))
    apply_edit(edit_for("continue"), home=tmp_path)
    # A second write (say, after the context changed) must not append a duplicate entry.
    bigger = Endpoint("http://127.0.0.1:8420/v1", "sk-local", "qwen3-coder", 131072)
    apply_edit(get_agent("continue").setup_for(bigger).config_edits[0], home=tmp_path)

    document = yaml.safe_load(path.read_text())
    assert document["name"] == "Mine" and document["version"] == "0.0.1"
    assert document["models"][0] == user_model
    assert [m["name"] for m in document["models"]] == ["GPT-4o", "Launcher: qwen3-coder"]
    assert document["models"][1]["defaultCompletionOptions"]["contextLength"] == 131072


def test_claude_settings_keep_permissions_and_other_env(tmp_path: Path) -> None:
    path = tmp_path / ".claude" / "settings.json"
    path.parent.mkdir()
    path.write_text(json.dumps({"permissions": {"allow": ["Bash(ls:*)"]}, "env": {"FOO": "1"}}))
    apply_edit(edit_for("claude-code"), home=tmp_path)
    merged = json.loads(path.read_text())
    assert merged["permissions"] == {"allow": ["Bash(ls:*)"]}
    assert merged["env"]["FOO"] == "1"
    assert merged["env"]["ANTHROPIC_BASE_URL"] == "http://127.0.0.1:8420"


def test_dry_run_returns_the_diff_and_writes_nothing(tmp_path: Path) -> None:
    path = tmp_path / ".aider.model.metadata.json"
    path.write_text('{"openai/other": {"max_input_tokens": 4096}}\n')
    before = path.read_text()
    result = apply_edit(edit_for("aider", ".aider.model.metadata.json"), home=tmp_path, dry_run=True)
    assert not result.written and result.backup is None
    assert path.read_text() == before and backups(path) == []
    assert '+  "openai/qwen3-coder": {' in result.diff
    assert '"openai/other"' in result.diff  # context lines: the user's entry stays


def test_rewriting_identical_content_changes_nothing(tmp_path: Path) -> None:
    apply_edit(edit_for("opencode"), home=tmp_path)
    again = apply_edit(edit_for("opencode"), home=tmp_path)
    assert not again.written and again.diff == ""
    assert backups(again.path) == []
    assert plan_edit(edit_for("opencode"), home=tmp_path).changed is False


def test_unparseable_file_is_left_alone(tmp_path: Path) -> None:
    path = tmp_path / ".codex" / "config.toml"
    path.parent.mkdir()
    path.write_text("model = [unclosed\n")
    with pytest.raises(ConfigError, match=r"config\.toml is not valid TOML.*Nothing was changed"):
        apply_edit(edit_for("codex"), home=tmp_path)
    assert path.read_text() == "model = [unclosed\n"
    assert backups(path) == []


def test_top_level_list_is_refused(tmp_path: Path) -> None:
    path = tmp_path / ".claude" / "settings.json"
    path.parent.mkdir()
    path.write_text("[1, 2]")
    with pytest.raises(ConfigError, match="top level"):
        plan_edit(edit_for("claude-code"), home=tmp_path)


def test_replace_is_atomic_and_keeps_permissions(tmp_path: Path) -> None:
    path = tmp_path / ".claude" / "settings.json"
    path.parent.mkdir()
    path.write_text("{}")
    path.chmod(0o600)
    inode_before = path.stat().st_ino
    apply_edit(edit_for("claude-code"), home=tmp_path)
    # os.replace swaps in a new inode: readers see the old file or the new one, never a partial write.
    assert path.stat().st_ino != inode_before
    assert path.stat().st_mode & 0o777 == 0o600
    leftovers = [p.name for p in path.parent.iterdir() if p.name.endswith(".tmp")]
    assert leftovers == []


def test_failed_write_leaves_the_old_file_and_no_temp(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    path = tmp_path / ".claude" / "settings.json"
    path.parent.mkdir()
    path.write_text('{"keep": true}')

    def disk_full(src: str, dst: str) -> None:  # the fault a full disk gives at the last step
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr("launcher.integrations.writer.os.replace", disk_full)
    with pytest.raises(ConfigError, match=r"cannot write .*No space left on device.*old file is unchanged"):
        apply_edit(edit_for("claude-code"), home=tmp_path)
    assert json.loads(path.read_text()) == {"keep": True}
    assert [p.name for p in path.parent.iterdir() if p.name.endswith(".tmp")] == []


def test_backup_names_never_collide(tmp_path: Path) -> None:
    path = tmp_path / "config.toml"
    first = backup_path_for(path, NOON)
    first.write_text("x")
    assert backup_path_for(path, NOON).name == "config.toml.20261129-120000-1.bak"


def test_continue_refuses_to_hide_an_existing_config_json(tmp_path: Path) -> None:
    # Continue loads config.yaml *instead of* config.json: creating it would drop the user's settings.
    legacy = tmp_path / ".continue" / "config.json"
    legacy.parent.mkdir()
    legacy.write_text('{"models": []}')
    with pytest.raises(ConfigError, match=r"config\.json exists .*yaml-migration.*Nothing was changed"):
        apply_edit(edit_for("continue"), home=tmp_path)
    assert not (tmp_path / ".continue" / "config.yaml").exists()
    # Once the user has migrated (config.yaml exists), the writer merges into it as usual.
    (tmp_path / ".continue" / "config.yaml").write_text("name: Mine\nversion: 1.0.0\nschema: v1\n")
    assert apply_edit(edit_for("continue"), home=tmp_path).written
