"""The serve walk decides once: the app's Serve plans the model, `launcher serve` only checks that the plan
fits, and the engine loads exactly that plan (docs/architecture.md, "The walk", steps 4 and 5).

The walk runs as the app runs it, in one process: the Models page's row for a library model, the
app's decision for it (`ui.model_rows.decided_config`), the argument list the app's child gets
(`ServeConfig.to_argv`, parsed by the CLI), then `launcher serve`'s own `serve` with the real
llama.cpp engine on the tiny GGUF, until its ready line says the startup model is loaded.
"""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

import launcher.advisor
from launcher.advisor import ServePlan
from launcher.cli import build_parser
from launcher.cli.serve import build_config
from launcher.core.config import ServeConfig
from launcher.core.server_records import READY_PREFIX
from launcher.engine_specs import get_spec
from launcher.hardware.probe import probe_machine
from launcher.server import runner

READY_WITHIN_S = 120


@dataclass
class Plans:
    """Every call of the advisor's serve planning: the config it was given and whether its answer
    changed any of it (a decision) or left it as it was (a check of the fit)."""

    calls: list[tuple[ServeConfig, ServePlan]] = field(default_factory=list)

    def counting(self, real: Callable[..., ServePlan]) -> Callable[..., ServePlan]:
        def plan_for_config(*args: Any, **kwargs: Any) -> ServePlan:
            plan = real(*args, **kwargs)
            config: ServeConfig = args[4] if len(args) > 4 else kwargs["config"]
            self.calls.append((config, plan))
            return plan

        return plan_for_config

    @property
    def decided(self) -> list[bool]:
        """For each call, whether it decided something the config left open."""
        return [plan.fill(config) != config for config, plan in self.calls]


@pytest.fixture
def plans(monkeypatch: pytest.MonkeyPatch) -> Plans:
    """Counts the advisor's serve plans wherever they are made (the app binds the name at import)."""
    counted = Plans()
    counting = counted.counting(launcher.advisor.plan_for_config)
    monkeypatch.setattr(launcher.advisor, "plan_for_config", counting)
    monkeypatch.setattr("launcher.ui.model_rows.plan_for_config", counting)
    return counted


@pytest.fixture
def resolutions(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """The model names resolved to files (`catalog.resolve.resolve_model`, imported where it is used)."""
    import launcher.catalog.resolve as resolve

    names: list[str] = []
    real = resolve.resolve_model

    def resolve_model(spec: str, *args: Any, **kwargs: Any) -> Any:
        names.append(spec)
        return real(spec, *args, **kwargs)

    monkeypatch.setattr(resolve, "resolve_model", resolve_model)
    return names


@pytest.fixture
def scans(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """One item per scan of the local library (each reads every model's header)."""
    import launcher.catalog.library as library

    counted: list[int] = []
    real = library.scan_library

    def scan_library(*args: Any, **kwargs: Any) -> Any:
        counted.append(1)
        return real(*args, **kwargs)

    monkeypatch.setattr(library, "scan_library", scan_library)
    return counted


@pytest.fixture
def serving(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> Iterator[Callable[[ServeConfig], dict[str, Any]]]:
    """Runs `launcher serve`'s `serve(config)` on a thread until its ready line, which it returns; the
    server is stopped when the test ends."""
    servers: list[Any] = []
    real = runner.uvicorn_server

    def uvicorn_server(*args: Any, **kwargs: Any) -> Any:
        server = real(*args, **kwargs)
        servers.append(server)
        return server

    monkeypatch.setattr(runner, "uvicorn_server", uvicorn_server)
    threads: list[threading.Thread] = []
    exit_codes: list[int] = []

    def start(config: ServeConfig) -> dict[str, Any]:
        thread = threading.Thread(target=lambda: exit_codes.append(runner.serve(config)), daemon=True)
        thread.start()
        threads.append(thread)
        printed = ""
        deadline = time.monotonic() + READY_WITHIN_S
        while time.monotonic() < deadline and thread.is_alive():
            printed += capsys.readouterr().out
            for line in printed.splitlines():
                if line.startswith(READY_PREFIX):
                    ready: dict[str, Any] = json.loads(line.removeprefix(READY_PREFIX))
                    return ready
            time.sleep(0.05)
        raise AssertionError(f"no ready line (exit codes {exit_codes}): {printed}")

    yield start
    for server in servers:
        server.should_exit = True
    for thread in threads:
        thread.join(timeout=30)
        assert not thread.is_alive(), "the server did not stop"


def as_the_app_passes_it(config: ServeConfig) -> ServeConfig:
    """The config the app's `launcher serve` child builds from its argument list."""
    return build_config(build_parser().parse_args(["serve", "--no-settings", *config.to_argv()]))


def test_the_apps_plan_is_what_the_engine_loads_and_the_server_only_checks_its_fit(
    tiny_gguf: Path,
    plans: Plans,
    resolutions: list[str],
    scans: list[int],
    serving: Callable[[ServeConfig], dict[str, Any]],
) -> None:
    from launcher.catalog.library import add_imported
    from launcher.ui.model_rows import ModelRow, decided_config

    entry = add_imported(tiny_gguf, name="walk-tiny")
    row = ModelRow(key=f"local:{entry.name}", title=entry.name, subtitle="", kind="local", local=entry)
    form = ServeConfig(model=entry.name, port=0)  # the Server page's form, Serve pressed

    decided = decided_config(row, probe_machine(), form)
    assert plans.decided == [True]  # the app decided, once
    assert decided.engine == "llamacpp" and decided.context is not None and decided.gpu_layers is not None
    assert decided.kv_cache_type != "auto"

    plans.calls.clear()
    ready = serving(as_the_app_passes_it(decided))

    assert resolutions == [entry.name]  # the server finds the file once
    assert len(scans) == 1  # in one look at the library, which also lists the models it serves by name
    assert plans.decided == [False]  # one check of the fit, nothing decided again
    assert ready["model"] == entry.name and ready["engine"] == decided.engine
    loaded = ready["serving"]  # what the engine was loaded with
    assert loaded["context"] == ready["context_length"] == decided.context
    assert loaded["kv_cache_type"] == decided.kv_cache_type and loaded["gpu_layers"] == decided.gpu_layers


def test_launcher_serve_alone_plans_once_and_loads_that_plan(
    tiny_gguf: Path,
    plans: Plans,
    resolutions: list[str],
    serving: Callable[[ServeConfig], dict[str, Any]],
) -> None:
    config = as_the_app_passes_it(ServeConfig(model=str(tiny_gguf), port=0, library=False))
    ready = serving(config)

    assert resolutions == [str(tiny_gguf)]
    assert plans.decided == [True]  # `launcher serve MODEL`: the server decides, once
    plan = plans.calls[0][1]
    assert ready["engine"] == plan.engine == "llamacpp"
    loaded = ready["serving"]
    assert loaded["context"] == ready["context_length"] == plan.context
    assert loaded["kv_cache_type"] == plan.kv_type and loaded["gpu_layers"] == plan.gpu_layers


def _safetensors_row(tmp_path: Path) -> Any:
    """A Models page row for a plain safetensors checkpoint (what vLLM and SGLang run) with known numbers."""
    from launcher.catalog.catalog import default_catalog
    from launcher.catalog.library import LibraryEntry
    from launcher.core.model_types import LocalModel
    from launcher.ui.model_rows import ModelRow

    architecture = default_catalog().models[0].architecture
    model = LocalModel(path=tmp_path, format="safetensors", name="org/checkpoint")
    entry = LibraryEntry(model=model, source="imported", size_bytes=2 * 1024**3, architecture=architecture)
    return ModelRow(key=f"local:{model.name}", title=model.name, subtitle="", kind="local", local=entry)


def test_an_engine_that_runs_as_a_child_is_named_by_the_app_and_planned_by_its_child(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The child's own plan (its command) decides its context; the app's would override it, not carry it.
    from launcher.hardware.recorded import load_recorded
    from launcher.ui import model_rows

    machine = load_recorded("rtx4090-desktop")
    row = _safetensors_row(tmp_path)
    pinned = ServeConfig(model="org/checkpoint", engine="vllm")
    assert model_rows.decided_config(row, machine, pinned) == pinned

    # The advisor's own pick never is such an engine (it runs only when named): with only vLLM usable the
    # app plans an in-process engine, which then says why it cannot run, as `launcher serve FOLDER` does.
    only_vllm = {name: None if name == "vllm" else "not here" for name in ("llamacpp", "mlx", "vllm", "sglang")}
    monkeypatch.setattr(model_rows, "engine_status", lambda machine: only_vllm)
    form = ServeConfig(model="org/checkpoint")
    decided = model_rows.decided_config(row, machine, form)
    assert get_spec(decided.engine).runs_as == "in_process"
