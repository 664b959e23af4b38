"""The MCP servers the Chat page may use: `mcp.json` in the app's data folder, in the shared `mcpServers` format.

The format is the one Claude Desktop, Cursor, LM Studio and Cline write, so a user's existing file
imports as it is and an entry copied from a server's README works:

    {"mcpServers": {
        "files": {"command": "npx", "args": ["-y", "@modelcontextprotocol/server-filesystem", "/tmp"],
                  "env": {"DEBUG": "1"}},
        "remote": {"url": "https://example.com/mcp", "headers": {"Authorization": "keyring:"}},
        "old": {"url": "https://example.com/sse", "type": "sse", "disabled": true}}}

A stdio server has `command` (+ `args`, `env`, `cwd`); a remote one has `url` (+ `headers`), spoken
to over Streamable HTTP, or over the older HTTP+SSE transport when `type` (or `transport`) says
"sse". `"disabled": true` turns a server off, as Cline writes it; `"timeout"` is the seconds one
tool call may take (Cline's key too). Keys this app does not know are kept as they were.

Secrets stay out of the file: an env value or header whose name looks secret (TOKEN, KEY, SECRET,
PASS, AUTH, CREDENTIAL: `API_KEY`, `Authorization`) goes to the OS keyring (service "launcher-mcp",
name "<server>/env/<NAME>" or "<server>/header/<NAME>"), or where no keyring works into a 0600 file
next to the remotes' key file (`core/secrets.py`), and the file holds the placeholder "keyring:".
`resolve_secrets` puts them back when a server starts.
"""

from __future__ import annotations

import json
import os
import re
import tempfile
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, Field, ValidationError, model_validator

from launcher.core import paths
from launcher.core.errors import ConfigError, in_context
from launcher.core.secrets import delete_secret, find_secret, store_secret

KEYRING_SERVICE = "launcher-mcp"
SECRET_PLACEHOLDER = "keyring:"
SECRETS_FILE_NAME = "mcp-keys.toml"
DEFAULT_TIMEOUT_S = 60.0
_SECRET_WORDS = re.compile(r"TOKEN|KEY|SECRET|PASS|AUTH|CREDENTIAL", re.IGNORECASE)
_KNOWN_KEYS = frozenset(
    {"command", "args", "env", "cwd", "url", "headers", "disabled", "enabled", "timeout", "type", "transport"}
)
_SSE_TYPES = frozenset({"sse"})
_HTTP_TYPES = frozenset({"streamable-http", "streamable_http", "streamablehttp", "http"})

Transport = Literal["stdio", "http", "sse"]


class McpServer(BaseModel):
    """One server's entry. Exactly one of `command` (a stdio server) and `url` (a remote one)."""

    name: str = Field(min_length=1)
    command: str | None = None
    args: list[str] = Field(default_factory=list)
    env: dict[str, str] = Field(default_factory=dict)
    cwd: str | None = None
    url: str | None = None
    headers: dict[str, str] = Field(default_factory=dict)
    enabled: bool = True
    timeout_s: float = Field(default=DEFAULT_TIMEOUT_S, gt=0)
    sse: bool = False  # a URL server that speaks the older HTTP+SSE transport, not Streamable HTTP
    extra: dict[str, Any] = Field(default_factory=dict)  # keys of the entry this app does not know, kept on save

    @model_validator(mode="after")
    def _one_kind(self) -> McpServer:
        if (self.command is None) == (self.url is None):
            raise ValueError("it needs either a command (a stdio server) or a url (a remote server), not both")
        if self.command is not None and not self.command.strip():
            raise ValueError("its command is empty")
        if self.url is not None and not re.match(r"^https?://[^/\s]+", self.url):
            raise ValueError(f"its url {self.url!r} must start with http:// or https:// and name a host")
        return self

    @property
    def transport(self) -> Transport:
        """How the app talks to it: "stdio" (a child process), "http" (Streamable HTTP) or "sse"."""
        if self.command is not None:
            return "stdio"
        return "sse" if self.sse else "http"

    def secret_names(self) -> list[tuple[str, str]]:
        """The (place, NAME) pairs, place "env" or "header", whose values belong in the keyring."""
        return [("env", key) for key in self.env if looks_secret(key)] + [
            ("header", key) for key in self.headers if looks_secret(key)
        ]


def looks_secret(name: str) -> bool:
    """Whether an env variable or header of this name holds a secret (`GITHUB_TOKEN`, `Authorization`)."""
    return bool(_SECRET_WORDS.search(name))


def mcp_file() -> Path:
    """The app's own server list."""
    return paths.data_dir() / "mcp.json"


def secrets_file() -> Path:
    """Where secrets go on a machine without a usable keyring (0600, beside the remotes' key file)."""
    return paths.config_dir() / SECRETS_FILE_NAME


def secret_name(server: str, place: str, key: str) -> str:
    """The keyring's user name for one secret: `<server>/<env|header>/<NAME>`."""
    return f"{server}/{place}/{key}"


# -- reading and writing the file ------------------------------------------------------------------


def load(path: Path | None = None) -> dict[str, McpServer]:
    """The servers in `path` (default `mcp_file()`) by name, in file order; {} when there is no file.
    A ConfigError naming the file and the problem when it is broken."""
    path = path or mcp_file()
    if not path.exists():
        return {}
    return _servers_of(_read_json(path), path)


def read_foreign(path: Path) -> dict[str, McpServer]:
    """The servers of another app's file (Claude Desktop, Cursor, LM Studio, Cline: the same format).
    Values are as that file has them: `merge` then `save` moves their secrets into the keyring."""
    return _servers_of(_read_json(path), path)


def save(servers: Mapping[str, McpServer], path: Path | None = None) -> Path:
    """Write the servers atomically (a crash never leaves half a file), secrets to the keyring.

    The file's other top-level keys stay. A secret given as a value is stored and replaced by the
    placeholder; one the file no longer names (a removed server or variable) is deleted from the
    keyring. Returns the file."""
    path = path or mcp_file()
    before = _read_json(path) if path.exists() else {}
    previous = _servers_of(before, path) if before else {}
    entries: dict[str, Any] = {}
    for name, server in servers.items():
        if name != server.name:
            raise ConfigError(f"MCP server {server.name!r} is listed under another name ({name!r}).")
        entries[name] = _entry_of(_stored_secrets(server))
    kept = {secret_name(s.name, place, key) for s in servers.values() for place, key in s.secret_names()}
    for old in previous.values():
        for place, key in old.secret_names():
            if secret_name(old.name, place, key) not in kept:
                delete_secret(KEYRING_SERVICE, secret_name(old.name, place, key), secrets_file())
    data = {**before, "mcpServers": entries}
    _write_json(path, data)
    return path


def resolve_secrets(server: McpServer) -> McpServer:
    """The server with its placeholders replaced by the stored secrets, for starting it. A ConfigError
    saying which secret is missing (and what to do) when neither the keyring nor the file has it."""
    env = dict(server.env)
    headers = dict(server.headers)
    for place, values in (("env", env), ("header", headers)):
        for key, value in values.items():
            if value != SECRET_PLACEHOLDER:
                continue
            found = find_secret(KEYRING_SERVICE, secret_name(server.name, place, key), secrets_file())
            if found.value is None:
                where = f"the keyring ({found.keyring_trouble})" if found.keyring_trouble else "the keyring"
                raise ConfigError(
                    f"MCP server {server.name}: the value of {place} {key} was kept in {where}, but it is not "
                    "there any more. Enter it again in Settings > MCP servers."
                )
            values[key] = found.value
    return server.model_copy(update={"env": env, "headers": headers})


def _stored_secrets(server: McpServer) -> McpServer:
    """The server as the file holds it: each secret value stored, and the placeholder in its place."""
    env = dict(server.env)
    headers = dict(server.headers)
    for place, values in (("env", env), ("header", headers)):
        for key, value in values.items():
            if not looks_secret(key) or value == SECRET_PLACEHOLDER or not value:
                continue
            store_secret(KEYRING_SERVICE, secret_name(server.name, place, key), value, secrets_file())
            values[key] = SECRET_PLACEHOLDER
    return server.model_copy(update={"env": env, "headers": headers})


def _read_json(path: Path) -> dict[str, Any]:
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError) as err:
        raise ConfigError(in_context(f"Could not read the MCP servers file {path}", str(err), subject=path)) from err
    except json.JSONDecodeError as err:
        raise ConfigError(
            f"The MCP servers file {path} is not valid JSON ({err}). Fix it, or move it away to start over."
        ) from err
    if not isinstance(data, dict):
        raise ConfigError(f'The MCP servers file {path} must hold a JSON object with "mcpServers".')
    return data


def _servers_of(data: dict[str, Any], path: Path) -> dict[str, McpServer]:
    table = data.get("mcpServers", {})
    if not isinstance(table, dict):
        raise ConfigError(f'{path}: "mcpServers" must be an object of servers by name.')
    return {name: _server_of(name, entry, path) for name, entry in table.items()}


def _server_of(name: str, entry: Any, path: Path) -> McpServer:
    """One entry of the shared format as an McpServer (a ConfigError naming file and server if broken)."""
    if not isinstance(entry, dict):
        raise ConfigError(f"{path}: MCP server {name!r} must be an object with a command or a url.")
    kind = str(entry.get("type") or entry.get("transport") or "").strip().lower()
    if kind and kind != "stdio" and kind not in _SSE_TYPES | _HTTP_TYPES:
        raise ConfigError(
            f"{path}: MCP server {name!r} has type {kind!r}; this app speaks stdio, streamable-http and sse."
        )
    enabled = not entry.get("disabled", False) if "disabled" in entry else bool(entry.get("enabled", True))
    fields: dict[str, Any] = {
        "name": name,
        "command": entry.get("command"),
        "args": entry.get("args", []),
        "env": entry.get("env", {}),
        "cwd": entry.get("cwd"),
        "url": entry.get("url") or entry.get("serverUrl"),  # Windsurf writes serverUrl
        "headers": entry.get("headers", {}),
        "enabled": enabled,
        "sse": kind in _SSE_TYPES,
        "extra": {key: value for key, value in entry.items() if key not in _KNOWN_KEYS | {"serverUrl"}},
    }
    if entry.get("timeout") is not None:
        fields["timeout_s"] = entry["timeout"]
    try:
        return McpServer.model_validate(fields)
    except ValidationError as err:
        problems = "; ".join(
            f"{'.'.join(str(part) for part in e['loc']) or 'entry'}: {e['msg'].removeprefix('Value error, ')}"
            for e in err.errors()
        )
        raise ConfigError(f"{path}: MCP server {name!r} is not usable ({problems}).") from err


def _entry_of(server: McpServer) -> dict[str, Any]:
    """The server as an entry of the shared format; unknown keys first, as they were."""
    entry: dict[str, Any] = dict(server.extra)
    if server.command is not None:
        entry["command"] = server.command
        entry["args"] = list(server.args)
        if server.env:
            entry["env"] = dict(server.env)
        if server.cwd:
            entry["cwd"] = server.cwd
    else:
        entry["url"] = server.url
        if server.sse:
            entry["type"] = "sse"
        if server.headers:
            entry["headers"] = dict(server.headers)
    if not server.enabled:
        entry["disabled"] = True
    if server.timeout_s != DEFAULT_TIMEOUT_S:
        entry["timeout"] = server.timeout_s
    return entry


def _write_json(path: Path, data: dict[str, Any]) -> None:
    """Atomic: the JSON goes to a temp file beside `path`, which is then renamed over it."""
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.stem}.", suffix=".tmp")
        try:
            with os.fdopen(fd, "w", encoding="utf-8") as handle:
                json.dump(data, handle, indent=2, ensure_ascii=False)
                handle.write("\n")
            os.replace(tmp, path)
        except BaseException:
            Path(tmp).unlink(missing_ok=True)
            raise
    except OSError as err:
        raise ConfigError(in_context(f"Could not write the MCP servers file {path}", str(err), subject=path)) from err


# -- importing another app's servers ---------------------------------------------------------------


@dataclass(frozen=True)
class ImportSource:
    """Another app's MCP file found on this machine."""

    label: str  # "Claude Desktop", "Cursor", "LM Studio"
    path: Path


def import_sources() -> list[ImportSource]:
    """The other apps' MCP files that exist here (Claude Desktop on macOS, Windows or Linux, Cursor,
    LM Studio), in that order."""
    home = Path.home()
    candidates = [
        ("Claude Desktop", home / "Library" / "Application Support" / "Claude" / "claude_desktop_config.json"),
        ("Claude Desktop", home / ".config" / "Claude" / "claude_desktop_config.json"),
        ("Cursor", home / ".cursor" / "mcp.json"),
        ("LM Studio", home / ".lmstudio" / "mcp.json"),
    ]
    appdata = os.environ.get("APPDATA")
    if appdata:
        candidates.insert(1, ("Claude Desktop", Path(appdata) / "Claude" / "claude_desktop_config.json"))
    return [ImportSource(label, path) for label, path in candidates if path.is_file()]


def merge(
    existing: Mapping[str, McpServer], imported: Mapping[str, McpServer]
) -> tuple[dict[str, McpServer], list[str], list[str]]:
    """`existing` plus the imported servers whose names are new: (merged, added names, skipped names).
    A name already here is skipped, never overwritten: the user's own entry wins."""
    merged = dict(existing)
    added: list[str] = []
    skipped: list[str] = []
    for name, server in imported.items():
        if name in merged:
            skipped.append(name)
        else:
            merged[name] = server
            added.append(name)
    return merged, added, skipped
