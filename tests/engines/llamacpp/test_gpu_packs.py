"""GPU packs: which one a machine gets, installing it from a real HTTP server, and a missing or damaged
pack that leaves the CPU engine working with a clear message."""

from __future__ import annotations

import hashlib
import io
import tarfile
import threading
from collections.abc import Iterator
from functools import partial
from http.server import SimpleHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest

from launcher.catalog.progress import ProgressEvent
from launcher.core.errors import ChecksumError
from launcher.engines.llamacpp.gpu_pack_install import install_pack
from launcher.engines.llamacpp.gpu_packs import (
    PackEntry,
    PackIndex,
    choose_installed,
    installed_packs,
    packs_dir,
    suitable_packs,
    this_platform,
    why_not,
)
from launcher.hardware.recorded import load_recorded

ENGINE = "0.3.36"


def _entry(backend: str, *, data: bytes = b"x", url: str = "http://127.0.0.1:9/p.tar.gz", **extra: object) -> PackEntry:
    system, arch = this_platform()
    return PackEntry.model_validate(
        {
            "name": f"{backend}-{system}-{arch}",
            "backend": backend,
            "os": system,
            "arch": arch,
            "engine_version": ENGINE,
            "url": url,
            "sha256": hashlib.sha256(data).hexdigest(),
            "size_bytes": len(data),
            **extra,
        }
    )


INDEX = PackIndex(
    packs=[_entry("vulkan"), _entry("cuda", cuda_version="12.4", min_compute=(7, 5), label="CUDA 12 (NVIDIA)")]
)


def test_an_nvidia_machine_gets_cuda_first_and_vulkan_as_the_fallback() -> None:
    chosen = suitable_packs(load_recorded("rtx4090-desktop"), INDEX, ENGINE)
    assert [entry.backend for entry in chosen] == ["cuda", "vulkan"]


def test_an_old_driver_or_an_old_card_gets_vulkan_and_says_why_not_cuda() -> None:
    old_driver = load_recorded("2x-rtx3090-nvlink")  # the driver supports CUDA 12.2
    assert [entry.backend for entry in suitable_packs(old_driver, INDEX, ENGINE)] == ["vulkan"]
    assert why_not(INDEX.packs[1], old_driver, ENGINE) == (
        "the NVIDIA driver supports CUDA 12.2; this pack needs 12.4 (update the driver)"
    )
    new_driver = _entry("cuda", cuda_version="12.2", min_compute=(8, 0))
    assert "compute capability 7.5; this pack needs 8.0" in str(why_not(new_driver, load_recorded("rtx2080ti"), ENGINE))


def test_a_driver_for_cuda_12_4_takes_a_pack_built_with_toolkit_12_4_1() -> None:
    # The driver reports major.minor; the toolkit may be named to the patch.
    pack = _entry("cuda", cuda_version="12.4.1")
    assert why_not(pack, load_recorded("rtx4090-desktop"), ENGINE) is None  # its driver: CUDA 12.4


def test_macs_cpu_only_machines_and_other_builds_get_no_pack() -> None:
    assert suitable_packs(load_recorded("macbook-air-m2-16gb"), INDEX, ENGINE) == []  # Metal is built in
    assert suitable_packs(load_recorded("cpu-avx2-laptop-16gb"), INDEX, ENGINE) == []
    assert "this app has 0.3.99" in str(why_not(INDEX.packs[0], load_recorded("rtx4090-desktop"), "0.3.99"))


def _archive(files: dict[str, bytes]) -> bytes:
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w:gz") as tar:
        for name, data in files.items():
            info = tarfile.TarInfo(name)
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
    return buffer.getvalue()


@pytest.fixture
def served(tmp_path: Path) -> Iterator[tuple[Path, str]]:
    """A real HTTP server on a free port serving a folder: (the folder, its base URL)."""
    root = tmp_path / "www"
    root.mkdir()
    handler = partial(SimpleHTTPRequestHandler, directory=str(root))
    server = ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield root, f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()
        thread.join()


def _publish(served: tuple[Path, str], files: dict[str, bytes], *, sha256: str | None = None) -> PackEntry:
    root, base = served
    data = _archive(files)
    (root / "cuda.tar.gz").write_bytes(data)
    entry = _entry("cuda", data=data, url=f"{base}/cuda.tar.gz", cuda_version="12.4", label="CUDA 12")
    return entry if sha256 is None else entry.model_copy(update={"sha256": sha256})


def test_a_pack_installs_with_progress_and_every_file_checked(served: tuple[Path, str]) -> None:
    library = b"\x7fELF" + b"\0" * 5000
    entry = _publish(served, {"lib/libggml-cuda.so": library, "lib/libcudart.so.12": b"rt" * 100})
    events: list[ProgressEvent] = []
    pack = install_pack(entry, progress=events.append)
    assert pack.problem is None and pack.library == packs_dir() / entry.name / "lib" / "libggml-cuda.so"
    assert pack.library.read_bytes() == library
    assert events[0].kind == "start" and events[-1].kind == "done"
    assert events[-1].bytes_done == entry.size_bytes
    assert [p.name for p in installed_packs()] == [entry.name]
    assert not list(packs_dir().glob(".*"))  # no partial archive or staging folder left


def test_a_pack_that_arrives_damaged_is_not_installed(served: tuple[Path, str]) -> None:
    entry = _publish(served, {"lib/libggml-cuda.so": b"lib"}, sha256="0" * 64)
    with pytest.raises(ChecksumError, match=r"did not download intact.*nothing was installed"):
        install_pack(entry)
    assert installed_packs() == [] and not list(packs_dir().iterdir())


def test_a_pack_with_a_missing_file_is_passed_over_with_a_clear_message(served: tuple[Path, str]) -> None:
    entry = _publish(served, {"lib/libggml-cuda.so": b"lib", "lib/libcublas.so.12": b"blas"})
    pack = install_pack(entry)
    (pack.path / "lib" / "libcublas.so.12").unlink()
    probed: list[Path] = []

    def probe(library: Path) -> str | None:
        probed.append(library)
        return None

    choice = choose_installed(load_recorded("rtx4090-desktop"), ENGINE, probe)
    assert choice.libraries == () and probed == []  # never loaded
    assert choice.problems == (f"{entry.name} is missing lib/libcublas.so.12: install the pack again",)


def test_a_pack_built_by_the_release_script_installs_from_its_index(served: tuple[Path, str], tmp_path: Path) -> None:
    import subprocess
    import sys
    import zipfile

    from launcher.engines.llamacpp.gpu_packs import fetch_index

    root, base = served
    wheel = tmp_path / f"llama_cpp_python-{ENGINE}-cp311-cp311-linux_x86_64.whl"
    with zipfile.ZipFile(wheel, "w") as archive:
        archive.writestr("llama_cpp/lib/libggml-cuda.so", b"\x7fELF cuda backend")
        archive.writestr("llama_cpp/lib/libggml-base.so", b"\x7fELF base")  # stays with the app
    runtime = tmp_path / "libcudart.so.12"
    runtime.write_bytes(b"\x7fELF cudart")
    script = Path(__file__).resolve().parents[3] / "scripts" / "build-gpu-pack"
    build = [sys.executable, str(script), "--backend", "cuda", "--wheel", str(wheel), "--out", str(root)]
    build += ["--runtime-lib", str(runtime), "--cuda-version", "12.4", "--min-compute", "5.0"]
    subprocess.run(build, check=True, capture_output=True)
    subprocess.run([sys.executable, str(script), "--index", str(root), "--base-url", base], check=True)

    index = fetch_index(f"{base}/gpu-packs.json")
    (entry,) = suitable_packs(load_recorded("rtx4090-desktop"), index, ENGINE)
    assert entry.name == f"cuda12-{this_platform()[0]}-{this_platform()[1]}" and entry.cuda_version == "12.4"
    pack = install_pack(entry)
    assert pack.problem is None and pack.library is not None
    assert pack.library.name == "libggml-cuda.so" and (pack.path / "lib" / "libcudart.so.12").is_file()
    assert not (pack.path / "lib" / "libggml-base.so").exists()  # the app's own, never a pack's


async def test_a_damaged_or_incomplete_pack_leaves_the_cpu_engine_working(
    served: tuple[Path, str], tiny_gguf: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    """The real engine on an NVIDIA machine (as detection found it) with two installed packs: a CUDA one
    whose library is not a library (a real child process tries to load it and fails) and a Vulkan one
    with a file missing. The model still loads and generates on the CPU, and the log says why."""
    import logging

    from launcher.engines.llamacpp.gpu_packs import PackIndex
    from tests.engines.llamacpp.support import load
    from tests.engines.support import greedy, run

    root, base = served
    cuda_data = _archive({"lib/libggml-cuda.so": b"\x7fELF not really a library"})
    vulkan_data = _archive({"lib/libggml-vulkan.so": b"\x7fELF", "lib/libextra.so": b"extra"})
    (root / "cuda.tar.gz").write_bytes(cuda_data)
    (root / "vulkan.tar.gz").write_bytes(vulkan_data)
    index = PackIndex(
        packs=[
            _entry("cuda", data=cuda_data, url=f"{base}/cuda.tar.gz", cuda_version="12.4"),
            _entry("vulkan", data=vulkan_data, url=f"{base}/vulkan.tar.gz"),
        ]
    )
    machine = load_recorded("rtx4090-desktop")
    for entry in suitable_packs(machine, index, ENGINE):
        install_pack(entry)
    vulkan = packs_dir() / index.packs[1].name
    (vulkan / "lib" / "libextra.so").unlink()
    monkeypatch.setattr("launcher.hardware.probe.probe_machine", lambda: machine)
    monkeypatch.setattr("launcher.engines.llamacpp.engine._version", lambda: ENGINE)

    with caplog.at_level(logging.WARNING, logger="launcher.engines.llamacpp.gpu_packs"):
        model = load(tiny_gguf, context=256, parallel=1)
    try:
        outcome = await run(model, greedy(model.tokenize("Hello"), max_tokens=4))
    finally:
        model.close()
    assert len(outcome.tokens) == 4 and outcome.last.finish_reason == "length"
    warnings = [record.getMessage() for record in caplog.records]
    assert any(
        f"{index.packs[0].name} did not load: libggml-cuda.so is not a loadable ggml backend" in w for w in warnings
    ), warnings
    assert any(f"{index.packs[1].name} is missing lib/libextra.so: install the pack again" in w for w in warnings)
