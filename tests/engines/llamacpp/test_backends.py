"""Backends loaded at run time: a portable build (GGML_BACKEND_DL) gets its CPU variant loaded once,
a build with the CPU backend built in is left alone, and `launcher detect` names the variant."""

from __future__ import annotations

import types
from collections.abc import Iterator
from pathlib import Path

import pytest

from launcher.engines.llamacpp import _native
from launcher.engines.llamacpp._native import BackendLibrary
from launcher.engines.llamacpp.engine import LlamaCppEngine
from launcher.hardware.machine import CpuInfo, Machine, MemoryInfo


class FakeGgml:
    """libggml's registry as `_load_backends` sees it: a count, and a loader that logs what it loads."""

    def __init__(self, registered: int, loads: dict[Path, list[str]] | None = None) -> None:
        self.registered = registered
        self.loads = loads or {}  # folder -> file names ggml would load from it
        self.calls: list[Path] = []

    def ggml_backend_reg_count(self) -> int:
        return self.registered

    def ggml_backend_load_all_from_path(self, folder: bytes) -> None:
        path = Path(folder.decode())
        self.calls.append(path)
        for name in self.loads.get(path, []):
            self.registered += 1
            kind = name.removeprefix("lib").split("-")[1].split(".")[0].upper()
            _native._backend_libraries.append(BackendLibrary(kind, path / name))  # what the log callback does


@pytest.fixture
def fresh_registry(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """Run against empty load records, restoring the real ones afterwards."""
    monkeypatch.setattr(_native, "_backend_libraries", [])
    monkeypatch.setattr(_native, "_backend_dirs", set())
    monkeypatch.setattr(_native, "_mapped_backends", lambda folder: [])
    yield


def _bindings_in(lib_dir: Path) -> types.ModuleType:
    module = types.ModuleType("llama_cpp.llama_cpp")
    module._base_path = lib_dir  # type: ignore[attr-defined]
    return module


def test_a_build_with_the_cpu_backend_built_in_loads_nothing(
    fresh_registry: None, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    ggml = FakeGgml(registered=1)
    monkeypatch.setattr(_native, "_ggml_library", lambda llama_cpp: ggml)
    _native._load_backends(_bindings_in(tmp_path), ())
    _native._load_backends(_bindings_in(tmp_path), ())
    assert ggml.calls == []
    assert _native.cpu_variant() is None


def test_a_portable_build_loads_its_library_folder_once(
    fresh_registry: None, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    lib = tmp_path.resolve()
    ggml = FakeGgml(registered=0, loads={lib: ["libggml-cpu-haswell.so"]})
    monkeypatch.setattr(_native, "_ggml_library", lambda llama_cpp: ggml)
    _native._load_backends(_bindings_in(lib), ())
    _native._load_backends(_bindings_in(lib), ())
    assert ggml.calls == [lib]
    assert _native.cpu_variant() == "haswell"
    assert _native.loaded_backends() == [BackendLibrary("CPU", lib / "libggml-cpu-haswell.so")]


def test_extra_folders_are_loaded_once_each_and_missing_ones_skipped(
    fresh_registry: None, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    lib, pack = (tmp_path / "lib").resolve(), (tmp_path / "pack").resolve()
    lib.mkdir()
    pack.mkdir()
    ggml = FakeGgml(registered=0, loads={lib: ["libggml-cpu-x64.so"], pack: ["libggml-cuda.so"]})
    monkeypatch.setattr(_native, "_ggml_library", lambda llama_cpp: ggml)
    _native._load_backends(_bindings_in(lib), [pack, tmp_path / "absent", pack])
    _native._load_backends(_bindings_in(lib), [pack])
    assert ggml.calls == [lib, pack]
    assert [b.name for b in _native.loaded_backends()] == ["CPU", "CUDA"]
    assert _native.cpu_variant() == "x64"


def test_variant_names_come_from_the_file_names() -> None:
    assert BackendLibrary("CPU", Path("/x/libggml-cpu-sapphirerapids.so")).variant == "sapphirerapids"
    assert BackendLibrary("CPU", Path("C:/x/ggml-cpu-alderlake.dll")).variant == "alderlake"
    assert BackendLibrary("CPU", Path("/x/libggml-cpu-armv8.2_1.so")).variant == "armv8.2_1"
    assert BackendLibrary("CPU", Path("/x/libggml-cpu.so")).variant is None
    assert BackendLibrary("CUDA", Path("/x/libggml-cuda.so")).variant is None


def test_the_load_line_of_ggml_names_backend_and_file() -> None:
    line = "load_backend: loaded CPU backend from /opt/app/llama_cpp/lib/libggml-cpu-icelake.so"
    match = _native._LOADED_BACKEND.search(line)
    assert match and match.groups() == ("CPU", "/opt/app/llama_cpp/lib/libggml-cpu-icelake.so")


def test_mapped_libraries_of_the_folder_are_found() -> None:
    lib = Path("/venv/llama_cpp/lib")
    maps = "\n".join(
        [
            "7f00-7f10 r-xp 00000000 fd:01 12 /venv/llama_cpp/lib/libggml-base.so.0.25.3",
            "7f10-7f20 r-xp 00000000 fd:01 13 /venv/llama_cpp/lib/libggml-cpu-skylakex.so",
            "7f20-7f30 r--p 00001000 fd:01 13 /venv/llama_cpp/lib/libggml-cpu-skylakex.so",
            "7f30-7f40 r-xp 00000000 fd:01 14 /elsewhere/libggml-cuda.so",
            "7f40-7f50 rw-p 00000000 00:00 0 ",
        ]
    )
    assert _native.backends_in_maps(maps, lib) == [BackendLibrary("CPU", lib / "libggml-cpu-skylakex.so")]


def _installed_cpu_variants() -> list[str]:
    """The CPU variant libraries of the llama-cpp-python this interpreter runs (none in a native build)."""
    lib = _native._lib_dir(_native.llama())
    return sorted(p.name for p in lib.glob("*ggml-cpu-*") if p.suffix in (".so", ".dll"))


def test_the_installed_build_reports_its_cpu_backend() -> None:
    """Native build: nothing loaded, "(CPU, ...)". Portable build: the variant chosen, in detect's reason."""
    machine = Machine(
        os="linux",
        os_version="test",
        cpu=CpuInfo(brand="test", arch="x86_64", physical_cores=2, logical_cores=2),
        memory=MemoryInfo(total=8 << 30, available=4 << 30),
    )
    reason = LlamaCppEngine().availability(machine).reason
    variants = _installed_cpu_variants()
    if not variants:
        assert _native.cpu_variant() is None
        assert "(CPU, " in reason or reason.endswith("(CPU)")
        return
    variant = _native.cpu_variant()
    assert variant is not None
    assert any(name.split(".")[0].endswith(f"ggml-cpu-{variant}") for name in variants)
    assert f"(CPU {variant}" in reason
    # The features come from llama.cpp's own registry: loaded into another copy of libggml, the
    # variant would be named but llama.cpp would see no backend and list no features.
    assert _native.cpu_features(_native.system_info(_native.llama()))
    assert _native.load_backends() == _native.loaded_backends()  # nothing loaded a second time
