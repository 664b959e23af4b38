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
    """Fail the test if it leaves threads, pool jobs or child processes behind.

    Only processes started during this test count: session-scoped servers of other test
    packages (conformance, integrations) may legitimately be alive while UI tests run.
    """
    before = {c.pid for c in psutil.Process().children(recursive=True)}
    yield
    problems: list[str] = []
    if not workers.pool().waitForDone(10_000):
        problems.append(f"{workers.pool().activeThreadCount()} background job(s) still running")
    threads = workers.running_threads()
    for thread in threads:
        thread.wait(5000)
    if workers.running_threads():
        problems.append(f"worker threads still running: {workers.running_threads()}")
    leftovers: list[str] = []
    for child in psutil.Process().children(recursive=True):
        if child.pid in before:
            continue
        try:  # a child may exit (or become a zombie) while we look at it
            if child.status() == psutil.STATUS_ZOMBIE:
                continue
            leftovers.append(" ".join(child.cmdline()))
            child.kill()
        except psutil.Error:
            continue
    if leftovers:
        problems.append(f"child processes left running: {leftovers}")
    if problems:
        pytest.fail("; ".join(problems))
