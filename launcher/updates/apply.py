"""One update, start to end, as both the window and `launcher update` run it once the files are verified.

The order matters, and so does what a failure at each point means:

1. before the swap (`install.install` raises, whatever the exception): the old version is in place and
   working, so the servers stopped for the update are started again from it, and the failure goes up
   to the caller as it came ("not installed; this version stays");
2. after the swap the new version IS installed, whatever happens next: the GPU packs are put in place
   and the stopped servers started again from the new executable, and a failure of either is one more
   line of the report, never an exception that would read as "the update was not installed";
3. the downloaded release file is removed from the cache once installed (the Windows installer, which
   runs from that file after this process quits, keeps it).

Everything needed after the swap is imported before it: from then on the running (old) app's
executable path holds the new version, and a frozen app imports its modules from that path.
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Callable, Sequence

from launcher.engines.llamacpp import gpu_pack_install  # noqa: F401  (install_packs uses it after the swap)
from launcher.updates import install, servers
from launcher.updates.current import Installation
from launcher.updates.download import Downloaded
from launcher.updates.install import InstallResult
from launcher.updates.servers import Restarted, StoppedServer

__all__ = ["apply_update"]

log = logging.getLogger(__name__)


def apply_update(
    installation: Installation,
    downloaded: Downloaded,
    version: str,
    stopped: Sequence[StoppedServer] = (),
    *,
    report: Callable[[str], None] = log.info,
) -> InstallResult:
    """Install `downloaded` (release `version`) over `installation`, whose servers `stopped` were
    stopped for it; returns the install's result with one line per thing done after it (packs,
    servers). Raises what the install raised, after the stopped servers serve again from the old
    version (`report` gets a line for each of those)."""
    try:
        result = install.install(installation, downloaded.path, version)
    except BaseException:
        for line in _restart(stopped, None):
            report(line)
        raise
    lines = [result.message]
    try:
        lines += install.install_packs(downloaded.packs)
    except Exception as err:  # the app is installed; only the packs wait
        lines.append(f"The GPU packs were not updated ({err}); `launcher gpu-pack install` retries.")
    if stopped and result.restart_argv:
        lines += _restart(stopped, result.restart_argv[0])
    elif stopped:
        lines.append(
            f"{len(stopped)} server(s) of this installation were stopped for the update; the installer restarts "
            "the app, and the servers start again when you start them."
        )
    if result.restart_argv is not None:  # installed from the cache's copy: it need not keep it
        with contextlib.suppress(OSError):
            downloaded.path.unlink(missing_ok=True)
    return InstallResult(result.restart_argv, "\n".join(lines))


def _restart(stopped: Sequence[StoppedServer], executable: str | None) -> list[str]:
    """Start the stopped servers again (from `executable`, default their own); one line each."""
    if not stopped:
        return []
    try:
        done: list[Restarted] = servers.restart(stopped, executable)
    except Exception as err:
        urls = ", ".join(server.record.url for server in stopped)
        return [f"The servers stopped for the update ({urls}) could not be started again ({err}); start them again."]
    return [restarted.message for restarted in done]
