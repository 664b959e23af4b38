"""A keyring backend for tests: headless CI has no Secret Service, so the remote tests store keys
in a JSON file under the test's tmp dir instead (never a real user's keyring).

Subprocesses pick it up from the environment as keyring itself reads it:
PYTHON_KEYRING_BACKEND=tests.server.keyring_backend.FileKeyring and TEST_KEYRING_FILE=<path>.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

from keyring.backend import KeyringBackend
from keyring.errors import PasswordDeleteError

BACKEND = f"{__name__}.FileKeyring"
FILE_ENV = "TEST_KEYRING_FILE"


class FileKeyring(KeyringBackend):
    """Passwords in the JSON file $TEST_KEYRING_FILE, by service and user name."""

    priority = 1  # type: ignore[assignment]  # keyring declares it as a classproperty

    @property
    def _path(self) -> Path:
        return Path(os.environ[FILE_ENV])

    def _read(self) -> dict[str, str]:
        return json.loads(self._path.read_text()) if self._path.exists() else {}

    def get_password(self, service: str, username: str) -> str | None:
        return self._read().get(f"{service}/{username}")

    def set_password(self, service: str, username: str, password: str) -> None:
        data = self._read()
        data[f"{service}/{username}"] = password
        self._path.write_text(json.dumps(data))

    def delete_password(self, service: str, username: str) -> None:
        data = self._read()
        if data.pop(f"{service}/{username}", None) is None:
            raise PasswordDeleteError(username)
        self._path.write_text(json.dumps(data))
