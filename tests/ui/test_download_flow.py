"""Downloads from the app against the local fake Hub: progress, success into the library, cancel + resume."""

from __future__ import annotations

import os

from launcher.catalog.progress import ProgressEvent
from launcher.hardware.recorded import load_recorded
from launcher.ui.download_worker import DownloadWorker
from launcher.ui.panels.models import ModelsPanel, progress_text

MB = 1024 * 1024


def test_download_a_catalog_model_from_the_models_page(qtbot, fake_hub, tiny_gguf) -> None:  # type: ignore[no-untyped-def]
    panel = ModelsPanel()
    qtbot.addWidget(panel)
    with qtbot.waitSignal(panel.rows_changed, timeout=30_000):
        panel.set_machine(load_recorded("cpu-avx2-laptop-16gb"), this_machine=False)
    assert panel.list.select_key("catalog:qwen3-0.6b")
    row = panel.list.selected_row()
    assert not row.downloaded
    quant = row.recommendation.choice.quant
    assert panel.actions.download_button.isVisibleTo(panel)
    assert quant in panel.actions.download_button.text()
    fake_hub.add_repo("unsloth/Qwen3-0.6B-GGUF", {f"Qwen3-0.6B-{quant}.gguf": tiny_gguf.read_bytes()})

    events: list[ProgressEvent] = []
    panel.actions.download_button.click()
    worker = panel.download
    assert worker is not None
    worker.progress.connect(events.append)
    with qtbot.waitSignal(panel.rows_changed, timeout=60_000):
        pass  # the download finishes, then the library is rescanned
    assert events and events[-1].kind == "done"
    assert "Downloaded" in panel.actions.status.text()
    row = panel.row("catalog:qwen3-0.6b")
    assert row is not None and row.downloaded and row.serve_spec
    assert panel.list.currentItem().text(4) == "On disk"
    assert panel.actions.serve_button.isEnabled()


def test_cancel_keeps_the_partial_file_and_the_next_download_resumes(qtbot, fake_hub) -> None:  # type: ignore[no-untyped-def]
    data = os.urandom(24 * MB)
    fake = fake_hub.add_repo("org/Cancel", {"c-Q4_K_M.gguf": data})["c-Q4_K_M.gguf"]
    fake.hold_after = 16 * MB
    first = DownloadWorker("org/Cancel")
    first.start()
    qtbot.waitUntil(lambda: fake_hub.served_for("c-Q4_K_M.gguf") >= 16 * MB, timeout=30_000)
    with qtbot.waitSignal(first.cancelled, timeout=30_000) as cancelled:
        first.cancel()
        fake.hold_after = None
        fake.release.set()
    first.wait()
    assert "resume" in cancelled.args[0]
    served_before = fake_hub.served_for("c-Q4_K_M.gguf")

    second = DownloadWorker("org/Cancel")
    events: list[ProgressEvent] = []
    second.progress.connect(events.append)
    with qtbot.waitSignal(second.succeeded, timeout=60_000) as done:
        second.start()
    second.wait()
    assert done.args[0].path.read_bytes() == data
    resumed = max(e.resumed_bytes for e in events)
    assert resumed > 0
    assert fake_hub.served_for("c-Q4_K_M.gguf") - served_before == len(data) - resumed
    assert "resumed from" in progress_text(next(e for e in events if e.resumed_bytes))


def test_failed_download_says_why(qtbot, fake_hub) -> None:  # type: ignore[no-untyped-def]
    worker = DownloadWorker("org/DoesNotExist")
    with qtbot.waitSignal(worker.failed, timeout=30_000) as failed:
        worker.start()
    worker.wait()
    assert "org/DoesNotExist" in failed.args[0]


def test_hub_search_then_download_adds_a_local_model(qtbot, fake_hub, tiny_gguf) -> None:  # type: ignore[no-untyped-def]
    fake_hub.add_repo(
        "someone/Tiny-Chat-GGUF", {"tiny-chat-Q4_K_M.gguf": tiny_gguf.read_bytes()}, tags=["gguf"], downloads=1234
    )
    panel = ModelsPanel()
    qtbot.addWidget(panel)
    with qtbot.waitSignal(panel.rows_changed, timeout=30_000):
        panel.set_machine(load_recorded("cpu-avx2-laptop-16gb"), this_machine=False)
    panel.search.setText("Tiny-Chat")
    with qtbot.waitSignal(panel.hub_results_changed, timeout=30_000) as found:
        panel.hub_button.click()
    assert [row.hub_repo for row in found.args[0]] == ["someone/Tiny-Chat-GGUF"]
    assert panel.list.select_key("hub:someone/Tiny-Chat-GGUF")
    assert panel.list.currentItem().text(4) == "On the Hub"
    with qtbot.waitSignal(panel.rows_changed, timeout=60_000):
        panel.actions.download_button.click()
    local = [row for row in panel.rows if row.kind == "local" and row.local and row.local.repo_id]
    assert any(row.local.repo_id == "someone/Tiny-Chat-GGUF" and row.serve_spec for row in local)
    # The file just downloaded is the one selected, so Serve runs exactly it.
    selected = panel.list.selected_row()
    assert selected is not None and selected.local is not None
    assert selected.local.repo_id == "someone/Tiny-Chat-GGUF" and selected.serve_spec
