"""The MCP host against real servers: the demo server the tests define with the SDK (tests/chat/mcp_servers/
demo_server.py) over stdio and Streamable HTTP, and the published filesystem server from npm.

Nothing here sleeps to synchronize: the host is waited on with `wait_ready`, the HTTP server by the
line it prints once it listens. Timeouts are generous for a busy 2-core machine, except the ones a
test is about (a tool's timeout, a start timeout), which are short on purpose.
"""

from __future__ import annotations

import os
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import keyring
import psutil
import pytest

from launcher.chat.mcp_config import McpServer, save
from launcher.chat.mcp_host import McpHost, ServerState, ToolApprovals, ToolResult, qualified_names, server_prefixes
from tests.chat.mcp_npm import install_filesystem_server
from tests.server import keyring_backend

DEMO = Path(__file__).with_name("mcp_servers") / "demo_server.py"
START_S = 90.0  # a cold Python (or Node) start on a loaded 2-core machine


def demo(name: str = "demo", mode: str = "stdio", **fields: object) -> McpServer:
    return McpServer.model_validate({"name": name, "command": sys.executable, "args": [str(DEMO), mode], **fields})


@pytest.fixture(autouse=True)
def test_keyring(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(keyring_backend.FILE_ENV, str(tmp_path / "keyring.json"))
    monkeypatch.setattr(keyring.core, "_keyring_backend", keyring_backend.FileKeyring())


@pytest.fixture
def running() -> Iterator[list[McpHost]]:
    """Hosts a test starts; stopped at the end whatever happened."""
    hosts: list[McpHost] = []
    yield hosts
    for host in hosts:
        host.stop()


def started(hosts: list[McpHost], servers: dict[str, McpServer], **options: float) -> McpHost:
    host = McpHost(servers, **options)
    hosts.append(host)
    host.start()
    host.wait_ready(START_S)
    return host


def http_demo(*extra: str) -> tuple[subprocess.Popen[str], str]:
    """The demo server over Streamable HTTP on a free port; the caller kills it."""
    process = subprocess.Popen(
        [sys.executable, str(DEMO), "http", "--port", "0", *extra],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    line = process.stdout.readline() if process.stdout else ""  # printed once it listens
    if not line.startswith("DEMO_READY "):
        process.kill()
        _, err = process.communicate(timeout=30)
        raise AssertionError(f"the HTTP demo server did not start: {line!r} {err[-2000:]}")
    return process, f"http://127.0.0.1:{int(line.split()[1])}/mcp"


def demo_children() -> list[psutil.Process]:
    """This process's running demo servers. Other tests' children that ended and wait to be collected
    (zombies) have no command line to read: they are not running, so they are not counted."""
    found = []
    for child in psutil.Process().children(recursive=True):
        try:
            if str(DEMO) in " ".join(child.cmdline()):
                found.append(child)
        except (psutil.ZombieProcess, psutil.NoSuchProcess):
            continue
    return found


def alive(pid: int) -> bool:
    """Whether the process runs (a zombie has ended: only its exit status waits to be collected)."""
    try:
        return psutil.Process(pid).status() != psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return False


@pytest.fixture
def http_url() -> Iterator[str]:
    process, url = http_demo()
    try:
        yield url
    finally:
        process.kill()
        process.communicate(timeout=30)


def test_a_stdio_server_lists_and_runs_its_tools(running: list[McpHost]) -> None:
    changes: list[tuple[str, str, str]] = []
    host = McpHost({"demo": demo()}, start_timeout_s=START_S)
    running.append(host)
    host.on_change(lambda state: changes.append((state.name, state.state, threading.current_thread().name)))
    host.start()
    host.wait_ready(START_S)

    state = host.states()["demo"]
    assert state.state == "ready", state
    assert [tool.name for tool in state.tools] == ["add", "slow", "crash", "echo_env", "pid"]
    assert changes == [("demo", "starting", "MainThread"), ("demo", "ready", "mcp-host")]
    add = next(entry for entry in host.openai_tools() if entry["function"]["name"] == "demo__add")
    assert add["type"] == "function"
    assert add["function"]["description"] == "Add two numbers."
    assert add["function"]["parameters"]["required"] == ["a", "b"]

    result = host.call("demo__add", {"a": 2, "b": 3.5})
    assert (result.text, result.is_error) == ("5.5", False)


def test_a_stdio_server_gets_only_the_minimal_environment_and_its_own(
    running: list[McpHost], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("HF_TOKEN", "hf_must_not_leak")
    monkeypatch.setenv("LAUNCHER_API_KEY", "must-not-leak-either")
    host = started(running, {"demo": demo(env={"DEMO_SETTING": "from-config"})}, start_timeout_s=START_S)
    assert host.call("demo__echo_env", {"name": "HF_TOKEN"}).text == "HF_TOKEN is not set"
    assert host.call("demo__echo_env", {"name": "LAUNCHER_API_KEY"}).text == "LAUNCHER_API_KEY is not set"
    assert host.call("demo__echo_env", {"name": "LAUNCHER_HOME"}).text == "LAUNCHER_HOME is not set"
    assert host.call("demo__echo_env", {"name": "DEMO_SETTING"}).text == "DEMO_SETTING=from-config"
    assert host.call("demo__echo_env", {"name": "PATH"}).text == f"PATH={os.environ['PATH']}"


def test_a_secret_from_the_keyring_reaches_the_server(running: list[McpHost], tmp_path: Path) -> None:
    save({"demo": demo(env={"DEMO_TOKEN": "s3cret"})})  # the file now says "keyring:"
    from launcher.chat.mcp_config import load

    host = started(running, load(), start_timeout_s=START_S)
    assert host.call("demo__echo_env", {"name": "DEMO_TOKEN"}).text == "DEMO_TOKEN=s3cret"


def test_a_secret_gone_from_the_keyring_fails_that_server_clearly(running: list[McpHost]) -> None:
    host = started(running, {"demo": demo(env={"DEMO_TOKEN": "keyring:"})}, start_timeout_s=START_S)
    state = host.states()["demo"]
    assert state.state == "failed"
    assert state.error is not None and "env DEMO_TOKEN" in state.error and "Settings" in state.error


def test_stop_leaves_no_server_process(running: list[McpHost]) -> None:
    """One server ready, one still starting (it never answers): stop ends both processes."""
    host = McpHost({"demo": demo(), "mute": demo("mute", "mute")}, start_timeout_s=START_S)
    running.append(host)
    demo_ready = threading.Event()
    host.on_change(lambda state: demo_ready.set() if (state.name, state.state) == ("demo", "ready") else None)
    host.start()
    assert demo_ready.wait(START_S)
    assert host.states()["mute"].state == "starting"
    pid = int(host.call("demo__pid", {}).text)
    mute = [c.pid for c in demo_children() if c.pid != pid]
    assert alive(pid) and len(mute) == 1
    stopping = time.monotonic()
    host.stop()
    print(f"stop took {time.monotonic() - stopping:.2f} s")
    for gone in (pid, *mute):
        assert not alive(gone), gone
    assert {state.state for state in host.states().values()} == {"stopped"}
    result = host.call("demo__add", {"a": 1, "b": 1})
    assert result.is_error  # a call after stop is an answer, not an exception


def test_stop_during_a_call_answers_the_caller_at_once(running: list[McpHost]) -> None:
    host = started(running, {"demo": demo()}, start_timeout_s=START_S)
    answers: list[ToolResult] = []
    caller = threading.Thread(target=lambda: answers.append(host.call("demo__slow", {"seconds": 300}, timeout_s=600)))
    caller.start()
    deadline = time.monotonic() + START_S
    while "slow started" not in host.states()["demo"].stderr:  # the server got the call
        assert time.monotonic() < deadline and caller.is_alive()
        threading.Event().wait(0.02)
    stopping = time.monotonic()
    host.stop()
    caller.join(30)
    print(f"stop with a call in flight took {time.monotonic() - stopping:.2f} s")
    assert answers == [ToolResult("The MCP servers were stopped while slow of demo ran.", True)]


def test_a_streamable_http_server_lists_and_runs_its_tools(running: list[McpHost], http_url: str) -> None:
    host = started(running, {"web": McpServer(name="web", url=http_url)}, start_timeout_s=START_S)
    assert host.states()["web"].state == "ready"
    assert host.call("web__add", {"a": 40, "b": 2}).text == "42"


def test_http_headers_carry_a_secret_from_the_keyring(running: list[McpHost]) -> None:
    process, url = http_demo("--token", "t0ken")
    try:
        save(
            {
                "good": McpServer(name="good", url=url, headers={"Authorization": "Bearer t0ken"}),
                "bad": McpServer(name="bad", url=url, headers={"Authorization": "Bearer wrong"}),
            }
        )
        from launcher.chat.mcp_config import load

        host = started(running, load(), start_timeout_s=START_S)
        states = host.states()
        assert states["good"].state == "ready", states["good"]
        assert host.call("good__add", {"a": 1, "b": 2}).text == "3"
        assert states["bad"].state == "failed"
        assert states["bad"].error == (
            "The MCP server bad answered HTTP 401 Unauthorized (check the token or key in its headers)."
        )
    finally:
        process.kill()
        process.communicate(timeout=30)


def test_a_tool_that_hangs_times_out_and_the_server_keeps_working(running: list[McpHost], http_url: str) -> None:
    host = started(
        running, {"demo": demo(timeout_s=1), "web": McpServer(name="web", url=http_url)}, start_timeout_s=START_S
    )
    for qualified, limit in (("demo__slow", None), ("web__slow", 1.0)):
        calling = time.monotonic()
        result = host.call(qualified, {"seconds": 120}, timeout_s=limit)
        took = time.monotonic() - calling
        print(f"{qualified} timed out after {took:.2f} s")
        assert result.is_error
        assert "did not finish within 1 s" in result.text and "slow" in result.text
        assert took < 30
    assert host.call("demo__add", {"a": 1, "b": 1}).text == "2"
    assert host.call("web__add", {"a": 1, "b": 1}).text == "2"


def test_a_crash_during_a_call_is_a_clear_result_with_the_servers_last_words(
    running: list[McpHost], http_url: str
) -> None:
    host = started(running, {"demo": demo(), "web": McpServer(name="web", url=http_url)}, start_timeout_s=START_S)
    pid = int(host.call("demo__pid", {}).text)
    result = host.call("demo__crash", {})
    assert result.is_error
    assert "MCP server demo stopped while running crash" in result.text
    assert "crashing on purpose" in result.text  # its stderr tail
    state = host.states()["demo"]
    assert state.state == "failed" and state.tools == ()
    assert "crashing on purpose" in state.stderr
    assert not alive(pid)
    assert "demo__add" not in {tool.qualified for tool in host.tools()}
    after = host.call("demo__add", {"a": 1, "b": 1})
    assert after.is_error and "not running" in after.text
    assert host.call("web__add", {"a": 1, "b": 1}).text == "2"  # the other server is unaffected


def test_servers_that_cannot_start_fail_clearly_without_holding_up_the_others(running: list[McpHost]) -> None:
    starting = time.monotonic()
    host = started(
        running,
        {
            "broken": demo("broken", "broken"),
            "missing": McpServer(name="missing", command="/nonexistent/mcp-server"),
            "demo": demo(),
            "off": demo("off", enabled=False),
        },
        start_timeout_s=START_S,
    )
    print(f"all settled after {time.monotonic() - starting:.2f} s")
    states = host.states()
    assert states["demo"].state == "ready"
    broken = states["broken"]
    assert broken.state == "failed" and broken.error == "The MCP server broken ended before it answered."
    assert "cannot start: DEMO_CONFIG is missing" in broken.stderr
    missing = states["missing"]
    assert missing.state == "failed" and missing.error is not None
    assert "could not be started" in missing.error and "/nonexistent/mcp-server" in missing.error
    assert states["off"].state == "stopped"  # disabled: never started
    assert {tool.server for tool in host.tools()} == {"demo"}


def test_a_server_that_never_answers_fails_after_the_start_timeout(running: list[McpHost]) -> None:
    host = started(running, {"mute": demo("mute", "mute")}, start_timeout_s=3)
    mute = host.states()["mute"]
    assert mute.state == "failed" and mute.error == "The MCP server mute did not answer within 3 s of starting."


def test_unknown_tools_are_an_answer_too(running: list[McpHost]) -> None:
    host = started(running, {"demo": demo()}, start_timeout_s=START_S)
    result = host.call("demo__nothing", {})
    assert result.is_error and "no tool named 'demo__nothing'" in result.text and "demo__add" in result.text
    assert host.call("demo__add", {"a": "x", "b": 1}).is_error  # the server's own error, as a result


def test_tool_names_for_the_model_are_safe_and_unique(running: list[McpHost]) -> None:
    host = started(running, {"my server.v2": demo("my server.v2"), "my_server_v2": demo("my_server_v2")})
    names = [tool.qualified for tool in host.tools()]
    assert len(names) == len(set(names)) == 10
    assert all(len(name) <= 64 and name.replace("_", "a").replace("-", "a").isalnum() for name in names)
    assert {"my_server_v2__add", "my_server_v2_2__add"} <= set(names)  # in configuration order
    qualified = next(t.qualified for t in host.tools() if t.server == "my server.v2" and t.name == "add")
    assert host.call(qualified, {"a": 1, "b": 2}).text == "3"


def test_colliding_names_follow_the_configuration_order_not_which_server_is_ready_first(
    running: list[McpHost],
) -> None:
    # "fs.write" comes first in the configuration but starts last: it still gets the plain name, so
    # an approval or a history that names "fs_write__add" means the same tool after every restart.
    late = McpServer.model_validate(
        {"name": "fs.write", "command": "sh", "args": ["-c", f'sleep 2; exec "{sys.executable}" "{DEMO}" stdio']}
    )
    host = McpHost({"fs.write": late, "fs_write": demo("fs_write")}, start_timeout_s=START_S)
    running.append(host)
    ready: list[str] = []
    host.on_change(lambda state: ready.append(state.name) if state.state == "ready" else None)
    host.start()
    host.wait_ready(START_S)
    assert ready == ["fs_write", "fs.write"]  # the later one in the file was ready first
    servers = {tool.qualified: tool.server for tool in host.tools() if tool.name == "add"}
    assert servers == {"fs_write__add": "fs.write", "fs_write_2__add": "fs_write"}
    assert host.resolve("fs_write__add") == next(t for t in host.tools() if t.server == "fs.write" and t.name == "add")


def test_qualified_names_depend_on_the_configuration_alone() -> None:
    servers = {name: demo(name) for name in ("a", "a__b", "fs.write", "fs_write", "x" * 70)}
    prefixes = server_prefixes(servers)
    names = {
        server: qualified_names(server, ["add", "b__c", "c", "r.f", "r_f", "y" * 70], prefixes) for server in servers
    }
    every = [name for named in names.values() for name in named.values()]
    assert len(every) == len(set(every)) and all(len(name) <= 64 for name in every)
    assert names["fs.write"]["add"] == "fs_write__add" and names["fs_write"]["add"] == "fs_write_2__add"
    assert names["a"]["add"] == "a__add" and names["a"]["r_f"] == "a__r_f_2"
    # "a" + "b__c" and "a__b" + "c" would both spell a__b__c: each gets its own hash instead
    assert names["a"]["b__c"] != names["a__b"]["c"] and names["a"]["b__c"].startswith("a__b__c_")
    assert names == {
        server: qualified_names(server, ["add", "b__c", "c", "r.f", "r_f", "y" * 70], prefixes) for server in servers
    }


def test_always_allow_holds_for_a_tool_not_a_name_and_ends_with_a_restart(running: list[McpHost]) -> None:
    host = started(running, {"demo": demo()}, start_timeout_s=START_S)
    approvals = ToolApprovals(host)
    assert "demo__add" not in approvals
    approvals.add("demo__add")
    approvals.add("demo__nothing")  # a name that stands for no tool is never approved
    assert "demo__add" in approvals and "demo__slow" not in approvals and len(approvals) == 1
    host.restart({"demo": demo()})  # the same name may now run another program: ask again
    host.wait_ready(START_S)
    assert "demo__add" not in approvals and len(approvals) == 0
    approvals.add("demo__add")
    assert "demo__add" in approvals
    host.stop()
    assert "demo__add" not in approvals


def test_a_set_cancel_event_answers_a_call_at_once(running: list[McpHost]) -> None:
    host = started(running, {"demo": demo()}, start_timeout_s=START_S)
    cancel = threading.Event()
    answers: list[ToolResult] = []
    caller = threading.Thread(
        target=lambda: answers.append(host.call("demo__slow", {"seconds": 60}, timeout_s=120, cancel=cancel))
    )
    caller.start()
    deadline = time.monotonic() + START_S
    while "slow started" not in host.states()["demo"].stderr:
        assert time.monotonic() < deadline and caller.is_alive()
        threading.Event().wait(0.02)
    cancelling = time.monotonic()
    cancel.set()
    caller.join(30)
    took = time.monotonic() - cancelling
    print(f"a cancelled call answered after {took:.2f} s")
    assert took < 2.0
    assert answers == [ToolResult("Stopped: the user stopped the turn while slow of MCP server demo ran.", True)]
    assert host.call("demo__add", {"a": 1, "b": 2}, cancel=threading.Event()).text == "3"  # the server goes on


def test_restart_takes_a_new_configuration(running: list[McpHost]) -> None:
    host = started(running, {"one": demo("one")}, start_timeout_s=START_S)
    seen: list[ServerState] = []
    host.on_change(seen.append)
    host.restart({"two": demo("two")})
    host.wait_ready(START_S)
    assert {name: state.state for name, state in host.states().items()} == {"two": "ready"}
    assert ("two", "ready") in [(state.name, state.state) for state in seen]  # callbacks stay


def test_after_close_a_late_restart_starts_nothing(running: list[McpHost]) -> None:
    host = started(running, {"one": demo("one")}, start_timeout_s=START_S)
    host.close()
    host.restart({"one": demo("one")})  # what a Settings change queued just before quitting does
    assert host.states() == {"one": ServerState("one", "stopped")}
    assert not demo_children()


def test_the_published_filesystem_server_from_npm(running: list[McpHost], tmp_path: Path) -> None:
    try:
        executable = install_filesystem_server()
    except RuntimeError as err:
        if os.environ.get("LAUNCHER_AGENT_TESTS") == "required":
            pytest.fail(str(err))
        pytest.skip(str(err))
    folder = tmp_path / "shared"
    folder.mkdir()
    (folder / "notes.txt").write_text("remember the milk\n")
    (folder / "sub").mkdir()
    server = McpServer(name="files", command=str(executable), args=[str(folder)])
    host = started(running, {"files": server}, start_timeout_s=START_S)
    state = host.states()["files"]
    assert state.state == "ready", state
    names = {tool.name for tool in state.tools}
    assert {"read_text_file", "list_directory"} <= names
    listing = host.call("files__list_directory", {"path": str(folder)})
    assert not listing.is_error and "[FILE] notes.txt" in listing.text and "[DIR] sub" in listing.text
    read = host.call("files__read_text_file", {"path": str(folder / "notes.txt")})
    assert (read.text, read.is_error) == ("remember the milk\n", False)
    outside = host.call("files__read_text_file", {"path": "/etc/hostname"})
    assert outside.is_error and "denied" in outside.text.lower()
