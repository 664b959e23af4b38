"""Secrets in the operating system's keyring, or in a file only this user can read where there is none.

The keyring (the `keyring` package: macOS Keychain, Windows Credential Locker, the Secret Service
on Linux) holds a secret under a service ("launcher-remote", "launcher-mcp") and a name. A machine
without a usable keyring (a headless server, CI) keeps it instead in a 0600 TOML file
(`core/remote_key_file.py` reads and writes such files), as `gh` and `docker login` do. Remote
endpoints' keys (`core/remotes.py`) and the MCP servers' tokens of the Chat page both go through here.

A lookup reads the file before the keyring: a file entry is always the newest secret, since storing
in the keyring removes the file's copy, while a secret that went to the file because the keyring
refused it (locked, say) could not replace an older one in that keyring, which would otherwise win.
The keyring is not asked when the file answers: a locked one would ask the user to unlock it.
"""

from __future__ import annotations

import contextlib
from dataclasses import dataclass
from pathlib import Path

from launcher.core import remote_key_file


def unusable_keyring() -> str | None:
    """Why the keyring cannot hold secrets here, or None when it can. keyring falls back to its `fail`
    backend, or to a chainer or null backend with priority 0 or less, when no real one is viable (a
    headless Linux machine): those take no secret, or throw it away."""
    import keyring
    from keyring.backends import fail

    backend = keyring.get_keyring()
    if isinstance(backend, fail.Keyring) or backend.priority <= 0:
        kind = type(backend)
        return f"no usable keyring on this machine (keyring's backend is {kind.__module__}.{kind.__qualname__})"
    return None


@dataclass(frozen=True)
class KeptKey:
    """Where a secret was put: the keyring (`file` None), or the file and why not the keyring."""

    file: Path | None = None
    why_not_keyring: str | None = None


def store_secret(service: str, name: str, secret: str, file: Path) -> KeptKey:
    """Keep `secret` in the OS keyring, or where there is none in the 0600 `file`; a ConfigError
    (nothing stored) when neither can take it."""
    import keyring
    from keyring.errors import KeyringError

    why_not = unusable_keyring()
    if why_not is None:
        try:
            keyring.set_password(service, name, secret)
        except KeyringError as err:  # viable on paper, but locked or without its service (no D-Bus session)
            why_not = f"the keyring cannot store keys here ({err})"
        else:
            remote_key_file.forget_key(name, file)  # a secret kept there before must not outlive its replacement
            return KeptKey()
    return KeptKey(remote_key_file.write_key(name, secret, file), why_not)


def delete_secret(service: str, name: str, file: Path) -> None:
    """Remove the secret from the keyring and from the file, wherever it is."""
    import keyring
    from keyring.errors import KeyringError, PasswordDeleteError

    if unusable_keyring() is None:
        with contextlib.suppress(PasswordDeleteError, KeyringError):  # none stored, or a locked keyring
            keyring.delete_password(service, name)
    remote_key_file.forget_key(name, file)


@dataclass(frozen=True)
class FoundSecret:
    """A secret (None when neither place has it), where it was found ("the keyring" or the file's
    path), and why the keyring could not be asked when that is part of the reason it is missing."""

    value: str | None
    source: str | None = None
    keyring_trouble: str | None = None


def find_secret(service: str, name: str, file: Path) -> FoundSecret:
    """The secret from the file, else from the keyring (the module docstring says why in that order).
    A KeyFileError (a ConfigError) when the file is broken or open to other users."""
    from_file = remote_key_file.read_key(name, file)
    if from_file is not None:
        return FoundSecret(from_file, str(file))
    import keyring
    from keyring.errors import KeyringError

    trouble = unusable_keyring()
    if trouble is None:
        try:
            stored = keyring.get_password(service, name)
        except KeyringError as err:
            trouble = f"the keyring cannot be read here ({err})"
        else:
            if stored is not None:
                return FoundSecret(stored, "the keyring")
    return FoundSecret(None, keyring_trouble=trouble)
