"""The registry of remotes and their keys (launcher/core/remotes.py, `launcher remote`).

Keys go to a keyring, never to a file: with the test keyring (a file standing in for the OS's, as
CI has no Secret Service) and with keyring's own "no backend" (a headless machine), which must say
what to do instead and write the key nowhere.
"""

from __future__ import annotations

import io
import sys
from collections.abc import Iterator
from pathlib import Path

import keyring
import pytest
from keyring.backends.fail import Keyring as NoKeyring

from launcher.cli import main as launcher_main
from launcher.core.errors import ConfigError
from launcher.core.remotes import (
    KEYRING_SERVICE,
    Remote,
    base_url,
    find_key,
    key_env_name,
    load_remotes,
    plain_http_warning,
    remotes_file,
)
from tests.server import keyring_backend


@pytest.fixture
def home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    monkeypatch.setenv("LAUNCHER_HOME", str(tmp_path / "home"))
    monkeypatch.setenv(keyring_backend.FILE_ENV, str(tmp_path / "keyring.json"))
    monkeypatch.setattr(keyring.core, "_keyring_backend", keyring_backend.FileKeyring())
    yield tmp_path / "home"


def add(*argv: str, stdin: str = "") -> int:
    stdin_before = sys.stdin
    sys.stdin = io.StringIO(stdin)
    try:
        return launcher_main(["remote", "add", *argv, "--no-check"])
    finally:
        sys.stdin = stdin_before


def test_urls_are_openai_base_urls() -> None:
    assert base_url("http://gpu:8000") == "http://gpu:8000/v1"
    assert base_url("https://api.example.com/v1/") == "https://api.example.com/v1"
    assert base_url("https://openrouter.ai/api/v1") == "https://openrouter.ai/api/v1"
    for bad in ("gpu:8000", "ftp://gpu/v1", "http://gpu/v1?x=1"):
        with pytest.raises(ConfigError):
            base_url(bad)


def test_plain_http_to_another_machine_is_warned_about() -> None:
    assert plain_http_warning(Remote("lan", "http://192.168.1.20:8420/v1")) is not None
    for quiet in ("https://gpu.example.com/v1", "http://127.0.0.1:8000/v1", "http://localhost:8000/v1"):
        assert plain_http_warning(Remote("x", quiet)) is None


def test_the_key_goes_to_the_keyring_and_never_to_the_file(home: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert add("gpu", "http://10.0.0.5:8000", "--api-key-stdin", stdin="secret-key\n") == 0
    said = capsys.readouterr()
    assert "plain HTTP" in said.err  # 10.0.0.5 is another machine
    assert "secret-key" not in remotes_file().read_text()
    assert keyring.get_password(KEYRING_SERVICE, "gpu") == "secret-key"
    remote = load_remotes()["gpu"]
    assert remote.url == "http://10.0.0.5:8000/v1" and remote.has_key
    assert find_key(remote).key == "secret-key"

    assert launcher_main(["remote", "remove", "gpu"]) == 0
    assert load_remotes() == {} and keyring.get_password(KEYRING_SERVICE, "gpu") is None
    assert launcher_main(["remote", "remove", "gpu"]) == 2  # nothing of that name any more


def test_without_a_keyring_the_key_is_given_in_the_environment(
    home: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setattr(keyring.core, "_keyring_backend", NoKeyring())
    assert add("ci-box", "https://ci.example.com/v1", "--api-key-stdin", stdin="secret-key\n") == 0
    err = capsys.readouterr().err
    assert "No keyring is available" in err and "LAUNCHER_REMOTE_KEY_CI_BOX" in err
    assert "secret-key" not in remotes_file().read_text()
    remote = load_remotes()["ci-box"]
    lookup = find_key(remote)
    assert lookup.key is None and lookup.problem is not None and key_env_name("ci-box") in lookup.problem
    monkeypatch.setenv("LAUNCHER_REMOTE_KEY_CI_BOX", "from-the-environment")
    assert find_key(remote).key == "from-the-environment"


def test_a_bad_name_is_refused(home: Path) -> None:
    assert add("has/slash", "http://127.0.0.1:1") == 2
    assert add("has space", "http://127.0.0.1:1") == 2
    assert not remotes_file().exists()
