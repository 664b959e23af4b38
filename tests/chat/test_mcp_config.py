"""mcp.json: the shared `mcpServers` format read and written, secrets kept in the keyring (or a 0600 file
where there is none), other apps' files imported.

Keys go to the test keyring (a file standing in for the OS's: tests never touch a real user's keyring),
or to keyring's own "no backend" for the headless case, as in tests/server/test_remote_registry.py.
"""

from __future__ import annotations

import json
import os
import stat
from pathlib import Path

import keyring
import pytest
from keyring.backends.fail import Keyring as NoKeyring

from launcher.chat.mcp_config import (
    KEYRING_SERVICE,
    SECRET_PLACEHOLDER,
    ImportSource,
    McpServer,
    import_sources,
    load,
    looks_secret,
    mcp_file,
    merge,
    read_foreign,
    resolve_secrets,
    save,
    secrets_file,
)
from launcher.core import paths
from launcher.core.errors import ConfigError
from tests.server import keyring_backend


@pytest.fixture(autouse=True)
def test_keyring(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(keyring_backend.FILE_ENV, str(tmp_path / "keyring.json"))
    monkeypatch.setattr(keyring.core, "_keyring_backend", keyring_backend.FileKeyring())


def stdio(name: str = "files", **fields: object) -> McpServer:
    return McpServer.model_validate({"name": name, "command": "npx", "args": ["-y", "server", "/tmp"], **fields})


def test_the_file_is_in_the_data_folder_and_a_missing_one_is_no_servers() -> None:
    assert mcp_file() == paths.data_dir() / "mcp.json"
    assert load() == {}


def test_servers_round_trip_in_the_shared_format(tmp_path: Path) -> None:
    servers = {
        "files": stdio(env={"DEBUG": "1"}, cwd="/srv"),
        "remote": McpServer(name="remote", url="https://example.com/mcp", headers={"X-Trace": "on"}, timeout_s=5),
        "old": McpServer(name="old", url="https://example.com/sse", sse=True, enabled=False),
    }
    path = save(servers)
    assert path == mcp_file()
    assert json.loads(path.read_text()) == {
        "mcpServers": {
            "files": {"command": "npx", "args": ["-y", "server", "/tmp"], "env": {"DEBUG": "1"}, "cwd": "/srv"},
            "remote": {"url": "https://example.com/mcp", "headers": {"X-Trace": "on"}, "timeout": 5.0},
            "old": {"url": "https://example.com/sse", "type": "sse", "disabled": True},
        }
    }
    loaded = load()
    assert list(loaded) == ["files", "remote", "old"]
    assert loaded == servers
    assert [s.transport for s in loaded.values()] == ["stdio", "http", "sse"]
    assert [s.enabled for s in loaded.values()] == [True, True, False]


def test_keys_this_app_does_not_know_are_kept(tmp_path: Path) -> None:
    path = tmp_path / "mcp.json"
    path.write_text(
        json.dumps(
            {
                "mcpServers": {"files": {"command": "npx", "autoApprove": ["read_file"], "alwaysAllow": []}},
                "globalShortcut": "Ctrl+Space",
            }
        )
    )
    servers = load(path)
    servers["files"] = servers["files"].model_copy(update={"enabled": False})
    save(servers, path)
    data = json.loads(path.read_text())
    assert data["globalShortcut"] == "Ctrl+Space"
    assert data["mcpServers"]["files"] == {
        "autoApprove": ["read_file"],
        "alwaysAllow": [],
        "command": "npx",
        "args": [],
        "disabled": True,
    }


def test_secret_values_go_to_the_keyring_and_the_file_holds_a_placeholder(tmp_path: Path) -> None:
    path = tmp_path / "mcp.json"
    github = stdio("github", env={"GITHUB_TOKEN": "ghp_secret", "LOG_LEVEL": "debug"})
    remote = McpServer(name="remote", url="https://x.example/mcp", headers={"Authorization": "Bearer abc"})
    save({"github": github, "remote": remote}, path)

    text = path.read_text()
    assert "ghp_secret" not in text and "Bearer abc" not in text
    entries = json.loads(text)["mcpServers"]
    assert entries["github"]["env"] == {"GITHUB_TOKEN": SECRET_PLACEHOLDER, "LOG_LEVEL": "debug"}
    assert entries["remote"]["headers"] == {"Authorization": SECRET_PLACEHOLDER}
    assert keyring.get_password(KEYRING_SERVICE, "github/env/GITHUB_TOKEN") == "ghp_secret"
    assert keyring.get_password(KEYRING_SERVICE, "remote/header/Authorization") == "Bearer abc"
    assert not secrets_file().exists()  # a keyring took them

    loaded = load(path)
    assert loaded["github"].env["GITHUB_TOKEN"] == SECRET_PLACEHOLDER
    assert resolve_secrets(loaded["github"]).env == {"GITHUB_TOKEN": "ghp_secret", "LOG_LEVEL": "debug"}
    assert resolve_secrets(loaded["remote"]).headers == {"Authorization": "Bearer abc"}

    save(loaded, path)  # saving again keeps them, with nothing to re-enter
    assert resolve_secrets(load(path)["github"]).env["GITHUB_TOKEN"] == "ghp_secret"

    del loaded["github"]  # a removed server's secret leaves the keyring too
    save(loaded, path)
    assert keyring.get_password(KEYRING_SERVICE, "github/env/GITHUB_TOKEN") is None
    assert keyring.get_password(KEYRING_SERVICE, "remote/header/Authorization") == "Bearer abc"


def test_which_names_are_secret() -> None:
    for name in ("GITHUB_TOKEN", "OPENAI_API_KEY", "DB_PASSWORD", "Authorization", "X-Api-Key", "AWS_SECRET", "PASS"):
        assert looks_secret(name), name
    for name in ("DEBUG", "LOG_LEVEL", "PATH", "X-Trace", "ROOT_DIR"):
        assert not looks_secret(name), name


def test_without_a_keyring_secrets_are_kept_in_a_file_only_this_user_can_read(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(keyring.core, "_keyring_backend", NoKeyring())
    path = tmp_path / "mcp.json"
    save({"github": stdio("github", env={"GITHUB_TOKEN": "ghp_secret"})}, path)
    assert "ghp_secret" not in path.read_text()
    assert secrets_file().exists()
    if os.name != "nt":
        assert stat.S_IMODE(secrets_file().stat().st_mode) == 0o600
    assert resolve_secrets(load(path)["github"]).env == {"GITHUB_TOKEN": "ghp_secret"}


def test_a_secret_missing_from_the_keyring_says_which_and_what_to_do(tmp_path: Path) -> None:
    path = tmp_path / "mcp.json"
    path.write_text(json.dumps({"mcpServers": {"github": {"command": "x", "env": {"GITHUB_TOKEN": "keyring:"}}}}))
    with pytest.raises(ConfigError, match=r"github.*env GITHUB_TOKEN.*Enter it again in Settings"):
        resolve_secrets(load(path)["github"])


@pytest.mark.parametrize(
    ("content", "problem"),
    [
        ("{not json", r"is not valid JSON"),
        ("[]", r'must hold a JSON object with "mcpServers"'),
        ('{"mcpServers": []}', r'"mcpServers" must be an object'),
        ('{"mcpServers": {"both": {"command": "x", "url": "http://h/mcp"}}}', r"'both'.*either a command.*or a url"),
        ('{"mcpServers": {"none": {"args": ["x"]}}}', r"'none'.*either a command"),
        ('{"mcpServers": {"bad": {"url": "ftp://h"}}}', r"'bad'.*http:// or https://"),
        ('{"mcpServers": {"ws": {"url": "http://h", "type": "websocket"}}}', r"'ws' has type 'websocket'"),
        ('{"mcpServers": {"args": {"command": "x", "args": "-y"}}}', r"'args'.*args: Input should be a valid list"),
        ('{"mcpServers": {"t": {"command": "x", "timeout": 0}}}', r"'t'.*timeout_s"),
    ],
)
def test_a_broken_file_names_itself_and_the_problem(tmp_path: Path, content: str, problem: str) -> None:
    path = tmp_path / "mcp.json"
    path.write_text(content)
    with pytest.raises(ConfigError, match=problem) as caught:
        load(path)
    assert str(path) in str(caught.value)


def test_a_name_must_match_its_entry() -> None:
    with pytest.raises(ConfigError, match="listed under another name"):
        save({"a": stdio("b")})


CLAUDE_DESKTOP = {
    "mcpServers": {
        "filesystem": {
            "command": "npx",
            "args": ["-y", "@modelcontextprotocol/server-filesystem", "/Users/me/Desktop"],
        },
        "github": {
            "command": "docker",
            "args": ["run", "-i", "ghcr.io/github/github-mcp-server"],
            "env": {"GITHUB_PERSONAL_ACCESS_TOKEN": "ghp_x"},
        },
    },
    "globalShortcut": "",
}
CURSOR = {
    "mcpServers": {
        "remote": {"url": "https://mcp.example.com/mcp", "headers": {"API_KEY": "k"}},
        "legacy": {"url": "https://mcp.example.com/sse", "transport": "sse"},
        "typed": {"type": "streamable-http", "url": "https://mcp.example.com/v2"},
        "filesystem": {"command": "node", "args": ["fs.js"]},
    }
}


def test_other_apps_files_are_read_with_their_transports(tmp_path: Path) -> None:
    claude = tmp_path / "claude_desktop_config.json"
    claude.write_text(json.dumps(CLAUDE_DESKTOP))
    servers = read_foreign(claude)
    assert list(servers) == ["filesystem", "github"]
    assert servers["github"].env == {"GITHUB_PERSONAL_ACCESS_TOKEN": "ghp_x"}  # as the file has it
    cursor = tmp_path / "mcp.json"
    cursor.write_text(json.dumps(CURSOR))
    remote = read_foreign(cursor)
    assert {name: s.transport for name, s in remote.items()} == {
        "remote": "http",
        "legacy": "sse",
        "typed": "http",
        "filesystem": "stdio",
    }
    assert remote["remote"].headers == {"API_KEY": "k"}


def test_an_import_adds_new_names_only_and_moves_its_secrets_to_the_keyring(tmp_path: Path) -> None:
    claude = tmp_path / "claude_desktop_config.json"
    claude.write_text(json.dumps(CLAUDE_DESKTOP))
    cursor = tmp_path / "cursor.json"
    cursor.write_text(json.dumps(CURSOR))
    mine = {"filesystem": stdio("filesystem")}
    merged, added, skipped = merge(mine, read_foreign(claude))
    assert (added, skipped) == (["github"], ["filesystem"])
    assert merged["filesystem"] == mine["filesystem"]  # the user's own entry wins
    merged, added, skipped = merge(merged, read_foreign(cursor))
    assert (added, skipped) == (["remote", "legacy", "typed"], ["filesystem"])
    save(merged)
    assert "ghp_x" not in mcp_file().read_text()
    assert resolve_secrets(load()["github"]).env == {"GITHUB_PERSONAL_ACCESS_TOKEN": "ghp_x"}


def test_import_sources_are_the_files_that_exist(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    home = tmp_path / "user"
    monkeypatch.setenv("HOME", str(home))
    monkeypatch.setenv("USERPROFILE", str(home))
    monkeypatch.setenv("APPDATA", str(home / "AppData" / "Roaming"))
    assert import_sources() == []
    files = {
        "Claude Desktop": home / ".config" / "Claude" / "claude_desktop_config.json",
        "Cursor": home / ".cursor" / "mcp.json",
        "LM Studio": home / ".lmstudio" / "mcp.json",
    }
    for path in files.values():
        path.parent.mkdir(parents=True)
        path.write_text('{"mcpServers": {}}')
    assert import_sources() == [ImportSource(label, path) for label, path in files.items()]
    windows = home / "AppData" / "Roaming" / "Claude" / "claude_desktop_config.json"
    windows.parent.mkdir(parents=True)
    windows.write_text("{}")
    assert [source.path for source in import_sources()][:2] == [windows, files["Claude Desktop"]]
