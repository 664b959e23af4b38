"""The registry of remotes and their keys (launcher/core/remotes.py, `launcher remote`).

Keys go to the keyring when there is one (the test keyring: a file standing in for the OS's, as CI
has no Secret Service), and never into remotes.toml. With keyring's own "no backend" (a headless
machine) they go to a file only this user can read, `remote add` says so, the server finds them
there, and `remote remove` deletes them; where even that file cannot be written, nothing is added.
"""

from __future__ import annotations

import io
import json
import os
import stat
import subprocess
import sys
from collections.abc import Callable, Iterator
from pathlib import Path

import keyring
import pytest
from keyring.backends.fail import Keyring as NoKeyring

from launcher.cli import main as launcher_main
from launcher.core.errors import ConfigError
from launcher.core.net import free_port
from launcher.core.remote_key_file import key_file
from launcher.core.remotes import (
    KEYRING_SERVICE,
    Remote,
    base_url,
    find_key,
    key_env_name,
    load_remotes,
    plain_http_warning,
    remotes_file,
    store_key,
)
from launcher.server.upstreams.remotes import registered_upstreams
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


def launcher_cli(home: Path, *argv: str, stdin: str = "") -> subprocess.CompletedProcess[str]:
    """The real `launcher` in a child process, on a machine without a keyring: keyring's own `fail`
    backend, chosen the way a user would (PYTHON_KEYRING_BACKEND), and a umask that would leave any
    file it creates readable by everyone unless the file is made private on purpose."""
    env = {**os.environ, "LAUNCHER_HOME": str(home), "PYTHON_KEYRING_BACKEND": "keyring.backends.fail.Keyring"}
    return subprocess.run(
        [sys.executable, "-m", "launcher", *argv],
        input=stdin,
        capture_output=True,
        text=True,
        env=env,
        timeout=120,
        preexec_fn=lambda: os.umask(0),  # the widest umask: only a deliberate 0600 keeps the file private
    )


def test_without_a_keyring_the_key_is_kept_in_a_file_only_this_user_can_read(
    home: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    nothing_listens = f"http://127.0.0.1:{free_port()}/v1"  # `remote list` asks it, and must not reach out
    added = launcher_cli(home, "remote", "add", "ci-box", nothing_listens, "--api-key-stdin", stdin="secret-key\n")
    assert added.returncode == 0, added.stderr
    kept = key_file()
    assert str(kept) in added.stderr and "readable by this user only" in added.stderr  # said once, at add
    assert stat.S_IMODE(kept.stat().st_mode) == 0o600
    assert "secret-key" in kept.read_text() and "secret-key" not in remotes_file().read_text()

    monkeypatch.setattr(keyring.core, "_keyring_backend", NoKeyring())  # the server runs headless too
    upstreams, warnings = registered_upstreams()
    assert [(u.name, u.api_key) for u in upstreams] == [("ci-box", "secret-key")] and warnings == []
    listed = launcher_cli(home, "remote", "list", "--json")
    assert json.loads(listed.stdout)[0]["key_from"] == str(kept)

    removed = launcher_cli(home, "remote", "remove", "ci-box")
    assert removed.returncode == 0, removed.stderr
    assert load_remotes() == {} and not kept.exists()


def test_the_environment_overrides_a_kept_key(home: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(keyring.core, "_keyring_backend", NoKeyring())
    assert add("ci-box", "https://ci.example.com/v1", "--api-key-stdin", stdin="secret-key\n") == 0
    monkeypatch.setenv("LAUNCHER_REMOTE_KEY_CI_BOX", "from-the-environment")
    lookup = find_key(load_remotes()["ci-box"])
    assert lookup.key == "from-the-environment" and lookup.source == "$" + key_env_name("ci-box")


def test_a_key_file_others_can_read_is_refused(home: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(keyring.core, "_keyring_backend", NoKeyring())
    assert add("ci-box", "https://ci.example.com/v1", "--api-key-stdin", stdin="secret-key\n") == 0
    key_file().chmod(0o644)
    lookup = find_key(load_remotes()["ci-box"])
    assert lookup.key is None and lookup.problem is not None
    assert "chmod 600" in lookup.problem and key_env_name("ci-box") in lookup.problem


def test_a_key_stored_in_the_keyring_replaces_the_one_in_the_file(home: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    with monkeypatch.context() as headless:
        headless.setattr(keyring.core, "_keyring_backend", NoKeyring())
        assert store_key("gpu", "old-key").file == key_file()
    assert store_key("gpu", "new-key").file is None  # the test keyring took it
    assert not key_file().exists() and keyring.get_password(KEYRING_SERVICE, "gpu") == "new-key"


def _file_in_the_way(config: Path) -> None:
    config.parent.mkdir(parents=True)
    config.write_text("not a folder")


def _read_only_folder(config: Path) -> None:
    if os.geteuid() == 0:
        pytest.skip("root writes into read-only folders")
    config.mkdir(parents=True)
    config.chmod(0o500)


@pytest.mark.parametrize("unwritable", [_file_in_the_way, _read_only_folder])
@pytest.mark.parametrize("with_keyring", [False, True], ids=["no keyring", "keyring"])
def test_where_the_key_or_the_remote_cannot_be_kept_nothing_is_added(
    home: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
    unwritable: Callable[[Path], None],
    with_keyring: bool,
) -> None:
    if not with_keyring:
        monkeypatch.setattr(keyring.core, "_keyring_backend", NoKeyring())
    config = home / "config"
    unwritable(config)
    try:
        assert add("ci-box", "https://ci.example.com/v1", "--api-key-stdin", stdin="secret-key\n") == 2
        err = capsys.readouterr().err
        assert err.startswith("error: ") and str(config) in err and "Traceback" not in err
        assert load_remotes() == {} and not remotes_file().exists() and not key_file().exists()
        assert keyring_backend.FileKeyring().get_password(KEYRING_SERVICE, "ci-box") is None  # nor in the keyring
    finally:
        if config.is_dir():
            config.chmod(0o700)


def test_a_bad_name_is_refused(home: Path) -> None:
    assert add("has/slash", "http://127.0.0.1:1") == 2
    assert add("has space", "http://127.0.0.1:1") == 2
    assert not remotes_file().exists()
