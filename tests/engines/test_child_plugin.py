"""A child engine declared only through an entry point is an engine like the built-ins.

A temporary folder holds a package whose `spec.py` declares an engine that runs as a child server
(`runs_as="child"`), and a dist-info whose entry_points.txt names it in `[launcher.engines]`, as
`pip install` would leave a plug-in. Its program is the launcher's own server (`launcher serve` on
the tiny GGUF with llama.cpp), so the child is a real OpenAI-compatible server. With that folder on
the path, and nothing in `launcher/` edited for it: `launcher detect` lists it, `launcher serve
--engine NAME` serves through it via the model pool, the app's engine choice lists it, and the advisor
recommends it where its spec ranks it first.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import textwrap
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import openai
import pytest

from launcher import engine_specs
from tests.conformance.servers import REPO_ROOT, RunningServer, launch_serve
from tests.fixtures.models import write_tiny_gguf

NAME = "plugchild"
PACKAGE = "launcher_plugchild"

PLUGIN_SPEC = '''\
"""A test plug-in: an engine that runs as a child server, the launcher's own `launcher serve`."""

import sys

from launcher.engine_specs import EngineSpec
from launcher.engine_specs.child import ChildArguments, ChildLaunch, ChildRequest
from launcher.engine_specs.preference import Preference, Situation


def program() -> list[str]:
    return [sys.executable, "-m", "launcher", "serve"]


def arguments(request: ChildRequest) -> ChildArguments:
    name = request.served_name or "plugged-model"
    words = [request.model, "--engine", "llamacpp", "--no-settings", "--no-library", "--context", "2048"]
    return ChildArguments([*words, "--alias", name, "--port", str(request.port)], name, "--context")


def prefer(situation: Situation) -> Preference:
    return Preference(
        rank=-1,  # before every built-in
        tiers=(("full_gpu", "unified", "cpu", "partial"),),
        reason=lambda won: "the plug-in ranks itself first here",
    )


SPEC = EngineSpec(
    name="{name}",
    label="Plugged child",
    formats=("gguf",),
    factory="launcher.engines.child.engine:ChildEngine",
    runtime_module="{package}",
    distribution="{distribution}",
    pip_extra="{name}",
    runs_as="child",
    prefer=prefer,
    child=ChildLaunch(
        program=program,
        arguments=arguments,
        looked_for="this Python cannot run the launcher",
        install="install the launcher",
        key_env="LAUNCHER_API_KEY",
    ),
)
'''


@pytest.fixture
def plugin_dir(tmp_path: Path) -> Path:
    """The plug-in as `pip install` would leave it: its package and its dist-info with the entry point."""
    folder = tmp_path / "site"
    package = folder / PACKAGE
    package.mkdir(parents=True)
    (package / "__init__.py").write_text('"""A test plug-in engine."""\n')
    distribution = PACKAGE.replace("_", "-")
    (package / "spec.py").write_text(
        textwrap.dedent(PLUGIN_SPEC).format(name=NAME, package=PACKAGE, distribution=distribution)
    )
    dist_info = folder / f"{PACKAGE}-1.0.dist-info"
    dist_info.mkdir()
    (dist_info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {distribution}\nVersion: 1.0\n")
    (dist_info / "entry_points.txt").write_text(f"[launcher.engines]\n{NAME} = {PACKAGE}.spec:SPEC\n")
    return folder


@pytest.fixture
def plugged_in(plugin_dir: Path) -> Iterator[Path]:
    """The plug-in on this process's path too (for the app's panel), removed after."""
    sys.path.insert(0, str(plugin_dir))
    engine_specs.refresh()
    try:
        yield plugin_dir
    finally:
        sys.path.remove(str(plugin_dir))
        for module in [name for name in sys.modules if name == PACKAGE or name.startswith(PACKAGE + ".")]:
            del sys.modules[module]
        engine_specs.refresh()


def _env(plugin_dir: Path, home: Path) -> dict[str, str]:
    """A launcher subprocess's environment with the plug-in on its path (and its children's)."""
    return {**os.environ, "LAUNCHER_HOME": str(home), "PYTHONPATH": os.pathsep.join([str(plugin_dir), str(REPO_ROOT)])}


def _launcher(plugin_dir: Path, home: Path, *args: str) -> str:
    done = subprocess.run(
        [sys.executable, "-m", "launcher", *args],
        env=_env(plugin_dir, home),
        cwd=REPO_ROOT,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    return done.stdout


def _serve(plugin_dir: Path, home: Path, *args: str) -> RunningServer:
    """`launcher serve ARGS` with the plug-in on its path, once its ready line is out."""
    return launch_serve(list(args), home, python_path=(plugin_dir,))


def _listening(url: str) -> bool:
    try:
        httpx.get(url + "/health", timeout=1.0)
    except httpx.HTTPError:
        return False
    return True


def test_detect_lists_the_plugged_in_child_engine(plugin_dir: Path, tmp_path: Path) -> None:
    engines = json.loads(_launcher(plugin_dir, tmp_path / "home", "detect", "--json"))["engines"]
    assert engines[NAME]["label"] == "Plugged child" and engines[NAME]["usable"], engines[NAME]
    assert engines[NAME]["version"] == "1.0" and "-m launcher serve" in engines[NAME]["reason"]
    assert f"  {NAME}: ready: " in _launcher(plugin_dir, tmp_path / "home", "detect")


def test_serve_runs_the_plugged_in_engine_as_a_child_through_the_pool(plugin_dir: Path, tmp_path: Path) -> None:
    tiny = write_tiny_gguf(tmp_path / "tiny.gguf")
    server = _serve(plugin_dir, tmp_path / "home", str(tiny), "--engine", NAME, "--alias", "tiny", "--port", "0")
    try:
        assert server.ready["model"] == "tiny" and server.ready["engine"] == NAME
        with openai.OpenAI(base_url=server.base_url, api_key="x", max_retries=0) as client:
            reply = client.chat.completions.create(
                model="any-name", messages=[{"role": "user", "content": "hello"}], max_tokens=4
            )
        assert reply.model == "tiny" and reply.usage is not None and reply.usage.completion_tokens > 0
        cards = httpx.get(server.base_url + "/models").json()["data"]
        assert [card["id"] for card in cards] == ["tiny"] and cards[0]["engine"] == NAME
        served_by = httpx.get(server.url + "/launcher/models").json()["remote_models"]["tiny"]
        child_url = str(served_by["url"]).removesuffix("/v1")
        assert served_by["remote"] == NAME and _listening(child_url)
    finally:
        assert server.stop() == -signal.SIGTERM
    deadline = time.monotonic() + 10
    while _listening(child_url) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert not _listening(child_url), "the child outlived the server"
    assert f"[{NAME}]" in server.stderr_path.read_text()  # its output reaches the server's log, marked


def test_the_advisor_recommends_it_where_its_spec_ranks_it_first(plugin_dir: Path, tmp_path: Path) -> None:
    out = _launcher(plugin_dir, tmp_path / "home", "recommend", "qwen3-8b", "--machine", "this-linux-vm", "--json")
    choice = json.loads(out)["choice"]
    assert choice["engine"] == NAME and choice["format"] == "gguf"


def test_the_apps_engine_choice_lists_it(plugged_in: Path, qtbot) -> None:  # type: ignore[no-untyped-def]
    from launcher.ui.panels.server import ServerPanel
    from launcher.ui.server_process import ServerProcess

    panel = ServerPanel(ServerProcess())
    qtbot.addWidget(panel)
    items = [(panel.engine.itemText(i), panel.engine.itemData(i)) for i in range(panel.engine.count())]
    assert ("Plugged child", NAME) in items
    panel.engine.setCurrentIndex(panel.engine.findData(NAME))
    assert panel.config().engine == NAME


def test_without_the_plugin_it_is_unknown() -> None:
    assert NAME not in engine_specs.names()
