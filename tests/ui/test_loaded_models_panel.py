"""The Server page's "Loaded models" and its library options, with real `launcher serve` processes and
two tiny GGUFs (different random weights): both loaded by requests, two rows, Unload frees one on the server.

One test drives the panel against a server with `[models.a]`/`[models.b]` presets behind an API key;
another goes through the window, with "Load other library models on request" ticked (the default). The quick ones
check the form's mapping onto `ServeConfig` and a busy row's button.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from launcher.catalog.library import add_imported
from launcher.core.config import ServeConfig
from launcher.hardware.recorded import load_recorded
from launcher.ui.loaded_models import parse_loaded_models
from launcher.ui.main_window import MainWindow
from launcher.ui.panels.loaded_models import ACTIVITY, DECODE, ENGINE, MEMORY, LoadedModelsPanel
from launcher.ui.panels.server import ServerPanel
from launcher.ui.server_process import ServerEndpoint, ServerProcess
from tests.conformance.servers import SERVERS, RunningServer, launch_serve
from tests.fixtures.models import write_tiny_gguf

LLAMACPP = next(spec for spec in SERVERS if spec.engine == "llamacpp")
KEY = "sk-local-test"
HELLO = [{"role": "user", "content": "hello"}]


@pytest.fixture
def two_models(tmp_path: Path) -> tuple[Path, Path]:
    return write_tiny_gguf(tmp_path / "tiny-a.gguf", seed=1), write_tiny_gguf(tmp_path / "tiny-b.gguf", seed=2)


@pytest.fixture
def presets_server(two_models: tuple[Path, Path], tmp_path: Path) -> Iterator[RunningServer]:
    a, b = two_models
    config = tmp_path / "models.toml"
    config.write_text(f'[models.a]\nmodel = "{a}"\n\n[models.b]\nmodel = "{b}"\n')
    argv = ["--port", "0", "--engine", "llamacpp", *LLAMACPP.extra_args, "--config", str(config), "--api-key", KEY]
    server = launch_serve(argv, tmp_path / "home", "serve-panel")
    yield server
    server.stop()


def chat(base_url: str, model: str, key: str | None = None) -> None:
    headers = {"Authorization": f"Bearer {key}"} if key else {}
    body = {"model": model, "messages": HELLO, "max_tokens": 8}
    reply = httpx.post(base_url + "/chat/completions", json=body, headers=headers, timeout=120)
    assert reply.status_code == 200, reply.text


def listed(url: str, key: str | None = None) -> list[str]:
    headers = {"Authorization": f"Bearer {key}"} if key else {}
    return [model["id"] for model in httpx.get(url + "/launcher/models", headers=headers).json()["models"]]


def test_the_form_maps_the_library_and_idle_minutes_onto_the_config(qtbot) -> None:  # type: ignore[no-untyped-def]
    panel = ServerPanel(ServerProcess())
    qtbot.addWidget(panel)
    assert panel.library.isChecked()  # the default, as `launcher serve` without a flag
    assert (panel.config().library, panel.config().ttl) == (True, None)  # the library on request, kept loaded
    assert panel.idle_unload.text() == "Never"
    panel.load_config(ServeConfig(library=False, ttl=90))
    assert not panel.library.isChecked() and panel.idle_unload.value() == 2  # whole minutes, rounded up
    assert (panel.config().library, panel.config().ttl) == (False, 120)


def test_a_busy_model_cannot_be_unloaded_from_its_row(qtbot) -> None:  # type: ignore[no-untyped-def]
    panel = LoadedModelsPanel()
    qtbot.addWidget(panel)
    panel.set_endpoint(
        ServerEndpoint("http://127.0.0.1:9", "http://127.0.0.1:9/v1", "m", "llamacpp", "", 0, 1, False, 0)
    )
    busy = {"id": "m", "engine": "llamacpp", "busy": True, "requests_running": 1, "requests_waiting": 2}
    panel.show_listing(parse_loaded_models({"models": [busy]}))
    assert panel.row_text("m")[ACTIVITY] == "1 running · 2 waiting"
    assert not panel.unload_button("m").isEnabled() and "requests" in panel.unload_button("m").toolTip()
    panel.show_listing(
        parse_loaded_models({"models": [{**busy, "busy": False, "requests_running": 0, "requests_waiting": 0}]})
    )
    assert panel.unload_button("m").isEnabled()


@pytest.mark.slow
def test_two_models_show_as_two_rows_and_unload_frees_one(qtbot, presets_server: RunningServer) -> None:  # type: ignore[no-untyped-def]
    server = presets_server
    endpoint = ServerEndpoint.from_ready_line(json.dumps(server.ready), KEY)
    assert httpx.get(server.url + "/launcher/models").status_code == 401  # the key guards the launcher's routes too
    chat(server.base_url, "a", KEY)
    chat(server.base_url, "b", KEY)

    panel = LoadedModelsPanel()
    qtbot.addWidget(panel)
    panel.set_endpoint(endpoint)

    def refresh() -> None:
        answer = httpx.get(server.url + "/launcher/models", headers={"Authorization": f"Bearer {KEY}"})
        panel.show_listing(parse_loaded_models(answer.json()))

    refresh()
    assert panel.row_names() == ["a", "b"]
    for name in ("a", "b"):
        cells = panel.row_text(name)
        assert cells[ENGINE].startswith("llamacpp") and cells[MEMORY].endswith("iB")
        assert cells[ACTIVITY].startswith("idle ") and cells[DECODE] == "–"  # no /metrics read yet
        assert panel.unload_button(name).isEnabled()
    assert panel.summary.text().startswith("2 models loaded")

    with qtbot.waitSignal(panel.unloaded, timeout=30_000) as unloaded:
        panel.unload_button("b").click()
    assert unloaded.args == ["b"]
    assert panel.row_names() == ["a"]
    assert listed(server.url, KEY) == ["a"]  # the server freed it, not only the view
    refresh()
    assert panel.row_names() == ["a"]

    # Someone else (`launcher ps --unload a`) frees `a` before the next poll: the click says why nothing happened.
    headers = {"Authorization": f"Bearer {KEY}"}
    assert httpx.post(server.url + "/launcher/models/unload", json={"model": "a"}, headers=headers).status_code == 200
    with qtbot.waitSignal(panel.unload_failed, timeout=30_000) as failed:
        panel.unload_button("a").click()
    assert failed.args == ["a was not unloaded: 'a' is not loaded."]
    assert not panel.error.isHidden() and panel.error.text() == failed.args[0]
    assert panel.unload_button("a").isEnabled()  # the next listing drops the row; until then it may be retried
    refresh()
    assert panel.row_names() == [] and not panel.table.isVisible()
    summary = panel.summary.text()
    # a, b and the library's starter (served too, by default)
    assert summary.startswith("No model is loaded · 0 B of the ") and summary.endswith(" · 3 more load on request.")


@pytest.mark.slow
def test_the_window_serves_the_library_and_shows_each_loaded_model(  # type: ignore[no-untyped-def]
    qtbot, two_models: tuple[Path, Path], tmp_path: Path
) -> None:
    for path in two_models:
        add_imported(path)
    window = MainWindow(machine=load_recorded("cpu-avx2-laptop-16gb"), save_settings=False, home=tmp_path)
    qtbot.addWidget(window)
    qtbot.waitSignal(window.models_page.rows_changed, timeout=30_000).wait()
    panel = window.server_panel
    panel.port.setValue(0)
    panel.context.setValue(1024)
    panel.parallel.setValue(1)
    assert panel.library.isChecked()  # ticked by default
    panel.idle_unload.setValue(10)
    assert (panel.config().library, panel.config().ttl) == (True, 600)
    row = next(r for r in window.models_page.rows if r.local and r.local.model.path == two_models[0])
    with qtbot.waitSignal(window.server.ready, timeout=120_000) as ready:
        window.serve_row(row)
    endpoint: ServerEndpoint = ready.args[0]
    command = next(line for line in window.logs_page.text().splitlines() if "--ttl 600" in line)
    assert "--library" not in command and "--no-library" not in command  # ticked: the CLI's default
    assert not panel.library.isEnabled()  # settings of a running server are fixed until it stops

    chat(endpoint.base_url, "tiny-b")  # not the served model: loaded from the library by name
    chat(endpoint.base_url, endpoint.model)
    rows = window.loaded_models
    qtbot.waitUntil(lambda: rows.row_names() == sorted([endpoint.model, "tiny-b"]), timeout=10_000)
    qtbot.waitUntil(lambda: all(rows.row_text(name)[DECODE] != "–" for name in rows.row_names()), timeout=10_000)
    # --ttl 600, idle for a few seconds (a poll during its request said "1 running")
    qtbot.waitUntil(lambda: rows.row_text("tiny-b")[ACTIVITY].endswith(" · unloads in 10 min"), timeout=10_000)

    with qtbot.waitSignal(rows.unloaded, timeout=30_000):
        rows.unload_button("tiny-b").click()
    assert rows.row_names() == [endpoint.model]
    assert listed(endpoint.url) == [endpoint.model]
    qtbot.wait(1500)  # a poll or two later the row is still gone
    assert rows.row_names() == [endpoint.model]

    with qtbot.waitSignal(window.server.finished, timeout=30_000):
        panel.stop_button.click()
    assert rows.row_names() == [] and rows.summary.text().startswith("Start the server")
    window.shutdown()
