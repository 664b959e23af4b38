"""UI test fixtures: offscreen Qt, Qt warnings fail tests, and nothing may be left running.

`no_leftovers` (autouse) fails a test that leaves a worker thread, a pool job or a child process
(a `launcher serve` server) running, after killing it so the next test starts clean.
"""

from __future__ import annotations

from collections.abc import Iterator

import psutil
import pytest

from launcher.ui import workers

# Harmless notes from the offscreen platform plugin; any other Qt warning fails the test.
IGNORED_QT_MESSAGES = ("propagateSizeHints", "This plugin does not support")


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Every UI test: Qt warnings are failures, except the offscreen plugin's notes."""
    for item in items:
        if "tests/ui/" in str(item.fspath).replace("\\", "/"):
            item.add_marker(pytest.mark.qt_log_level_fail("WARNING"))
            item.add_marker(pytest.mark.qt_log_ignore(*IGNORED_QT_MESSAGES))
            item.add_marker(pytest.mark.gui)


@pytest.fixture(autouse=True)
def no_leftovers(qapp) -> Iterator[None]:  # type: ignore[no-untyped-def]
    """Fail the test if it leaves threads, pool jobs or child processes behind."""
    yield
    problems: list[str] = []
    if not workers.pool().waitForDone(10_000):
        problems.append(f"{workers.pool().activeThreadCount()} background job(s) still running")
    threads = workers.running_threads()
    for thread in threads:
        thread.wait(5000)
    if workers.running_threads():
        problems.append(f"worker threads still running: {workers.running_threads()}")
    children = [c for c in psutil.Process().children(recursive=True) if c.is_running()]
    children = [c for c in children if c.status() != psutil.STATUS_ZOMBIE]
    for child in children:
        child.kill()
    if children:
        problems.append(f"child processes left running: {[c.cmdline() for c in children]}")
    if problems:
        pytest.fail("; ".join(problems))
