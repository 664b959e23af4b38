"""`launcher serve MODEL --engine vllm|sglang`: the engine's own server as a supervised child.

vLLM needs an NVIDIA GPU (or its 3.5 GB CPU build, which scripts/check-vllm installs and checks on
its own), so here a stand-in takes the place of the `vllm` program on PATH: a script that reads the
arguments `vllm serve` gets and serves the model with a real `launcher serve` (an OpenAI-compatible
server with /health, like vLLM's). Everything on the launcher's side is real: finding the program,
the command line, the free port and key, waiting for /health, serving through the proxy, and
stopping the child with the server.
"""

from __future__ import annotations

import ast
import importlib.util
import os
import signal
import stat
import sys
import time
from pathlib import Path

import httpx
import openai
import pytest

from launcher.engines.child.command import child_command
from launcher.hardware.recorded import load_recorded
from tests.conformance.servers import launch_serve
from tests.fixtures.models import write_tiny_gguf

STAND_IN = """\
#!{python}
# A stand-in for `vllm serve MODEL --served-model-name NAME --port PORT --host HOST` (key in VLLM_API_KEY):
# a real launcher server with the same name, port and key.
import os, sys
args = sys.argv[1:]
assert args[0] == "serve", args
flag = lambda name: args[args.index(name) + 1]
with open(os.environ["STAND_IN_RECORD"], "w") as record:
    record.write(repr({{"pid": os.getpid(), "argv": args, "has_key": bool(os.environ.get("VLLM_API_KEY"))}}))
os.environ["LAUNCHER_API_KEY"] = os.environ["VLLM_API_KEY"]
os.execv(sys.executable, [sys.executable, "-m", "launcher", "serve", args[1], "--engine", "llamacpp",
    "--context", "2048", "--alias", flag("--served-model-name"), "--host", flag("--host"), "--port", flag("--port")])
"""


def _pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return True


@pytest.mark.skipif(importlib.util.find_spec("vllm") is not None, reason="the real vLLM is installed here")
def test_serve_runs_vllm_as_a_child_and_serves_through_it(tmp_path: Path) -> None:
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    program = bin_dir / "vllm"
    program.write_text(STAND_IN.format(python=sys.executable))
    program.chmod(program.stat().st_mode | stat.S_IEXEC)
    record = tmp_path / "stand-in.txt"
    tiny = write_tiny_gguf(tmp_path / "tiny.gguf")
    environment = {"PATH": f"{bin_dir}{os.pathsep}{os.environ['PATH']}", "STAND_IN_RECORD": str(record)}
    with pytest.MonkeyPatch.context() as patch:
        for name, value in environment.items():
            patch.setenv(name, value)
        server = launch_serve([str(tiny), "--engine", "vllm", "--alias", "tiny", "--port", "0"], tmp_path / "home")
    try:
        assert server.ready["model"] == "tiny" and server.ready["engine"] == "vllm"
        child = ast.literal_eval(record.read_text())
        argv = child["argv"]
        assert argv[1] == str(tiny) and argv[argv.index("--host") + 1] == "127.0.0.1"
        assert "--api-key" not in argv and child["has_key"]  # the key travels in VLLM_API_KEY, not in `ps`
        with openai.OpenAI(base_url=server.base_url, api_key="x", max_retries=0) as client:
            reply = client.chat.completions.create(
                model="any-name", messages=[{"role": "user", "content": "hello"}], max_tokens=4
            )
        assert reply.model == "tiny" and reply.usage is not None and reply.usage.completion_tokens > 0
        cards = httpx.get(server.base_url + "/models").json()["data"]
        assert [card["id"] for card in cards] == ["tiny"] and cards[0]["engine"] == "vllm"
    finally:
        assert server.stop() == -signal.SIGTERM  # stopped as a server without a child is: by the signal
    deadline = time.monotonic() + 10
    while _pid_alive(child["pid"]) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert not _pid_alive(child["pid"]), "the child outlived the server"
    assert "[vllm]" in server.stderr_path.read_text()  # its output reaches the server's log, marked


@pytest.mark.skipif(importlib.util.find_spec("vllm") is not None, reason="the real vLLM is installed here")
def test_a_missing_engine_is_a_clear_error(tmp_path: Path) -> None:
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("PATH", str(tmp_path))  # no vllm on it
        with pytest.raises(RuntimeError) as failed:
            launch_serve(["some/model", "--engine", "vllm", "--port", "0"], tmp_path / "home")
    said = str(failed.value)  # the LAUNCHER_ERROR line the app reads, and the server's stderr
    assert "'kind': 'EngineUnavailableError'" in said
    assert "vLLM is not installed here" in said and "launcher handoff vllm" in said


@pytest.mark.skipif(importlib.util.find_spec("vllm") is not None, reason="the real vLLM is installed here")
def test_an_engine_program_that_cannot_run_stops_the_start_with_its_error(tmp_path: Path) -> None:
    # A `vllm` shim whose interpreter is gone (a moved venv, a broken pipx): the server must not say it is
    # ready and then answer every request with a 502; it stops at the start, saying why.
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    program = bin_dir / "vllm"
    program.write_text("#!/nonexistent/python3\n")
    program.chmod(program.stat().st_mode | stat.S_IEXEC)
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("PATH", f"{bin_dir}{os.pathsep}{os.environ['PATH']}")
        with pytest.raises(RuntimeError) as failed:
            server = launch_serve([str(tmp_path / "folder"), "--engine", "vllm", "--port", "0"], tmp_path / "home")
            server.stop()  # it said it was ready: stopped before the test fails
    said = str(failed.value)
    assert "vllm could not be started" in said and "LAUNCHER_READY" not in said


def test_the_command_line_for_a_model_folder(tmp_path: Path) -> None:
    folder = tmp_path / "Qwen3-0.6B"
    folder.mkdir()
    (folder / "config.json").write_text('{"model_type": "qwen3"}')
    gpu = load_recorded("rtx4090-desktop")
    vllm = child_command(
        "vllm", str(folder), port=9100, api_key="k", context=4096, program=["vllm", "serve"], machine=gpu
    )
    assert vllm.argv == [
        "vllm",
        "serve",
        str(folder),
        "--served-model-name",
        "Qwen3-0.6B",
        "--port",
        "9100",
        "--enable-auto-tool-choice",  # agents send tools: vLLM answers them only with a parser
        "--tool-call-parser",
        "hermes",
        "--host",
        "127.0.0.1",
        "--max-model-len",
        "4096",
    ]
    assert vllm.env == {"VLLM_API_KEY": "k"} and vllm.served_name == "Qwen3-0.6B"
    on_cpu = child_command(
        "vllm", str(folder), port=9100, api_key="k", program=["vllm"], machine=load_recorded("this-linux-vm")
    )
    assert on_cpu.env["VLLM_CPU_KVCACHE_SPACE"] == "5"  # a quarter of the VM's 22 GiB free, not vLLM's 90% of RAM
    sglang = child_command("sglang", "org/some-model", port=9100, api_key="k", served_name="m", program=["sglang"])
    assert sglang.argv[:3] == ["sglang", "--model-path", "org/some-model"]
    assert sglang.argv[sglang.argv.index("--api-key") + 1] == "k" and "--enable-metrics" in sglang.argv
    assert sglang.served_name == "m" and sglang.env == {}


def test_a_library_model_goes_to_the_child_as_its_folder(
    tmp_path: Path, tiny_gguf: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The app's rows name library models; vLLM would look a library name up on the Hub. It gets the folder,
    # served under the library's name, and a GGUF (which it does not load) is refused before any start.
    from launcher.catalog import library
    from launcher.core.config import ServeConfig
    from launcher.core.errors import ModelFormatError
    from launcher.engines import registry

    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    program = bin_dir / "vllm"
    program.write_text("#!/bin/sh\nexit 1\n")  # found on PATH, never run here
    program.chmod(program.stat().st_mode | stat.S_IEXEC)
    monkeypatch.setenv("PATH", f"{bin_dir}{os.pathsep}{os.environ['PATH']}")
    folder = tmp_path / "checkpoint"
    folder.mkdir()
    (folder / "config.json").write_text('{"model_type": "llama"}')
    (folder / "model.safetensors").write_bytes(b"\0" * 16)
    library.add_imported(folder, name="my-checkpoint")
    library.add_imported(tiny_gguf, name="my-gguf")
    vllm = registry.child("vllm")
    plan = vllm.plan(ServeConfig(model="my-checkpoint", engine="vllm"), load_recorded("rtx4090-desktop"))
    assert str(folder.resolve()) in plan.child.command.argv and plan.served_name == "my-checkpoint"
    with pytest.raises(ModelFormatError, match="does not load GGUF models"):
        vllm.plan(ServeConfig(model="my-gguf", engine="vllm"), load_recorded("rtx4090-desktop"))
