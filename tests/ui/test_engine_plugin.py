"""A third-party engine plugs in through the `launcher.engines` entry-point group, like any installed
package would declare it, and is then known everywhere: `launcher detect`, the advisor's options and
the app's engine list. Nothing in `launcher/` is edited for it: this file is all it takes."""

from __future__ import annotations

import json
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from launcher import engine_specs
from launcher.advisor.options import candidate_options
from launcher.catalog.catalog import find
from launcher.cli import main
from launcher.core.errors import EngineUnavailableError
from launcher.engine_specs import Availability, EngineSpec
from launcher.hardware.machine import Machine
from launcher.ui.panels.server import ServerPanel
from launcher.ui.server_process import ServerProcess
from tests.advisor.machines import laptop_cpu


class StandInEngine:
    """The engine object the registry builds from the spec's `factory` (only its availability is asked here)."""

    name = "standin"

    def availability(self, machine: Machine) -> Availability:
        del machine
        return Availability(usable=True, reason="stand-in 1.0 (CPU)", version="1.0", backend="cpu")


SPEC = EngineSpec(
    name="standin",
    label="Stand-in",
    formats=("gguf",),
    factory=f"{__name__}:StandInEngine",
    runtime_module="json",  # "installed": any module that is there
    distribution="pytest",
    pip_extra="standin",
)


@pytest.fixture
def plugged_in(tmp_path: Path) -> Iterator[None]:
    """A distribution on sys.path whose entry point names SPEC, as `pip install` would leave it."""
    dist_info = tmp_path / "launcher_standin-1.0.dist-info"
    dist_info.mkdir()
    (dist_info / "METADATA").write_text("Metadata-Version: 2.1\nName: launcher-standin\nVersion: 1.0\n")
    (dist_info / "entry_points.txt").write_text(f"[launcher.engines]\nstandin = {__name__}:SPEC\n")
    sys.path.insert(0, str(tmp_path))
    engine_specs.refresh()
    try:
        yield
    finally:
        sys.path.remove(str(tmp_path))
        engine_specs.refresh()


@pytest.mark.usefixtures("plugged_in")
def test_a_plugged_in_engine_shows_in_detect(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["detect", "--json"]) == 0
    engines = json.loads(capsys.readouterr().out)["engines"]
    assert engines["standin"] == {
        "label": "Stand-in",
        "formats": ["gguf"],
        "usable": True,
        "reason": "stand-in 1.0 (CPU)",
        "version": "1.0",
        "backend": "cpu",
    }
    assert "llamacpp" in engines  # the built-ins are still there


@pytest.mark.usefixtures("plugged_in")
def test_a_plugged_in_engine_is_among_the_advisors_options() -> None:
    model = find("qwen3-8b")
    options = candidate_options(laptop_cpu(), model, context=8192, parallel=1, calibration=None)
    standin = [o for o in options if o.engine == "standin"]
    assert {o.quant for o in standin} == set(model.quants("gguf"))  # every GGUF quant, like llama.cpp's
    assert standin[0].label.startswith("Stand-in + GGUF")


@pytest.mark.usefixtures("plugged_in")
def test_a_plugged_in_engine_is_in_the_apps_engine_list(qtbot) -> None:  # type: ignore[no-untyped-def]
    panel = ServerPanel(ServerProcess())
    qtbot.addWidget(panel)
    items = [(panel.engine.itemText(i), panel.engine.itemData(i)) for i in range(panel.engine.count())]
    assert ("Stand-in", "standin") in items
    panel.engine.setCurrentIndex(panel.engine.findData("standin"))
    assert panel.config().engine == "standin"


def test_without_the_plugin_the_engine_is_unknown() -> None:
    assert "standin" not in engine_specs.names()
    with pytest.raises(EngineUnavailableError, match=r"Unknown engine 'standin'\. Known engines: llamacpp, mlx"):
        engine_specs.get_spec("standin")
