"""The machine page's GPU engine card: on an NVIDIA machine it offers the pack that fits, downloads it
from the release's index (a real HTTP server here) when the button is pressed, and then says so."""

from __future__ import annotations

import hashlib
import json
import threading
from collections.abc import Iterator
from functools import partial
from http.server import SimpleHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest

from launcher.engine_specs import get_spec
from launcher.engines.llamacpp.gpu_packs import INDEX_ENV, packs_dir, this_platform
from launcher.hardware.recorded import load_recorded
from launcher.ui.panels.gpu_pack import GpuPackCard
from tests.engines.llamacpp.test_gpu_packs import _archive


@pytest.fixture
def release(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[str]:
    """A release folder with a CUDA pack and its index, served over HTTP; the index URL is set for the app."""
    root = tmp_path / "release"
    root.mkdir()
    data = _archive({"lib/libggml-cuda.so": b"\x7fELF" + b"\0" * 20000})
    (root / "cuda.tar.gz").write_bytes(data)
    server = ThreadingHTTPServer(("127.0.0.1", 0), partial(SimpleHTTPRequestHandler, directory=str(root)))
    base = f"http://127.0.0.1:{server.server_address[1]}"
    system, arch = this_platform()
    entry = {
        "name": f"cuda12-{system}-{arch}",
        "backend": "cuda",
        "os": system,
        "arch": arch,
        "engine_version": get_spec("llamacpp").installed_version(),
        "url": f"{base}/cuda.tar.gz",
        "sha256": hashlib.sha256(data).hexdigest(),
        "size_bytes": len(data),
        "label": "CUDA 12 (NVIDIA)",
        "cuda_version": "12.4",
    }
    (root / "gpu-packs.json").write_text(json.dumps({"packs": [entry]}))
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    monkeypatch.setenv(INDEX_ENV, f"{base}/gpu-packs.json")
    try:
        yield entry["name"]
    finally:
        server.shutdown()
        server.server_close()
        thread.join()


def test_the_card_offers_the_pack_that_fits_and_installs_it_when_asked(qtbot, release: str) -> None:  # type: ignore[no-untyped-def]
    card = GpuPackCard()
    qtbot.addWidget(card)
    card.set_machine(load_recorded("rtx4090-desktop"))
    qtbot.waitUntil(lambda: card.offer is not None, timeout=30_000)
    assert "The CUDA 12 (NVIDIA) pack" in card.status.text() and "NVIDIA GeForce RTX 4090" in card.status.text()
    assert not card.download_button.isHidden() and card.download_button.text() == "Download CUDA 12 (NVIDIA)"
    assert not (packs_dir() / release).exists()  # nothing is downloaded unasked

    card.download_button.click()
    qtbot.waitUntil(
        lambda: card.download is None and card.offer is not None and "Installed" in card.status.text(), timeout=30_000
    )
    assert (packs_dir() / release / "lib" / "libggml-cuda.so").is_file()
    assert card.download_button.isHidden() and card.bar.isHidden()


def test_a_machine_without_a_gpu_is_told_the_cpu_runs(qtbot) -> None:  # type: ignore[no-untyped-def]
    card = GpuPackCard()
    qtbot.addWidget(card)
    card.set_machine(load_recorded("cpu-avx2-laptop-16gb"))
    qtbot.waitUntil(lambda: card.offer is not None, timeout=30_000)
    assert card.status.text() == "No GPU was found: llama.cpp runs on the CPU."
    assert card.download_button.isHidden()
