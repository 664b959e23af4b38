"""Progress events: bytes, speed, ETA, throttling, cancel, the terminal bar and the tqdm adapter."""

from __future__ import annotations

import io
import os
import threading

import pytest
from huggingface_hub import hf_hub_download

from launcher.catalog.progress import ProgressEvent, ProgressTracker, TerminalBar, format_progress_line
from launcher.core import paths
from launcher.core.errors import DownloadCancelled
from tests.fixtures.fake_hub import FakeHub

MIB = 1024 * 1024


class FakeClock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def test_speed_and_eta_come_from_recent_bytes() -> None:
    clock = FakeClock()
    events: list[ProgressEvent] = []
    tracker = ProgressTracker(100 * MIB, 1, events.append, clock=clock)
    tracker.start()
    tracker.start_file("model.gguf", already_on_disk=20 * MIB)  # resumed: counted as done, not as speed
    for _ in range(4):
        clock.now += 1.0
        tracker.advance(10 * MIB)
    last = events[-1]
    assert last.bytes_done == 60 * MIB and last.resumed_bytes == 20 * MIB
    assert last.speed == pytest.approx(10 * MIB)
    assert last.eta_s == pytest.approx(4.0)
    assert last.fraction == pytest.approx(0.6)


def test_events_are_throttled_but_file_boundaries_always_reported() -> None:
    clock = FakeClock()
    events: list[ProgressEvent] = []
    tracker = ProgressTracker(1000, 1, events.append, clock=clock, min_interval_s=0.5)
    tracker.start_file("a")
    for _ in range(100):
        tracker.advance(1)  # the clock does not move: no event
    tracker.verifying()
    tracker.finish_file()
    tracker.finish()
    assert [e.kind for e in events] == ["file", "verify", "progress", "done"]
    assert events[-1].bytes_done == 100 and events[-1].files_done == 1


def test_cancel_raises_from_the_next_update() -> None:
    cancel = threading.Event()
    tracker = ProgressTracker(10, 1, None, cancel)
    tracker.advance(1)
    cancel.set()
    with pytest.raises(DownloadCancelled, match="resume"):
        tracker.advance(1)


def test_terminal_bar_writes_lines_when_not_a_terminal() -> None:
    stream = io.StringIO()
    bar = TerminalBar(stream)
    bar(ProgressEvent("progress", 5 * MIB, 10 * MIB, file="m.gguf", speed=2 * MIB, eta_s=2.5))
    bar(ProgressEvent("done", 10 * MIB, 10 * MIB, file="m.gguf"))
    lines = stream.getvalue().splitlines()
    assert lines[0] == "[##############              ]  50% 5.0 MiB/10.0 MiB 2.0 MiB/s ETA 0:02 m.gguf"
    assert lines[1].startswith("[############################] 100%") and lines[1].endswith("done m.gguf")


def test_format_line_without_speed_yet() -> None:
    line = format_progress_line(ProgressEvent("start", 0, 0))
    assert "--/s" in line and "ETA --:--" in line


def test_tqdm_adapter_receives_huggingface_hub_progress(fake_hub: FakeHub) -> None:
    data = os.urandom(3 * MIB)
    fake_hub.add_repo("org/Bar", {"bar.gguf": data})
    events: list[ProgressEvent] = []
    tracker = ProgressTracker(len(data), 1, events.append, min_interval_s=0)
    hf_hub_download(
        "org/Bar", "bar.gguf", cache_dir=paths.hf_cache_dir(), endpoint=fake_hub.url, tqdm_class=tracker.tqdm_class()
    )
    assert tracker.bytes_done == len(data)
    assert events and events[-1].bytes_done == len(data)
