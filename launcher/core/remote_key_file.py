"""Remote keys (and other secrets) kept in a file only this user can read, for machines where no keyring
can hold them.

A headless Linux machine (a server, a container, an SSH session without a desktop) has no keyring
service. There, as `gh` and `docker login` do, the key goes to `remote-keys.toml` in the config
folder (a `[keys]` table: remote name = key), mode 0600. It is written through a temp file that is
0600 from its creation and then renamed over the old file, so no other user can read a key at any
instant, and a crash never leaves half a file.

When a key is read, a file that other users can read or write is refused, as ssh refuses such a
private key: a server warning that scrolls by would let a leaked key keep working unnoticed, while
a refusal makes the user look, and the fix (`chmod 600`, and a new key if others may have read it)
takes a moment. Windows is not checked: its POSIX mode bits do not reflect the ACLs that keep a
user's profile folder private.

Each function takes the file to use (`path`); without one it is the remotes' `remote-keys.toml`.
`core/secrets.py` puts other secrets (the Chat page's MCP tokens) in files of their own the same way.
"""

from __future__ import annotations

import os
import stat
import tomllib
from pathlib import Path

from launcher.core import paths
from launcher.core.errors import ConfigError
from launcher.core.settings import write_toml

FILE_NAME = "remote-keys.toml"


class KeyFileError(ConfigError):
    """The key file cannot be read or written, or others can read it."""


def key_file() -> Path:
    """Where file-kept keys live: next to remotes.toml in the config folder."""
    return paths.config_dir() / FILE_NAME


def read_key(name: str, path: Path | None = None) -> str | None:
    """The key kept for remote `name`, or None. KeyFileError when the file is unreadable or broken,
    or holds that key but is open to other users (a key kept in the keyring is not held up by it)."""
    path = path or key_file()
    keys, mode = _load(path)
    key = keys.get(name)
    if key is not None and os.name != "nt" and mode & 0o077:
        raise KeyFileError(
            f"The key file {path} can be read or changed by other users (mode {mode:04o}), so its keys are not "
            f"used. Run `chmod 600 {path}`, and replace the keys in it if others may have read them."
        )
    return key


def write_key(name: str, key: str, path: Path | None = None) -> Path:
    """Keep `key` for remote `name` (replacing one kept before); returns the file. KeyFileError when
    the config folder cannot take it: then nothing was written."""
    path = path or key_file()
    keys, _ = _load(path)  # rewriting it at 0600 closes a file someone opened up
    keys[name] = key
    _save(path, keys)
    return path


def forget_key(name: str, path: Path | None = None) -> None:
    """Remove remote `name`'s key from the file; the file goes when it holds no key any more."""
    path = path or key_file()
    keys, _ = _load(path)
    if keys.pop(name, None) is None:
        return
    if keys:
        _save(path, keys)
        return
    try:
        path.unlink(missing_ok=True)
    except OSError as err:
        raise KeyFileError(f"Could not delete the key file {path} ({err}).") from err


def _load(path: Path) -> tuple[dict[str, str], int]:
    """The keys in the file and its permission bits (of the file opened, not of whatever the path
    names a moment later); no file is no keys."""
    try:
        fd = os.open(path, os.O_RDONLY)
    except FileNotFoundError:
        return {}, 0o600
    except OSError as err:
        raise KeyFileError(f"Could not read the key file {path} ({err}).") from err
    with os.fdopen(fd, "rb") as handle:
        mode = stat.S_IMODE(os.fstat(fd).st_mode)
        try:
            data = tomllib.load(handle)
        except (OSError, tomllib.TOMLDecodeError) as err:
            raise KeyFileError(f"The key file {path} is invalid ({err}). Fix or delete it.") from err
    keys = data.get("keys") or {}
    if not isinstance(keys, dict) or not all(isinstance(value, str) for value in keys.values()):
        raise KeyFileError(f'The key file {path} is invalid: it needs [keys] with NAME = "key" lines.')
    return keys, mode


def _save(path: Path, keys: dict[str, str]) -> None:
    try:
        write_toml(path, {"keys": dict(sorted(keys.items()))}, private=True)
    except OSError as err:
        raise KeyFileError(f"Could not write the key file {path} ({err}).") from err
