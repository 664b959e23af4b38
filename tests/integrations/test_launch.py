"""`launcher launch`: a real `launcher serve` (tiny GGUF) found or started, and an agent program run against it.

The agent here is a small program standing in for an agent CLI (the real ones run in tests/agents):
it reports what it was given (its arguments, its environment, the run-only file) and what the
server answered it, so these tests check launch's own promises: the server found or started and
stopped, the arguments after `--` passed verbatim, the exit code passed back, Ctrl-C left to the
agent, nothing written to HOME, no process left.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import textwrap
import time
from dataclasses import replace
from pathlib import Path
from typing import Any

import psutil
import pytest

from launcher.cli import main
from launcher.core.server_records import running_servers, servers_dir
from launcher.integrations.agents import AGENTS
from launcher.integrations.agents.base import Agent, Install, RunConfig
from launcher.integrations.endpoint import Endpoint
from launcher.integrations.setup import AgentSetup, ConfigEdit
from tests.conformance.servers import REPO_ROOT, launch_serve

pytestmark = pytest.mark.slow

AGENT_PROGRAM = """\
#!{python}
import json, os, signal, sys, urllib.request
if "--report-run-dir" in sys.argv:
    print("RUN_DIR", os.getpid(), os.path.dirname(os.environ["ECHO_AGENT_FILE"]), flush=True)
if "--wait-for-sigint" in sys.argv:
    signal.signal(signal.SIGINT, lambda *_: (print("agent got SIGINT", flush=True), sys.exit(0)))
    print("agent waiting", flush=True)
    signal.pause()
base = os.environ["ECHO_AGENT_BASE_URL"]
auth = {{"Authorization": "Bearer " + os.environ["ECHO_AGENT_KEY"]}}
request = urllib.request.Request(base + "/models", headers=auth)
with urllib.request.urlopen(request, timeout=30) as reply:
    models = [entry["id"] for entry in json.load(reply)["data"]]
servers = sorted(os.listdir(os.environ["ECHO_AGENT_SERVERS_DIR"]))
report = {{
    "argv": sys.argv[1:],
    "base_url": base,
    "model": os.environ["ECHO_AGENT_MODEL"],
    "context": os.environ["ECHO_AGENT_CONTEXT"],
    "run_file": open(os.environ["ECHO_AGENT_FILE"]).read(),
    "run_dir": os.path.dirname(os.environ["ECHO_AGENT_FILE"]),
    "served": models,
    "server_pids": [int(name.split(".")[0]) for name in servers if name.endswith(".json")],
    "secret_seen": "ECHO_AGENT_SECRET" in os.environ,
}}
print("REPORT " + json.dumps(report), flush=True)
sys.exit(int(os.environ.get("ECHO_AGENT_EXIT", "0")))
"""


def _echo_run_config(endpoint: Endpoint, run_dir: Path) -> RunConfig:
    settings = run_dir / "settings.json"
    return RunConfig(
        env={
            "ECHO_AGENT_BASE_URL": endpoint.base_url,
            "ECHO_AGENT_MODEL": endpoint.model_id,
            "ECHO_AGENT_CONTEXT": str(endpoint.context_length),
            "ECHO_AGENT_FILE": str(settings),
            "ECHO_AGENT_SERVERS_DIR": str(servers_dir()),
            "ECHO_AGENT_KEY": endpoint.key_or_placeholder,
        },
        args=("--from-launch",),
        files={settings: json.dumps({"model": endpoint.model_id})},
        unset=("ECHO_AGENT_SECRET",),
    )


def _no_setup(endpoint: Endpoint) -> AgentSetup:
    raise AssertionError("launch without --write needs no config edits")


ECHO_AGENT = Agent(
    id="echo-agent",
    name="Echo agent",
    docs_url="https://example.invalid",
    wire_api="openai-chat",
    min_context=0,
    needs_tools=False,
    summary="reports what launch gave it",
    config_file=None,
    build=_no_setup,
    binary="echo-agent",
    install=Install("npm", "echo-agent"),
    run_config=_echo_run_config,
)


@pytest.fixture
def echo_agent(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """The stand-in agent on PATH and in the registry; returns its bin folder."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    program = bin_dir / "echo-agent"
    program.write_text(AGENT_PROGRAM.format(python=sys.executable))
    program.chmod(0o755)
    monkeypatch.setenv("PATH", f"{bin_dir}{os.pathsep}{os.environ['PATH']}")
    monkeypatch.setitem(AGENTS, ECHO_AGENT.id, ECHO_AGENT)
    monkeypatch.chdir(REPO_ROOT)  # `python -m launcher` for the server it starts
    return bin_dir


def _report(output: str) -> dict[str, Any]:
    line = next(line for line in output.splitlines() if line.startswith("REPORT "))
    report: dict[str, Any] = json.loads(line.removeprefix("REPORT "))
    return report


def _gone(pid: int, timeout: float = 10.0) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if not psutil.pid_exists(pid) or psutil.Process(pid).status() == psutil.STATUS_ZOMBIE:
            return True
        time.sleep(0.1)
    return False


def test_launch_starts_a_server_runs_the_agent_with_its_arguments_and_stops_the_server(
    echo_agent: Path, tiny_gguf: Path, capfd: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("ECHO_AGENT_EXIT", "7")
    monkeypatch.setenv("ECHO_AGENT_SECRET", "not for this agent")
    code = main(["launch", "echo-agent", str(tiny_gguf), "--", "-p", "a prompt with spaces", "--url", "x"])
    out, err = capfd.readouterr()
    report = _report(out)
    assert code == 7  # the agent's exit code is launch's
    # The words after -- are the agent's, verbatim, after its run-only arguments (even --url, one of ours).
    assert report["argv"] == ["--from-launch", "-p", "a prompt with spaces", "--url", "x"]
    assert report["served"] and report["model"] in report["served"]
    assert report["context"] != "None"
    assert json.loads(str(report["run_file"])) == {"model": report["model"]}
    assert report["secret_seen"] is False  # the run config's `unset`
    assert not Path(str(report["run_dir"])).exists()  # the run-only folder is removed
    (pid,) = report["server_pids"]
    assert _gone(pid), "the server launch started is still running"
    assert running_servers() == []
    assert "Starting a server" in err and "Server ready at" in err


def test_a_running_server_is_used_and_left_running(
    echo_agent: Path, tiny_gguf: Path, capfd: pytest.CaptureFixture[str]
) -> None:
    server = launch_serve([str(tiny_gguf), "--port", "0"], Path(os.environ["LAUNCHER_HOME"]))
    try:
        (record,) = running_servers()
        assert record.pid == server.process.pid and record.url == server.url  # found on its random port
        code = main(["launch", "echo-agent"])
        out, err = capfd.readouterr()
        assert code == 0, err
        report = _report(out)
        assert report["base_url"] == f"{server.url}/v1"
        assert report["server_pids"] == [server.process.pid]  # no second server
        assert "Using the server at" in err
        assert server.process.poll() is None
    finally:
        server.stop()
    assert not record.path.exists()  # the server removed its run file on SIGTERM


def test_a_running_server_without_the_key_is_refused_and_with_it_used(
    echo_agent: Path, tiny_gguf: Path, capfd: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("LAUNCHER_API_KEY", raising=False)
    server = launch_serve([str(tiny_gguf), "--port", "0", "--api-key", "sk-test"], Path(os.environ["LAUNCHER_HOME"]))
    try:
        assert main(["launch", "echo-agent"]) != 0
        assert "needs an API key" in capfd.readouterr().err
        key_file = Path(os.environ["LAUNCHER_HOME"]) / "key"
        key_file.write_text("sk-test\n")
        assert main(["launch", "echo-agent", "--api-key-file", str(key_file)]) == 0
        assert _report(capfd.readouterr().out)["base_url"] == f"{server.url}/v1"
    finally:
        server.stop()


def test_a_running_server_loads_the_named_model_instead_of_a_second_server_starting(
    echo_agent: Path, tiny_gguf: Path, starter_gguf: Path, capfd: pytest.CaptureFixture[str]
) -> None:
    home = Path(os.environ["LAUNCHER_HOME"])
    assert main(["models", "add", str(starter_gguf), "--name", "starter-copy"]) == 0
    server = launch_serve([str(tiny_gguf), "--port", "0"], home)
    try:
        code = main(["launch", "echo-agent", "starter-copy"])
        out, err = capfd.readouterr()
        assert code == 0, err
        report = _report(out)
        assert report["model"] == "starter-copy" and report["server_pids"] == [server.process.pid]
        assert report["context"] == "32768"  # loaded first, so the agent gets the real window
    finally:
        server.stop()


def test_sigterm_to_launch_stops_its_server_and_removes_the_run_folder(echo_agent: Path, tiny_gguf: Path) -> None:
    process = subprocess.Popen(
        _launch_argv(["launch", "echo-agent", str(tiny_gguf), "--", "--report-run-dir", "--wait-for-sigint"]),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=os.environ.copy(),
    )
    try:
        assert process.stdout is not None
        _, agent_pid, folder = process.stdout.readline().strip().split(" ", 2)
        run_dir = Path(folder)
        assert run_dir.is_dir()
        (record,) = running_servers()
        process.terminate()  # launch only: the agent is not told (a closed window would tell it too)
        _, err = process.communicate(timeout=60)
    finally:
        if process.poll() is None:
            process.kill()
    assert process.returncode == 128 + signal.SIGTERM, err
    assert not run_dir.exists()
    assert _gone(record.pid), "the server outlived launch"
    assert _gone(int(agent_pid)), "the agent outlived launch"


def test_keep_server_leaves_the_started_server_running(echo_agent: Path, tiny_gguf: Path) -> None:
    assert main(["launch", "echo-agent", str(tiny_gguf), "--keep-server"]) == 0
    (record,) = running_servers()
    try:
        assert psutil.Process(record.pid).is_running()
    finally:
        os.kill(record.pid, signal.SIGTERM)
    assert _gone(record.pid, timeout=30)


def test_ctrl_c_goes_to_the_agent_and_launch_still_cleans_up(echo_agent: Path, tiny_gguf: Path, tmp_path: Path) -> None:
    process = subprocess.Popen(
        _launch_argv(["launch", "echo-agent", str(tiny_gguf), "--", "--wait-for-sigint"]),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,  # its own process group: the "terminal" Ctrl-C below reaches launch and agent
        env=os.environ.copy(),
    )
    try:
        assert process.stdout is not None
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline and process.stdout.readline().strip() != "agent waiting":
            pass
        (record,) = running_servers()
        os.killpg(process.pid, signal.SIGINT)  # what a terminal does on Ctrl-C: the whole foreground group
        out, err = process.communicate(timeout=60)
    finally:
        if process.poll() is None:
            process.kill()
    assert "agent got SIGINT" in out, err
    assert process.returncode == 0, err  # the agent's choice, not an interrupted launch
    assert _gone(record.pid), "the server outlived launch"


def test_write_also_writes_the_agents_config_for_good(
    echo_agent: Path, tiny_gguf: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    home = tmp_path / "user"
    monkeypatch.setenv("HOME", str(home))

    def build(endpoint: Endpoint) -> AgentSetup:
        edit = ConfigEdit(".echo/config.json", "json", {"base_url": endpoint.base_url, "model": endpoint.model_id})
        return AgentSetup("echo-agent", "Echo agent", "", "openai-chat", {}, None, (edit,), (), 0, None, ())

    monkeypatch.setitem(AGENTS, ECHO_AGENT.id, replace(ECHO_AGENT, build=build))
    assert main(["launch", "echo-agent", str(tiny_gguf), "--write"]) == 0
    written = json.loads((home / ".echo" / "config.json").read_text())
    assert written["model"] == "tiny-llama" and written["base_url"].endswith("/v1")


def test_an_agent_that_is_not_installed_is_named_with_its_install_command(
    echo_agent: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("PATH", "/nonexistent")
    assert main(["launch", "echo-agent"]) != 0
    assert "npm install -g echo-agent" in capsys.readouterr().err
    assert running_servers() == []  # nothing was started for an agent that cannot run


def test_a_server_that_cannot_start_is_reported_and_leaves_nothing(
    echo_agent: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["launch", "echo-agent", str(tmp_path / "missing.gguf")]) != 0
    err = capsys.readouterr().err
    assert "missing.gguf" in err and "log:" in err
    assert running_servers() == []


def test_stale_run_files_are_ignored_and_removed(tmp_path: Path) -> None:
    folder = servers_dir()
    folder.mkdir(parents=True)
    dead = subprocess.Popen([sys.executable, "-c", "pass"])
    dead.wait()
    (folder / f"{dead.pid}.json").write_text(json.dumps({"url": "http://127.0.0.1:9", "pid": dead.pid}))
    # A live pid that is not the server that wrote the record (the system reused it): its start time differs.
    (folder / f"{os.getpid()}.json").write_text(
        json.dumps({"url": "http://127.0.0.1:9", "pid": os.getpid(), "started_at": 1.0})
    )
    (folder / "broken.json").write_text("{")
    assert running_servers() == []
    assert list(folder.iterdir()) == []


def test_ps_and_connect_find_a_server_on_any_port(tiny_gguf: Path, capsys: pytest.CaptureFixture[str]) -> None:
    server = launch_serve([str(tiny_gguf), "--port", "0"], Path(os.environ["LAUNCHER_HOME"]))
    try:
        assert main(["ps", "--json"]) == 0
        listing = json.loads(capsys.readouterr().out)
        assert [m["id"] for m in listing["models"]] == [server.ready["model"]]
        assert main(["connect", "aider", "--json"]) == 0
        setup = json.loads(capsys.readouterr().out)
        assert setup["env"]["OPENAI_API_BASE"] == f"{server.url}/v1"
    finally:
        server.stop()


def _launch_argv(arguments: list[str]) -> list[str]:
    """`launcher ARGUMENTS` in a child Python that has the stand-in agent registered first."""
    code = textwrap.dedent(
        f"""
        import sys
        sys.path.insert(0, {str(REPO_ROOT)!r})
        from launcher.integrations.agents import AGENTS
        from tests.integrations.test_launch import ECHO_AGENT
        from launcher.cli import main
        AGENTS[ECHO_AGENT.id] = ECHO_AGENT
        sys.exit(main({arguments!r}))
        """
    )
    return [sys.executable, "-c", code]
