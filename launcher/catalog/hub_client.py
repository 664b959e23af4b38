"""Where the Hub is, who we are on it, where models go, and Hub errors in the user's words.

huggingface_hub reads HF_ENDPOINT and HF_HUB_CACHE once, at import; the launcher reads them at
call time and passes `endpoint=` / `cache_dir=` / `token=` explicitly, so a mirror set after
start-up (or per test) is honoured.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

import httpx2
from huggingface_hub import HfApi
from huggingface_hub import errors as hub_errors

from launcher.core import paths
from launcher.core.errors import (
    ConfigError,
    DownloadError,
    GatedRepoError,
    LauncherError,
    OfflineError,
    RepoNotFoundError,
)

DEFAULT_ENDPOINT = "https://huggingface.co"
_TRUE = {"1", "true", "yes", "on"}


@dataclass(frozen=True)
class HubContext:
    """Endpoint, token and cache dir for one operation."""

    endpoint: str
    token: str | None
    cache_dir: Path

    @classmethod
    def from_env(cls) -> HubContext:
        """HF_ENDPOINT (mirrors), HF_TOKEN or the settings' hf_token, and the models cache."""
        return cls(endpoint=hub_endpoint(), token=hub_token(), cache_dir=models_cache_dir())

    def api(self) -> HfApi:
        """An HfApi bound to this endpoint and token."""
        return HfApi(endpoint=self.endpoint, token=self.token)

    def repo_url(self, repo_id: str) -> str:
        """The repo's page on the Hub (where a license is accepted)."""
        return f"{self.endpoint}/{repo_id}"


def hub_endpoint() -> str:
    """The Hub URL: HF_ENDPOINT when set (mirrors), else huggingface.co."""
    return (os.environ.get("HF_ENDPOINT") or DEFAULT_ENDPOINT).rstrip("/")


def hub_token() -> str | None:
    """HF_TOKEN wins; then the launcher settings' hf_token; None lets huggingface_hub use its login."""
    token = os.environ.get("HF_TOKEN") or os.environ.get("HUGGING_FACE_HUB_TOKEN")
    if token:
        return token.strip()
    from launcher.core import settings

    try:
        return settings.load().hf_token or None
    except ConfigError:
        return None


def models_cache_dir() -> Path:
    """The Hugging Face cache models go to (settings.models_dir overrides the standard one)."""
    from launcher.core import settings

    try:
        custom = settings.load().models_dir
    except ConfigError:
        custom = None
    return Path(custom).expanduser() if custom else paths.hf_cache_dir()


def is_offline() -> bool:
    """True when HF_HUB_OFFLINE (or TRANSFORMERS_OFFLINE) is set, read now rather than at import."""
    value = os.environ.get("HF_HUB_OFFLINE") or os.environ.get("TRANSFORMERS_OFFLINE") or ""
    return value.strip().lower() in _TRUE


def offline_error(reason: str) -> OfflineError:
    """An OfflineError that lists what can be served without the network."""
    from launcher.catalog.library import scan_library

    try:
        names = [entry.name for entry in scan_library() if entry.servable]
    except LauncherError:
        names = []
    available = "\n".join(f"  {name}" for name in names) or "  (none; the starter model works offline)"
    return OfflineError(f"{reason}\nModels available locally:\n{available}")


def translate_hub_error(err: Exception, repo_id: str, ctx: HubContext, *, file: str | None = None) -> LauncherError:
    """A huggingface_hub / network exception as the launcher error a user can act on."""
    settings_hint = f'set HF_TOKEN or add hf_token = "hf_..." to {paths.settings_file()}'
    if isinstance(err, hub_errors.GatedRepoError):
        return GatedRepoError(
            f"{repo_id} is gated: accept its license at {ctx.repo_url(repo_id)} (logged in), then create a "
            f"read token at {ctx.endpoint}/settings/tokens and {settings_hint}."
            + (" The token in use has no access yet." if ctx.token else "")
        )
    if isinstance(err, hub_errors.RevisionNotFoundError):
        return RepoNotFoundError(f"{repo_id} has no revision (branch, tag or commit) like that on {ctx.endpoint}.")
    if isinstance(err, hub_errors.RemoteEntryNotFoundError):
        what = f"File {file!r}" if file else "That file"
        return RepoNotFoundError(f"{what} is not in {repo_id} on {ctx.endpoint}.")
    if isinstance(err, hub_errors.RepositoryNotFoundError):
        private = "" if ctx.token else f" If it is private, {settings_hint}."
        return RepoNotFoundError(f"No repo {repo_id!r} on {ctx.endpoint} (check the spelling).{private}")
    if isinstance(err, hub_errors.OfflineModeIsEnabled):
        return offline_error("HF_HUB_OFFLINE is set, so nothing can be downloaded.")
    if isinstance(err, hub_errors.HfHubHTTPError):
        status = err.response.status_code if err.response is not None else None
        if status in (401, 403):
            return GatedRepoError(
                f"{ctx.endpoint} refused access to {repo_id} (HTTP {status}). "
                "If it is gated or private, accept "
                f"its license at {ctx.repo_url(repo_id)} and {settings_hint}."
            )
        return DownloadError(f"{ctx.endpoint} answered HTTP {status} for {repo_id}; try again later.")
    if isinstance(err, httpx2.ConnectError | httpx2.TimeoutException | hub_errors.LocalEntryNotFoundError):
        return offline_error(f"Cannot reach {ctx.endpoint} (no network, or the mirror is down).")
    if isinstance(err, httpx2.TransportError):
        return DownloadError(f"The connection to {ctx.endpoint} failed ({err}). Run the pull again to resume.")
    if isinstance(err, hub_errors.FileMetadataError):
        return DownloadError(f"{ctx.endpoint} does not answer like a Hugging Face Hub (check HF_ENDPOINT): {err}")
    return DownloadError(f"Hub request for {repo_id} failed: {err}")


# What Hub calls raise that `translate_hub_error` understands (FileMetadataError: not a Hub answer).
HUB_EXCEPTIONS: tuple[type[Exception], ...] = (
    hub_errors.HfHubHTTPError,
    hub_errors.OfflineModeIsEnabled,
    hub_errors.LocalEntryNotFoundError,
    hub_errors.FileMetadataError,
    httpx2.TransportError,
)
