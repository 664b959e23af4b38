"""Turn `launcher pull CATALOG_ID|REPO[:FILE] [--format] [--quant]` into an exact PullPlan.

A catalog entry names the repo, revision and files of each format/quant; the advisor picks the
format and quant when the user did not. A bare Hub repo is inspected with
`model_info(files_metadata=True)`: a repo of GGUFs is grouped into quants (split shards
together) and one quant is picked; an MLX/EXL repo is fetched with include patterns so only the
weights, configs and tokenizer come down, never other variants or the original checkpoint.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable

from huggingface_hub.hf_api import RepoSibling
from huggingface_hub.utils import filter_repo_objects  # type: ignore[attr-defined]  # public, lazily exported

from launcher.catalog.download import PullPlan, RemoteFile
from launcher.catalog.hub_client import (
    HUB_EXCEPTIONS,
    HubContext,
    is_offline,
    offline_error,
    translate_hub_error,
)
from launcher.catalog.local_formats import gguf_quant_from_name, group_gguf_files
from launcher.catalog.schema import CatalogModel, ExlVariant, FormatName, MlxVariant
from launcher.core.errors import CatalogError, ConfigError, RepoNotFoundError
from launcher.core.model_types import ModelFormat
from launcher.core.units import format_bytes

# What an MLX / EXL / safetensors model needs; anything else in the repo stays on the Hub.
ALLOW_PATTERNS = ("*.json", "*.safetensors", "tokenizer*", "*.jinja", "*.txt", "*.model", "*.tiktoken")
IGNORE_PATTERNS = ("original/*", "*.pth", "*.bin", "*.gguf", "*.onnx*", "*.msgpack", "*.h5", "*.ot")
DEFAULT_GGUF_QUANT = "Q4_K_M"

Advise = Callable[[CatalogModel], "tuple[FormatName, str] | None"]
"""Picks the (format, quant) of a catalog entry to download, or None when it cannot say."""


def plan_pull(
    spec: str,
    *,
    fmt: FormatName | None = None,
    quant: str | None = None,
    revision: str | None = None,
    ctx: HubContext | None = None,
    advise: Advise | None = None,
) -> PullPlan:
    """The exact repo, commit and files for SPEC (a catalog id or REPO[:FILE]).

    For a catalog id with no format or quant given, `advise` picks them (the advisor's
    `advised_variant` for a machine); without it the catalog's default GGUF quant is pulled."""
    ctx = ctx or HubContext.from_env()
    if is_offline():
        raise offline_error(f"HF_HUB_OFFLINE is set, so {spec} cannot be downloaded.")
    entry = _catalog_entry(spec)
    if entry is not None:
        return _plan_catalog(entry, fmt, quant, ctx, advise)
    repo_id, _, file = spec.partition(":")
    if repo_id.count("/") != 1:
        raise CatalogError(f"{spec!r} is neither a catalog id nor a Hub repo (owner/name[:FILE]).")
    return plan_repo(repo_id, file or None, fmt=fmt, quant=quant, revision=revision, ctx=ctx)


def _catalog_entry(spec: str) -> CatalogModel | None:
    from launcher.catalog.catalog import default_catalog

    if "/" in spec:
        return None
    try:
        return default_catalog().get(spec)
    except CatalogError:
        return None


# ----------------------------------------------------------------------------- catalog entries


def _plan_catalog(
    entry: CatalogModel, fmt: FormatName | None, quant: str | None, ctx: HubContext, advise: Advise | None
) -> PullPlan:
    fmt, quant = choose_variant(entry, fmt, quant, advise)
    if fmt == "gguf":
        assert entry.gguf is not None
        files = entry.gguf.quants[quant].files
        return plan_repo(
            entry.gguf.repo, None, fmt="gguf", quant=quant, revision=entry.gguf.revision, ctx=ctx,
            only_files=files, catalog_id=entry.id,
        )  # fmt: skip
    variant: MlxVariant | ExlVariant = (
        entry.mlx[quant] if fmt == "mlx" else entry.exl3[quant] if fmt == "exl3" else entry.exl2[quant]
    )
    return plan_repo(variant.repo, None, fmt=fmt, quant=quant, revision=variant.revision, ctx=ctx, catalog_id=entry.id)


def choose_variant(
    entry: CatalogModel, fmt: FormatName | None, quant: str | None, advise: Advise | None = None
) -> tuple[FormatName, str]:
    """The (format, quant) to pull: the user's, else `advise`'s (the advisor's choice for a machine),
    else the catalog's default."""
    formats = entry.formats()
    if not formats:
        raise CatalogError(f"{entry.id} has no downloadable weights in the catalog.")
    if fmt is not None and fmt not in formats:
        raise ConfigError(f"{entry.id} has no {fmt} weights; available: {', '.join(formats)}.")
    if quant is not None:
        for candidate in [fmt] if fmt else formats:
            match = _match_quant(quant, entry.quants(candidate))
            if match:
                return candidate, match
        where = fmt or "any format"
        listing = "; ".join(f"{f}: {', '.join(entry.quants(f))}" for f in ([fmt] if fmt else formats))
        raise ConfigError(f"{entry.id} has no quant {quant!r} in {where}. Available: {listing}.")
    advised = advise(entry) if advise is not None else None
    if advised and (fmt is None or advised[0] == fmt):
        return advised
    chosen = fmt or ("gguf" if "gguf" in formats else formats[0])
    quants = entry.quants(chosen)
    return chosen, DEFAULT_GGUF_QUANT if DEFAULT_GGUF_QUANT in quants else quants[0]


def _match_quant(wanted: str, available: Iterable[str]) -> str | None:
    return next((q for q in available if q.lower() == wanted.lower()), None)


# ----------------------------------------------------------------------------- Hub repos


def plan_repo(
    repo_id: str,
    file: str | None,
    *,
    fmt: FormatName | None = None,
    quant: str | None = None,
    revision: str | None = None,
    ctx: HubContext,
    only_files: list[str] | None = None,
    catalog_id: str | None = None,
) -> PullPlan:
    """Plan a pull from a Hub repo: one GGUF quant (or FILE), or the needed files of an MLX/EXL repo."""
    if fmt in ("exl2", "exl3") and quant and not revision:
        revision = quant  # EXL repos keep each bits-per-weight on its own branch
    siblings, commit, tags = _repo_files(repo_id, revision, ctx)
    by_path = {s.path: s for s in siblings}
    if only_files is not None:
        missing = [f for f in only_files if f not in by_path]
        if missing:
            raise RepoNotFoundError(
                f"{', '.join(missing)} not found in {repo_id}; the catalog entry may be out of date. "
                f"Pull the repo directly: launcher pull {repo_id}"
            )
        chosen = [by_path[f] for f in only_files]
        return _gguf_plan(repo_id, revision, commit, chosen, quant, catalog_id)
    groups = group_gguf_files(by_path)
    if file and file.endswith(".gguf"):
        group = next((g for g in groups.values() if file in g), None)
        if group is None:
            listing = ", ".join(sorted(groups)) or "no GGUF files"
            raise RepoNotFoundError(f"{file!r} is not in {repo_id}. It has: {listing}.")
        return _gguf_plan(repo_id, revision, commit, [by_path[f] for f in group], None, catalog_id)
    quant = quant or file
    if fmt is None and _format_from_tags(repo_id, tags) != "safetensors":
        fmt = _format_from_tags(repo_id, tags)  # type: ignore[assignment]  # an MLX/EXL repo with a stray GGUF
    if groups and fmt in (None, "gguf"):
        first = _pick_gguf_group(repo_id, groups, by_path, quant)
        return _gguf_plan(repo_id, revision, commit, [by_path[f] for f in groups[first]], None, catalog_id)
    if fmt == "gguf":
        raise RepoNotFoundError(f"{repo_id} has no GGUF files.")
    return _directory_plan(repo_id, revision, commit, siblings, tags, fmt, quant, catalog_id)


def _repo_files(repo_id: str, revision: str | None, ctx: HubContext) -> tuple[list[RemoteFile], str, list[str]]:
    try:
        info = ctx.api().model_info(repo_id, revision=revision, files_metadata=True)
    except HUB_EXCEPTIONS as err:
        raise translate_hub_error(err, repo_id, ctx) from None
    if not info.sha:
        raise RepoNotFoundError(f"{ctx.endpoint} did not say which commit {repo_id} is at.")
    files = [_remote(s) for s in info.siblings or []]
    return files, info.sha, list(info.tags or [])


def _remote(sibling: RepoSibling) -> RemoteFile:
    lfs = sibling.lfs
    return RemoteFile(
        path=sibling.rfilename,
        size=lfs.size if lfs else sibling.size,
        sha256=lfs.sha256 if lfs else None,
        git_oid=sibling.blob_id,
    )


def _pick_gguf_group(
    repo_id: str, groups: dict[str, list[str]], by_path: dict[str, RemoteFile], quant: str | None
) -> str:
    by_quant: dict[str, str] = {}
    for first in groups:
        by_quant.setdefault((gguf_quant_from_name(first) or first).upper(), first)
    if quant:
        found = by_quant.get(quant.upper())
        if found:
            return found
    elif len(groups) == 1:
        return next(iter(groups))
    elif DEFAULT_GGUF_QUANT in by_quant:
        return by_quant[DEFAULT_GGUF_QUANT]
    sizes = {q: sum(by_path[f].size or 0 for f in groups[first]) for q, first in by_quant.items()}
    listing = ", ".join(f"{q} ({format_bytes(size)})" for q, size in sorted(sizes.items()))
    lead = f"{repo_id} has no quant {quant!r}" if quant else f"{repo_id} has several quants"
    raise ConfigError(f"{lead}; pick one with --quant: {listing}.")


def _gguf_plan(
    repo_id: str,
    revision: str | None,
    commit: str,
    files: list[RemoteFile],
    quant: str | None,
    catalog_id: str | None,
) -> PullPlan:
    return PullPlan(
        repo_id=repo_id,
        revision=revision or "main",
        commit=commit,
        files=tuple(files),
        format="gguf",
        quant=quant or gguf_quant_from_name(files[0].path),
        catalog_id=catalog_id,
        entry_file=files[0].path,
    )


def _directory_plan(
    repo_id: str,
    revision: str | None,
    commit: str,
    siblings: list[RemoteFile],
    tags: list[str],
    fmt: FormatName | None,
    quant: str | None,
    catalog_id: str | None,
) -> PullPlan:
    wanted = list(
        filter_repo_objects(
            siblings,
            allow_patterns=list(ALLOW_PATTERNS),
            ignore_patterns=list(IGNORE_PATTERNS),
            key=lambda f: f.path,
        )
    )
    if not any(f.path.endswith(".safetensors") for f in wanted):
        raise RepoNotFoundError(
            f"{repo_id} has neither GGUF nor safetensors weights at {revision or 'main'}; "
            "nothing the launcher can run. (EXL repos keep each size on a branch: add --quant 4.0bpw.)"
        )
    model_format: ModelFormat = fmt or _format_from_tags(repo_id, tags)
    if not quant and model_format == "mlx":
        quant = next((part for part in repo_id.lower().split("-") if part.endswith("bit")), None)
    return PullPlan(
        repo_id=repo_id,
        revision=revision or "main",
        commit=commit,
        files=tuple(wanted),
        format=model_format,
        quant=quant or (revision if revision and revision != "main" else None),
        catalog_id=catalog_id,
    )


def _format_from_tags(repo_id: str, tags: list[str]) -> ModelFormat:
    lowered = {t.lower() for t in tags}
    name = repo_id.lower()
    if "mlx" in lowered or name.startswith("mlx-community/"):
        return "mlx"
    if "exl3" in lowered or name.endswith("exl3"):
        return "exl3"
    if "exl2" in lowered or name.endswith("exl2"):
        return "exl2"
    return "safetensors"
