"""The launcher's exception tree. Every error a user can meet is one of these.

    LauncherError                   base; `str(err)` is the user-facing message (what to change)
    ├── ConfigError                 bad settings file, bad flag combination
    ├── HardwareProbeError          a probe source failed in a way we could not absorb
    ├── CatalogError                unknown catalog id, bad catalog data
    ├── ModelError                  a model on disk is unusable
    │   ├── ModelNotFoundError      no such file / library entry
    │   ├── ModelFormatError        not a GGUF, unsupported architecture, missing files
    │   └── ModelDoesNotFitError    the advisor's numbers say it cannot load here
    ├── DownloadError               anything that stops a pull
    │   ├── GatedRepoError          license not accepted / token missing
    │   ├── RepoNotFoundError       no such repo, revision or file
    │   ├── OfflineError            no network or HF_HUB_OFFLINE
    │   ├── DiskFullError           not enough free disk for the files
    │   ├── ChecksumError           sha256 does not match the Hub's LFS metadata
    │   └── DownloadCancelled       the user cancelled
    ├── EngineError                 engine missing, unusable here, or failed at run time
    │   └── EngineUnavailableError  the runtime is not installed / cannot run on this machine
    └── ServerError                 the server process could not start (port in use, ...)

Conversion to user-facing shapes happens at the edges only: the CLI prints `str(err)`
and exits non-zero, the server maps to OpenAI/Anthropic JSON bodies, the UI shows a dialog.
A message that wraps another one (an error's text, a library entry's problem) is joined by
`in_context`, so the wrapped text's path and final period are not said twice.
"""

from __future__ import annotations

from os import PathLike


def in_context(context: str, detail: str, *, subject: str | PathLike[str] | None = None) -> str:
    """`context: detail.` as one sentence, for a message that wraps another (often an error's text).

    Our errors name their path and end with a period ("/m.gguf is not a GGUF file."), so a plain
    f"{path}: {err}." says both twice. Here `subject`, the word of `context` that is its first or last
    (a path, usually), is left out of the context when the detail already names it, and a period is
    added only to a detail that does not end a sentence already.
    """
    detail = detail.strip()
    if subject is not None and (named := str(subject)) in detail:
        context = context.strip().removeprefix(named).removesuffix(named).strip()
    sentence = f"{context}: {detail}" if context else detail
    return sentence if sentence.endswith((".", "!", "?")) else f"{sentence}."


class LauncherError(Exception):
    """Base class; the message is written for the user and says what to change."""

    exit_code = 1


class ConfigError(LauncherError):
    """Settings or flags that cannot work together."""

    exit_code = 2


class HardwareProbeError(LauncherError):
    """A probe source failed in a way the probe could not absorb."""


class CatalogError(LauncherError):
    """Unknown catalog id or invalid catalog data."""


class ModelError(LauncherError):
    """A model on disk cannot be used."""


class ModelNotFoundError(ModelError):
    """No such file or library entry."""


class ModelFormatError(ModelError):
    """The file is not in a format (or architecture) the engine can load."""


class ModelDoesNotFitError(ModelError):
    """The advisor's memory fit says the model cannot load on this machine."""


class DownloadError(LauncherError):
    """A pull could not complete."""


class GatedRepoError(DownloadError):
    """The repo is gated or private: a license must be accepted or a token given."""


class RepoNotFoundError(DownloadError):
    """No such repo, revision or file on the Hub."""


class OfflineError(DownloadError):
    """No network, or HF_HUB_OFFLINE is set."""


class DiskFullError(DownloadError):
    """Not enough free disk for the files."""


class ChecksumError(DownloadError):
    """The downloaded bytes do not match the Hub's sha256."""


class DownloadTooLarge(DownloadError):
    """The server sent more bytes than the file's known size; the transfer stopped before writing them."""


class DownloadCancelled(DownloadError):
    """The user cancelled the download."""


class EngineError(LauncherError):
    """An engine failed to load or run."""


class EngineUnavailableError(EngineError):
    """The engine's runtime is not installed or cannot run on this machine."""


class ServerError(LauncherError):
    """The server could not start."""


class UpdateError(LauncherError):
    """An update could not be checked for, downloaded, verified or installed; the running version is untouched."""
