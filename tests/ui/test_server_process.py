"""ServerProcess: the LAUNCHER_READY / LAUNCHER_ERROR line protocol, crash reports and clean stops.

The first tests run a small child that speaks the protocol (the wrapper is what is under test:
QProcess plumbing, line splitting, outcome text); the last ones run the real `launcher serve`.
"""

from __future__ import annotations

import sys

import psutil
import pytest

from launcher.core.config import ServeConfig
from launcher.ui.server_process import ServerOutcome, ServerProcess, serve_command

READY = (
    'LAUNCHER_READY {"url": "http://127.0.0.1:1", "base_url": "http://127.0.0.1:1/v1", "model": "m",'
    ' "engine": "llamacpp", "engine_reason": "why", "context_length": 2048, "parallel": 2,'
    ' "api_key_required": false, "pid": 1}'
)


def child(script: str):  # type: ignore[no-untyped-def]
    """A command builder running `script` with this interpreter instead of the server."""
    return lambda _config: (sys.executable, ["-c", script])


def test_ready_line_split_across_writes_gives_an_endpoint(qtbot) -> None:  # type: ignore[no-untyped-def]
    script = (
        "import sys, time\n"
        "sys.stderr.write('loading model\\n'); sys.stderr.flush()\n"
        f"line = {READY!r}\n"
        "sys.stdout.write(line[:20]); sys.stdout.flush(); time.sleep(0.2)\n"
        "sys.stdout.write(line[20:] + '\\n'); sys.stdout.flush()\n"
        "sys.stdin.readline()\n"  # stay up until stopped
    )
    server = ServerProcess(command=child(script))
    logs: list[str] = []
    server.log_line.connect(logs.append)
    with qtbot.waitSignal(server.ready, timeout=20_000) as ready:
        server.start(ServeConfig())
    endpoint = ready.args[0]
    assert endpoint.base_url == "http://127.0.0.1:1/v1"
    assert endpoint.context_length == 2048
    assert server.state == "ready"
    assert "loading model" in logs
    with qtbot.waitSignal(server.finished, timeout=20_000) as finished:
        server.stop()
    assert finished.args[0].kind == "stopped"
    assert str(finished.args[0]) == "Server stopped."
    assert server.state == "stopped"


def test_load_error_line_becomes_the_reason(qtbot) -> None:  # type: ignore[no-untyped-def]
    script = (
        "import sys\n"
        'print(\'LAUNCHER_ERROR {"kind": "ModelNotFoundError", "message": "No model at /x.gguf"}\')\n'
        "sys.exit(1)\n"
    )
    server = ServerProcess(command=child(script))
    with qtbot.waitSignal(server.finished, timeout=20_000) as finished:
        server.start(ServeConfig())
    outcome: ServerOutcome = finished.args[0]
    assert outcome.kind == "load_failed"
    assert outcome.error_kind == "ModelNotFoundError"
    assert "No model at /x.gguf" in str(outcome)


def test_crash_reports_exit_code_and_last_log_lines(qtbot) -> None:  # type: ignore[no-untyped-def]
    script = "import sys\nsys.stderr.write('step 1\\nout of memory\\n')\nsys.exit(7)\n"
    server = ServerProcess(command=child(script))
    with qtbot.waitSignal(server.finished, timeout=20_000) as finished:
        server.start(ServeConfig())
    outcome: ServerOutcome = finished.args[0]
    assert outcome.kind == "crashed"
    assert outcome.exit_code == 7
    assert "exit code 7" in str(outcome)
    assert "out of memory" in str(outcome)


def test_program_that_cannot_start_is_reported(qtbot) -> None:  # type: ignore[no-untyped-def]
    server = ServerProcess(command=lambda _c: ("/nonexistent/launcher-python", []))
    with qtbot.waitSignal(server.finished, timeout=20_000) as finished:
        server.start(ServeConfig())
    assert finished.args[0].kind == "failed_to_start"
    assert "could not be started" in str(finished.args[0])


def test_stop_and_wait_leaves_no_process(qtbot) -> None:  # type: ignore[no-untyped-def]
    server = ServerProcess(command=child("import sys\nprint('up', flush=True)\nsys.stdin.readline()\n"))
    with qtbot.waitSignal(server.started, timeout=20_000):
        server.start(ServeConfig())
    pid = server.pid
    assert pid is not None and psutil.pid_exists(pid)
    server.stop_and_wait()
    assert not psutil.pid_exists(pid) or psutil.Process(pid).status() == psutil.STATUS_ZOMBIE


def test_serve_command_runs_this_interpreter_with_the_config_flags() -> None:
    program, arguments = serve_command(ServeConfig(model="/m.gguf", port=0, parallel=2))
    assert program == sys.executable
    assert arguments[:2] == ["-m", "launcher"]
    assert arguments[arguments.index("serve") + 1 :] == ["--no-settings", "/m.gguf", "--parallel", "2", "--port", "0"]


def test_the_apps_form_wins_over_older_settings_when_it_starts_its_server() -> None:
    """The app passes only what differs from the defaults: an older settings file must not fill in
    the rest (a user who ticks "Load other library models on request" again gets the library)."""
    from launcher.cli import build_parser
    from launcher.cli.serve import build_config
    from launcher.core import settings

    settings.save(settings.Settings(serve=ServeConfig(library=False, context=8192, parallel=1)))
    form = ServeConfig(model="/m.gguf", parallel=2)  # library on, context auto: the defaults
    _, arguments = serve_command(form)
    child = build_config(build_parser().parse_args(arguments[arguments.index("serve") :]))
    assert child == form
    assert build_config(build_parser().parse_args(["serve", "/m.gguf"])).library is False  # by hand: settings count


@pytest.mark.slow
def test_real_server_load_failure_is_reported(qtbot) -> None:  # type: ignore[no-untyped-def]
    pytest.importorskip("launcher.cli.serve")
    server = ServerProcess()
    with qtbot.waitSignal(server.finished, timeout=120_000) as finished:
        server.start(ServeConfig(model="/nonexistent/model.gguf", port=0))
    outcome: ServerOutcome = finished.args[0]
    assert outcome.kind == "load_failed", str(outcome)
    assert "/nonexistent/model.gguf" in str(outcome)


@pytest.mark.slow
def test_real_server_killed_is_reported_as_a_crash(qtbot, tiny_gguf) -> None:  # type: ignore[no-untyped-def]
    pytest.importorskip("launcher.cli.serve")
    server = ServerProcess()
    with qtbot.waitSignal(server.ready, timeout=120_000) as ready:
        server.start(ServeConfig(model=str(tiny_gguf), port=0, parallel=1, context=512))
    with qtbot.waitSignal(server.finished, timeout=30_000) as finished:
        psutil.Process(ready.args[0].pid).kill()
    outcome: ServerOutcome = finished.args[0]
    assert outcome.kind == "crashed"
    assert "crashed" in str(outcome)


# A child that starts the way every launcher child does (launcher/__main__.py calls follow_parent
# first), then idles: the server's start-up without loading a model.
FOLLOWING_CHILD = (
    "from launcher.core.child_process import follow_parent\nfollow_parent()\nimport time\ntime.sleep(600)\n"
)


def _app_script(server_arguments: str, announce_on: str) -> str:
    """An app (a QCoreApplication with a ServerProcess(server_arguments)) that prints its server's
    pid when the server emits `announce_on` ("started" or "ready"); the model is its argv[1]."""
    return (
        "import sys\n"
        "from PySide6.QtCore import QCoreApplication\n"
        "from launcher.core.config import ServeConfig\n"
        "from launcher.ui.server_process import ServerProcess\n"
        "app = QCoreApplication([])\n"
        f"server = ServerProcess({server_arguments})\n"
        f"server.{announce_on}.connect(lambda *_: print(server.pid, flush=True))\n"
        "model = sys.argv[1] if len(sys.argv) > 1 else ''\n"
        "server.start(ServeConfig(model=model, port=0, parallel=1, context=512))\n"
        "app.exec()\n"
    )


def _kill_app_and_watch_server(app_script: str, *args: str) -> list[psutil.Process]:
    import subprocess

    app = subprocess.Popen([sys.executable, "-c", app_script, *args], stdout=subprocess.PIPE, text=True)
    try:
        line = app.stdout.readline()  # type: ignore[union-attr]
        assert line.strip(), "the app ended before its server started"
        server = psutil.Process(int(line))
        family = [server, *server.children(recursive=True)]
        assert server.is_running()
    finally:
        app.kill()  # the app "crashes": no aboutToQuit, no destructor
        app.wait()
        app.stdout.close()  # type: ignore[union-attr]
    _gone, alive = psutil.wait_procs(family, timeout=20)
    for process in alive:
        process.kill()
    return alive


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="PR_SET_PDEATHSIG is Linux-only")
def test_server_dies_with_a_crashed_app() -> None:
    """The app names itself in the child's environment; the child arms the parent-death signal."""
    command = f"command=lambda c: (sys.executable, ['-c', {FOLLOWING_CHILD!r}])"
    alive = _kill_app_and_watch_server(_app_script(command, "started"))
    assert not alive, "the server outlived the app"


@pytest.mark.slow
@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="PR_SET_PDEATHSIG is Linux-only")
def test_real_server_dies_with_a_crashed_app(tiny_gguf) -> None:  # type: ignore[no-untyped-def]
    """The real `launcher serve` child, started by `serve_command` as the app does, model loaded."""
    pytest.importorskip("launcher.cli.serve")
    alive = _kill_app_and_watch_server(_app_script("", "ready"), str(tiny_gguf))
    assert not alive, "the server outlived the app"
