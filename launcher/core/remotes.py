"""Remote endpoints: OpenAI-compatible servers whose models this launcher's server serves as `NAME/model`.

A vLLM or SGLang cluster, another machine running the launcher, or a hosted provider is
registered once (`launcher remote add NAME URL`) in `remotes.toml` in the config directory:
its name and base URL, never its key. The key lives in the operating system's keyring (the
`keyring` package: macOS Keychain, Windows Credential Locker, the Secret Service on Linux)
under the service `launcher-remote` and the remote's name. A machine without a usable keyring
(a headless server, CI) keeps it instead in `remote-keys.toml` next to the registry, readable by
this user only (`core/remote_key_file.py`), as `gh` and `docker login` do.

A server looks a key up in this order: `LAUNCHER_REMOTE_KEY_<NAME>` in its environment (to
override a stored key, or to give one that is stored nowhere), then the key file, then the keyring
(`core/secrets.py` says why the file comes first; it keeps the keyring-or-file logic this module
shares with the Chat page's MCP secrets).
"""

from __future__ import annotations

import os
import re
import tomllib
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import urlsplit

from launcher.core import paths, remote_key_file
from launcher.core.errors import ConfigError
from launcher.core.net import is_loopback_host
from launcher.core.secrets import KeptKey, delete_secret, find_secret, store_secret
from launcher.core.settings import write_toml

KEYRING_SERVICE = "launcher-remote"
KEY_ENV_PREFIX = "LAUNCHER_REMOTE_KEY_"
_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,63}$")


@dataclass(frozen=True)
class Remote:
    """One registered endpoint."""

    name: str
    url: str  # the OpenAI base URL, ending in /v1 for servers that serve there
    has_key: bool = False  # a key was given when it was added (kept in the keyring or the key file, not here)

    @property
    def key_env(self) -> str:
        """The environment variable that gives this remote's key, over any stored one."""
        return key_env_name(self.name)


def remotes_file() -> Path:
    """Where the registry lives."""
    return paths.config_dir() / "remotes.toml"


def check_name(name: str) -> str:
    """A remote's name: it prefixes its models' names (`NAME/model`), so no `/` and no spaces."""
    if not _NAME.match(name):
        raise ConfigError(
            f"Remote name {name!r} is not allowed: use letters, digits, '.', '_' and '-' (up to 64), "
            "starting with a letter or digit."
        )
    return name


def base_url(url: str) -> str:
    """The OpenAI base URL for what a user typed: http(s) only; a bare host gets `/v1` (vLLM, SGLang and
    the launcher serve there), a URL with a path keeps it (providers put `/v1` under their own path)."""
    text = url.strip().rstrip("/")
    parts = urlsplit(text)
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise ConfigError(f"Remote URL {url!r} must start with http:// or https:// and name a host.")
    if parts.query or parts.fragment:
        raise ConfigError(f"Remote URL {url!r} must not have a query or fragment.")
    return text if parts.path else text + "/v1"


def plain_http_warning(remote: Remote) -> str | None:
    """A warning for a remote reached over plain HTTP on the network: its key and every prompt cross the
    network unencrypted. None for HTTPS and for this machine."""
    parts = urlsplit(remote.url)
    if parts.scheme != "http" or is_loopback_host(parts.hostname or ""):
        return None
    return (
        f"remote {remote.name} ({remote.url}) is plain HTTP to another machine: its key and every prompt and "
        "reply cross the network unencrypted. Use https:// (a reverse proxy with TLS, or an SSH tunnel to "
        "localhost) unless this network is trusted."
    )


def load_remotes(path: Path | None = None) -> dict[str, Remote]:
    """The registered remotes by name (none when the file does not exist)."""
    path = path or remotes_file()
    if not path.exists():
        return {}
    try:
        data = tomllib.loads(path.read_text(encoding="utf-8"))
    except (OSError, tomllib.TOMLDecodeError) as err:
        raise ConfigError(f"The remotes file {path} is invalid ({err}). Fix or delete it.") from err
    remotes: dict[str, Remote] = {}
    for name, table in (data.get("remotes") or {}).items():
        if not isinstance(table, dict) or not isinstance(table.get("url"), str):
            raise ConfigError(f'{path}: [remotes.{name}] needs url = "http(s)://...".')
        remotes[name] = Remote(check_name(name), base_url(table["url"]), bool(table.get("has_key", False)))
    return remotes


def _save(remotes: dict[str, Remote], path: Path) -> None:
    """Write the registry atomically (a crash never leaves half a file)."""
    data = {
        "remotes": {name: {"url": r.url, "has_key": r.has_key} for name, r in sorted(remotes.items())},
    }
    try:
        write_toml(path, data)
    except OSError as err:
        raise ConfigError(f"Could not write the remotes file {path} ({err}).") from err


def save_remote(remote: Remote, path: Path | None = None) -> None:
    """Add or replace one remote."""
    path = path or remotes_file()
    remotes = load_remotes(path)
    remotes[remote.name] = remote
    _save(remotes, path)


def remove_remote(name: str, path: Path | None = None) -> bool:
    """Forget one remote (its key too); False when there was none of that name."""
    path = path or remotes_file()
    remotes = load_remotes(path)
    removed = remotes.pop(name, None)
    if removed is None:
        return False
    if removed.has_key:  # the key first: a failure then leaves the remote listed, not a key nothing names
        delete_key(name)
    _save(remotes, path)
    return True


# -- keys ------------------------------------------------------------------------------------------


def key_env_name(name: str) -> str:
    """`LAUNCHER_REMOTE_KEY_<NAME>`, upper case, anything but letters and digits as `_`."""
    return KEY_ENV_PREFIX + re.sub(r"[^A-Z0-9]", "_", name.upper())


def store_key(name: str, key: str) -> KeptKey:
    """Keep `key` in the OS keyring, or where there is none in the 0600 key file; a ConfigError
    (nothing stored) when neither can take it."""
    return store_secret(KEYRING_SERVICE, name, key, remote_key_file.key_file())


def delete_key(name: str) -> None:
    """Remove the remote's key from the keyring and from the key file, wherever it is."""
    delete_secret(KEYRING_SERVICE, name, remote_key_file.key_file())


@dataclass(frozen=True)
class KeyLookup:
    """A remote's key, where it was found (`$VAR`, "the keyring" or the key file's path) and, when it
    has none, why (what the user should do)."""

    key: str | None
    problem: str | None = None
    source: str | None = None


def find_key(remote: Remote) -> KeyLookup:
    """The remote's key: `LAUNCHER_REMOTE_KEY_<NAME>` first (it overrides a stored one), then the key
    file, then the keyring.

    The file before the keyring, as core/secrets.py explains.
    """
    from_env = os.environ.get(remote.key_env, "").strip()
    if from_env:
        return KeyLookup(from_env, source="$" + remote.key_env)
    if not remote.has_key:  # not asked of the keyring at all, for the same reason
        return KeyLookup(None)
    file = remote_key_file.key_file()
    try:
        found = find_secret(KEYRING_SERVICE, remote.name, file)
    except ConfigError as err:
        return KeyLookup(None, f"remote {remote.name}: {err} Or set {remote.key_env}.")
    if found.value is not None:
        return KeyLookup(found.value, source=found.source)
    missing = (
        f"{file} does not have it and {found.keyring_trouble}"
        if found.keyring_trouble
        else f"neither {file} nor the keyring has it"
    )
    return KeyLookup(
        None,
        f"remote {remote.name} was added with a key, but {missing}: add it again with --api-key-stdin, or set "
        f"{remote.key_env}",
    )
