"""What the frozen app (scripts/build-app) relies on, checked without freezing (too slow for CI).

- Child processes start the same way from source and frozen: `launcher_command()` is
  `python -m launcher` from source and the app itself when `sys.frozen` is set, and the two
  children the launcher starts (the server, the llama.cpp CPU probe) are built from it.
- The probe is a hidden launcher subcommand, not a `-c` script (a frozen app has no Python).
- A child named by the app dies with it: `follow_parent`, run first by `launcher/__main__.py`.
- The package data is found through importlib.resources, also from an installed wheel.
- The files the installers take (icons, spec, per-OS scripts) are there.
"""

from __future__ import annotations

import os
import subprocess
import sys
import tomllib
import zipfile
from importlib import resources
from pathlib import Path

import pytest

from launcher.core import child_process, paths
from launcher.core.config import ServeConfig

ROOT = Path(__file__).resolve().parent.parent


def _env(**extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k != child_process.PARENT_PID_ENV}
    env["PYTHONPATH"] = str(ROOT)
    env.update(extra)
    return env


# -- the child command -----------------------------------------------------------------------


def test_from_source_children_run_this_python_with_dash_m(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delattr(sys, "frozen", raising=False)
    assert not paths.is_frozen()
    assert child_process.launcher_command() == [sys.executable, "-m", "launcher"]


def test_frozen_children_run_the_app_itself(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(sys, "frozen", True, raising=False)
    monkeypatch.setattr(sys, "executable", "/opt/launcher/launcher")
    monkeypatch.setattr(sys, "platform", "linux")
    assert paths.is_frozen()
    assert child_process.launcher_command() == ["/opt/launcher/launcher"]


def test_frozen_windows_children_run_the_console_companion(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    gui = tmp_path / "launcher.exe"
    gui.write_bytes(b"")
    monkeypatch.setattr(sys, "frozen", True, raising=False)
    monkeypatch.setattr(sys, "executable", str(gui))
    monkeypatch.setattr(sys, "platform", "win32")
    assert child_process.launcher_command() == [str(gui)]  # a build without the console exe
    (tmp_path / child_process.WINDOWS_CONSOLE_EXE).write_bytes(b"")
    assert child_process.launcher_command() == [str(tmp_path / child_process.WINDOWS_CONSOLE_EXE)]


def test_serve_command_from_source_and_frozen(monkeypatch: pytest.MonkeyPatch) -> None:
    from launcher.ui.server_process import serve_command, shown_command

    config = ServeConfig(model="/m.gguf", port=0, parallel=2)
    monkeypatch.delattr(sys, "frozen", raising=False)
    program, arguments = serve_command(config)
    assert (program, arguments[:2]) == (sys.executable, ["-m", "launcher"])
    assert shown_command(program, arguments)[:4] == ["launcher", "--log-level", "INFO", "serve"]

    monkeypatch.setattr(sys, "frozen", True, raising=False)
    monkeypatch.setattr(sys, "executable", "/opt/launcher/launcher")
    program, arguments = serve_command(config)
    assert program == "/opt/launcher/launcher"
    assert arguments == ["--log-level", "INFO", "serve", "--no-settings", "/m.gguf", "--parallel", "2", "--port", "0"]
    assert shown_command(program, arguments) == ["launcher", *arguments]


def test_cpu_probe_child_is_the_launcher_command(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    from launcher.engines.llamacpp import _cpu_probe

    seen: list[list[str]] = []

    def run(argv: list[str], **_kwargs: object) -> subprocess.CompletedProcess[str]:
        seen.append(argv)
        return subprocess.CompletedProcess(argv, 0, "ok\n", "")

    monkeypatch.delenv("LAUNCHER_LLAMACPP_EXTRA_BUFFERS", raising=False)
    monkeypatch.setattr(_cpu_probe, "_cpu_flags", lambda: {"amx_tile"})
    monkeypatch.setattr(_cpu_probe.sys, "platform", "linux")
    monkeypatch.setattr(_cpu_probe.subprocess, "run", run)
    monkeypatch.setattr(sys, "frozen", True, raising=False)
    monkeypatch.setattr(sys, "executable", "/opt/launcher/launcher")
    model = tmp_path / "m.gguf"
    _cpu_probe.extra_buffer_types_usable.cache_clear()
    try:
        assert _cpu_probe.extra_buffer_types_usable(model)
    finally:
        _cpu_probe.extra_buffer_types_usable.cache_clear()
    assert seen == [["/opt/launcher/launcher", "_llamacpp-cpu-probe", str(model)]]


def test_cpu_probe_runs_as_a_hidden_subcommand(tiny_gguf: Path) -> None:
    pytest.importorskip("llama_cpp")
    done = subprocess.run(
        [*child_process.launcher_command(), "_llamacpp-cpu-probe", str(tiny_gguf)],
        capture_output=True,
        text=True,
        timeout=120,
        env=_env(),
        check=False,
    )
    # Where the CPU advertises AMX and traps it, the child dies of SIGILL: that is the probe's answer.
    assert (done.returncode, done.stdout.strip()) == (0, "ok") or done.returncode == -4, done.stderr


def test_hidden_commands_stay_out_of_the_help() -> None:
    help_text = subprocess.run(
        [*child_process.launcher_command(), "--help"], capture_output=True, text=True, env=_env(), check=True
    ).stdout
    assert "_llamacpp-cpu-probe" not in help_text
    unknown = subprocess.run(
        [*child_process.launcher_command(), "_no-such-thing"], capture_output=True, text=True, env=_env(), check=False
    )
    assert unknown.returncode == 2
    assert "unknown internal command" in unknown.stderr


# -- a child that follows its parent ---------------------------------------------------------


def test_follow_parent_without_a_parent_does_nothing() -> None:
    environ: dict[str, str] = {}
    assert child_process.follow_parent(environ) is False


def test_parent_environment_names_this_process() -> None:
    assert child_process.parent_environment() == {child_process.PARENT_PID_ENV: str(os.getpid())}


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="PR_SET_PDEATHSIG is Linux-only")
def test_a_child_whose_parent_is_already_gone_exits_before_doing_anything() -> None:
    """`launcher/__main__.py` calls follow_parent before the command line: a child started for a
    parent that is no longer there (pid 1 is never our parent here) must not run `--version`."""
    done = subprocess.run(
        [*child_process.launcher_command(), "--version"],
        capture_output=True,
        text=True,
        env=_env(**{child_process.PARENT_PID_ENV: "1"}),
        check=False,
    )
    assert (done.returncode, done.stdout) == (0, "")
    plain = subprocess.run(
        [*child_process.launcher_command(), "--version"], capture_output=True, text=True, env=_env(), check=False
    )
    assert plain.stdout.startswith("launcher ")


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="PR_SET_PDEATHSIG is Linux-only")
def test_follow_parent_arms_the_signal_and_hides_the_variable_from_grandchildren() -> None:
    script = (
        "import ctypes, os, signal\n"
        "from launcher.core.child_process import follow_parent\n"
        "assert follow_parent()\n"
        "value = ctypes.c_int()\n"
        "ctypes.CDLL(None).prctl(2, ctypes.byref(value))  # PR_GET_PDEATHSIG\n"
        "print(value.value == signal.SIGTERM, 'LAUNCHER_PARENT_PID' in os.environ)\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", script],
        capture_output=True,
        text=True,
        env=_env(**child_process.parent_environment()),
        check=True,
    )
    assert done.stdout.split() == ["True", "False"]


# -- package data ----------------------------------------------------------------------------


def test_resources_are_package_data_found_through_importlib() -> None:
    folder = paths.resources_dir()
    assert folder == resources.files("launcher") / "resources"
    assert folder.parent == Path(__import__("launcher").__file__).parent
    for name in ("catalog/models.toml", "hardware/gpus.csv", "hardware/apple_chips.csv", "advisor/quants.csv"):
        assert (folder / name).is_file(), name
    assert list((folder / "hardware" / "machines").glob("*.json"))


def test_pyproject_ships_the_resources_as_package_data() -> None:
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())
    assert "resources/**/*" in project["tool"]["setuptools"]["package-data"]["launcher"]
    assert any(pin.startswith("pyinstaller==") for pin in project["project"]["optional-dependencies"]["packaging"])


@pytest.mark.slow
def test_an_installed_wheel_finds_its_resources(tmp_path: Path) -> None:
    """Build the wheel, install it into a folder away from the checkout, and load the catalog from it."""
    subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "--no-deps", "-q", "-w", str(tmp_path), str(ROOT)],
        check=True,
        capture_output=True,
    )
    (wheel,) = tmp_path.glob("launcher-*.whl")
    names = zipfile.ZipFile(wheel).namelist()
    assert "launcher/resources/catalog/models.toml" in names
    assert "launcher/resources/icons/launcher.icns" in names
    site = tmp_path / "site"
    with zipfile.ZipFile(wheel) as archive:
        archive.extractall(site)
    script = (
        "from launcher.core.paths import resources_dir\n"
        "from launcher.catalog.catalog import default_catalog\n"
        "print(resources_dir())\n"
        "print(len(default_catalog().models))\n"
    )
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV")}
    env["PYTHONPATH"] = str(site)
    done = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, cwd=tmp_path, env=env, check=True
    )
    folder, count = done.stdout.split()
    assert Path(folder) == site / "launcher" / "resources"
    assert int(count) > 0


# -- what the installers take ----------------------------------------------------------------


def test_icons_exist_in_every_size_the_installers_use() -> None:
    icons = paths.resources_dir() / "icons"
    for size in (16, 24, 32, 48, 64, 128, 256, 512, 1024):
        assert (icons / f"launcher-{size}.png").is_file(), size
    assert (icons / "launcher.ico").read_bytes()[:4] == b"\x00\x00\x01\x00"
    assert (icons / "launcher.icns").read_bytes()[:4] == b"icns"


def test_packaging_files_are_in_place() -> None:
    for name in (
        "packaging/launcher.spec",
        "packaging/entry.py",
        "packaging/macos/entitlements.plist",
        "packaging/macos/make-dmg",
        "packaging/windows/launcher.iss",
        "packaging/linux/launcher.desktop",
        "packaging/linux/build-appimage",
        "packaging/linux/install-desktop-entry.sh",
        "scripts/build-app",
        "scripts/check-frozen-app",
    ):
        assert (ROOT / name).is_file(), name
    executables = ("scripts/build-app", "scripts/check-frozen-app", "packaging/macos/make-dmg")
    for name in (*executables, "packaging/linux/build-appimage", "packaging/linux/install-desktop-entry.sh"):
        assert os.access(ROOT / name, os.X_OK), name
    iss = (ROOT / "packaging/windows/launcher.iss").read_text()
    assert "PrivilegesRequired=lowest" in iss
    spec = (ROOT / "packaging/launcher.spec").read_text()
    assert child_process.WINDOWS_CONSOLE_EXE.removesuffix(".exe") in spec


def test_the_spec_names_every_builtin_engine_module() -> None:
    """The spec imports the engine modules by name from BUILTIN_SPECS (a freezer cannot see them)."""
    from launcher.engine_specs import BUILTIN_SPECS

    spec = (ROOT / "packaging/launcher.spec").read_text()
    assert "BUILTIN_SPECS" in spec
    assert all(reference.partition(":")[0].startswith("launcher.engines.") for reference in BUILTIN_SPECS)


def test_build_info_is_empty_from_source_and_read_from_the_bundle(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    assert not (paths.resources_dir() / paths.BUILD_INFO_FILE).exists()
    assert paths.build_info() == {}
    (tmp_path / paths.BUILD_INFO_FILE).write_text('{"version": "0.1.0", "gpu_pack_index": "https://x/i.json"}')
    monkeypatch.setattr(paths, "resources_dir", lambda: tmp_path)
    assert paths.build_info()["gpu_pack_index"] == "https://x/i.json"
    (tmp_path / paths.BUILD_INFO_FILE).write_text("not json")
    assert paths.build_info() == {}


@pytest.mark.gui
def test_the_window_uses_the_packaged_icon(qapp) -> None:  # type: ignore[no-untyped-def]
    from launcher.ui.app import window_icon

    sizes = {size.width() for size in window_icon().availableSizes()}
    assert {16, 32, 256, 1024} <= sizes


def test_the_package_and_the_build_say_the_same_version() -> None:
    """A source run reports `launcher.__version__`, a frozen one the pyproject version build-app records:
    an update check compares them with the feed, so they must be one number."""
    import launcher

    assert tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["version"] == launcher.__version__
