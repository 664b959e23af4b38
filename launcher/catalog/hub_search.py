"""Hub search with quant variants, sizes and a fit verdict for this machine.

`list_models(search=TEXT, filter=<format tag>, sort=downloads)` finds repos; the top ones are
opened with `model_info(files_metadata=True)` (EXL repos: their branches) to list the variants
and their sizes. The verdict comes from the advisor: with the catalog's architecture when the
repo is a catalog one, otherwise from an architecture estimated from the file size and the
quant's bits per weight (said so in the result, since a GGUF header cannot be read without
downloading it). The catalog sits below the advisor, so the caller hands the advisor's judgement
in (`judge`).
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass, replace

from launcher.catalog.hub_client import HUB_EXCEPTIONS, HubContext, is_offline, offline_error, translate_hub_error
from launcher.catalog.local_formats import gguf_quant_from_name, group_gguf_files
from launcher.catalog.schema import CatalogModel
from launcher.core.errors import CatalogError
from launcher.core.model_types import Architecture

SEARCH_TAGS = {"gguf": "gguf", "mlx": "mlx", "exl3": "exl3", "exl2": "exl2"}
_EXL_BRANCH = re.compile(r"^\d+(\.\d{1,2})?bpw$")
_PREFERRED = ("Q4_K_M", "4bit", "4.0bpw")
_GOOD = ("full_gpu", "unified")

# Typical dense-transformer shapes by size (Qwen2.5 / Llama 3.x config.json), used only to size the
# KV cache of a repo we know nothing else about: (params_b, layers, heads, kv_heads, head_dim, hidden).
_TYPICAL_SHAPES = (
    (0.5, 24, 14, 2, 64, 896),
    (1.5, 28, 12, 2, 128, 1536),
    (3.0, 36, 16, 2, 128, 2048),
    (8.0, 32, 32, 8, 128, 4096),
    (14.0, 48, 40, 8, 128, 5120),
    (32.0, 64, 40, 8, 128, 5120),
    (70.0, 80, 64, 8, 128, 8192),
    (120.0, 96, 96, 8, 128, 12288),
)


@dataclass(frozen=True)
class HubVariant:
    """One downloadable quant of a repo."""

    quant: str
    files: tuple[str, ...]
    size_bytes: int | None
    revision: str = "main"
    verdict: str | None = None  # the advisor's: full_gpu, partial, cpu, unified, wont_fit
    context: int | None = None  # the context the fit was computed at
    engine_note: str | None = None  # why no engine can run this format here (None: one can)


@dataclass(frozen=True)
class HubResult:
    """A Hub repo and what of it could run here."""

    repo_id: str
    format: str
    downloads: int | None
    likes: int | None
    gated: bool
    variants: tuple[HubVariant, ...] = ()
    catalog_id: str | None = None
    estimated: bool = False  # the fit used an architecture guessed from the size
    note: str | None = None

    @property
    def best(self) -> HubVariant | None:
        """The variant to suggest: a 4-bit one that fits well, else the largest that fits at all."""
        fitting = [v for v in self.variants if v.verdict and v.verdict != "wont_fit"]
        good = [v for v in fitting if v.verdict in _GOOD] or fitting
        preferred = [v for v in good if v.quant in _PREFERRED]
        if preferred:
            return preferred[0]
        if good:
            return max(good, key=lambda v: v.size_bytes or 0)
        return min(self.variants, key=lambda v: v.size_bytes or 0, default=None)

    @property
    def quant(self) -> str | None:
        """The suggested variant's quant."""
        return self.best.quant if self.best else None

    @property
    def size_bytes(self) -> int | None:
        """The suggested variant's size."""
        return self.best.size_bytes if self.best else None

    @property
    def verdict(self) -> str | None:
        """The suggested variant's fit verdict."""
        return self.best.verdict if self.best else None


def search_hub(
    query: str,
    *,
    fmt: str = "gguf",
    limit: int = 20,
    detail_limit: int = 8,
    ctx: HubContext | None = None,
    judge: Callable[[HubResult], HubResult] | None = None,
) -> list[HubResult]:
    """Repos matching `query` in format `fmt`, most downloaded first; the top ones with their variants,
    which `judge` (the advisor's `judge_hub_result` for a machine) gives fit verdicts."""
    if fmt not in SEARCH_TAGS:
        raise CatalogError(f"Unknown format {fmt!r}; search supports {', '.join(SEARCH_TAGS)}.")
    if is_offline():
        raise offline_error("HF_HUB_OFFLINE is set, so the Hub cannot be searched.")
    ctx = ctx or HubContext.from_env()
    api = ctx.api()
    try:
        found = list(api.list_models(search=query, filter=SEARCH_TAGS[fmt], sort="downloads", limit=limit))
    except HUB_EXCEPTIONS as err:
        raise translate_hub_error(err, f"search {query!r}", ctx) from None
    results = [
        HubResult(repo_id=m.id, format=fmt, downloads=m.downloads, likes=m.likes, gated=bool(m.gated)) for m in found
    ]
    detailed = [_with_variants(r, ctx) for r in results[:detail_limit]]
    judged = [judge(r) for r in detailed] if judge is not None else detailed
    return judged + results[detail_limit:]


def _with_variants(result: HubResult, ctx: HubContext) -> HubResult:
    api = ctx.api()
    try:
        if result.format in ("exl2", "exl3"):
            refs = api.list_repo_refs(result.repo_id)
            branches = [b.name for b in refs.branches if _EXL_BRANCH.match(b.name)][:6]
            variants = [_directory_variant(ctx, result.repo_id, branch, quant=branch) for branch in branches]
        else:
            info = api.model_info(result.repo_id, files_metadata=True)
            sizes = {s.rfilename: (s.lfs.size if s.lfs else s.size) for s in info.siblings or []}
            if result.format == "gguf":
                variants = _gguf_variants(sizes)
            else:
                quant = next((p for p in result.repo_id.lower().split("-") if p.endswith("bit")), "mlx")
                variants = [_sum_variant(sizes, quant, "main")]
    except HUB_EXCEPTIONS as err:
        return replace(result, note=str(translate_hub_error(err, result.repo_id, ctx)))
    return replace(result, variants=tuple(v for v in variants if v.files))


def _gguf_variants(sizes: dict[str, int | None]) -> list[HubVariant]:
    variants = []
    for first, group in group_gguf_files(sizes).items():
        total = sum(sizes[f] or 0 for f in group)
        quant = gguf_quant_from_name(first) or first
        variants.append(HubVariant(quant=quant, files=tuple(group), size_bytes=total or None))
    return sorted(variants, key=lambda v: v.size_bytes or 0)


def _directory_variant(ctx: HubContext, repo_id: str, revision: str, *, quant: str) -> HubVariant:
    info = ctx.api().model_info(repo_id, revision=revision, files_metadata=True)
    sizes = {s.rfilename: (s.lfs.size if s.lfs else s.size) for s in info.siblings or []}
    return _sum_variant(sizes, quant, revision)


def _sum_variant(sizes: dict[str, int | None], quant: str, revision: str) -> HubVariant:
    weights = sorted(name for name in sizes if name.endswith(".safetensors"))
    total = sum(sizes[name] or 0 for name in weights)
    return HubVariant(quant=quant, files=tuple(weights), size_bytes=total or None, revision=revision)


def catalog_match(repo_id: str) -> CatalogModel | None:
    from launcher.catalog.catalog import default_catalog

    try:
        catalog = default_catalog()
    except CatalogError:
        return None
    for entry in catalog.models:
        repos = {entry.gguf.repo} if entry.gguf else set()
        repos |= {v.repo for v in entry.mlx.values()}
        repos |= {v.repo for v in (*entry.exl3.values(), *entry.exl2.values())}
        if repo_id in repos:
            return entry
    return None


def estimate_architecture(size_bytes: int, bits_per_weight: float) -> Architecture:
    """A plausible dense architecture for a model of this size (params = bytes * 8 / bpw)."""
    params_b = max(size_bytes * 8 / bits_per_weight / 1e9, 0.01)
    shape = min(_TYPICAL_SHAPES, key=lambda s: abs(s[0] - params_b))
    _, layers, heads, kv_heads, head_dim, hidden = shape
    return Architecture(
        params_total_b=params_b,
        params_active_b=params_b,
        layers=layers,
        attention_heads=heads,
        kv_heads=kv_heads,
        head_dim=head_dim,
        hidden_size=hidden,
        max_context=32768,
    )
