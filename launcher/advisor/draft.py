"""Which draft model speeds up a served model (speculative decoding), and whether it fits beside it.

A catalog entry names its draft (`CatalogModel.draft`: a smaller model of the same family and
vocabulary, checked when the catalog loads). The draft is proposed only for an engine that loads
one next to the model, in that engine's format (llama.cpp: a GGUF; MLX: an MLX model directory), at
the widest quant that fits in the memory the model leaves free at its context and parallel
sequences: `fit.fit_draft` sizes its weights, KV cache and compute buffer. MLX keeps sliding-window
layers in rotating caches, which cannot take back the draft tokens the model rejects, so a model or
draft with such layers (Gemma 3) gets no draft there. A serve plan fills `ServeConfig.draft` only
with a copy already on disk: planning never downloads.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from launcher.advisor.fit import DraftMemory, FitResult, fit_draft, sliding_layer_count, weights_bytes
from launcher.advisor.options import engine_label, sliding_cache
from launcher.advisor.tables import bits_per_weight
from launcher.catalog.schema import Catalog, CatalogModel, FormatName
from launcher.core.errors import CatalogError
from launcher.core.units import format_bytes

if TYPE_CHECKING:
    from launcher.catalog.library import LibraryEntry

DRAFT_FORMATS: dict[str, FormatName] = {"llamacpp": "gguf", "mlx": "mlx"}
"""Engines that load a draft model beside the served one, and the format of both: llama.cpp a GGUF
file, MLX an MLX model directory (`--draft`)."""
DRAFT_ENGINES: frozenset[str] = frozenset(DRAFT_FORMATS)
"""Engines that load a draft model beside the served one (llama.cpp, GGUF; MLX, MLX)."""
DRAFT_QUANTS: dict[FormatName, tuple[str, ...]] = {
    "gguf": ("Q8_0", "Q6_K", "Q5_K_M", "Q4_K_M"),
    "mlx": ("8bit", "6bit", "5bit", "4bit", "3bit"),
}
"""A draft's quants per format, best first (others after them): its guesses must match the model's,
and at 0.5-1B parameters 8 bits cost little more memory than 4."""


@dataclass(frozen=True)
class DraftPick:
    """A draft model for a served one: which catalog entry, which quant, and what it costs beside it."""

    model: CatalogModel  # the draft's catalog entry
    quant: str  # "Q8_0" (GGUF), "8bit" (MLX)
    # where it comes from: "unsloth/Qwen3-0.6B-GGUF:Qwen3-0.6B-Q8_0.gguf" (GGUF: repo and file),
    # "mlx-community/Qwen3-0.6B-8bit" (MLX: the repo), or the local copy's path
    source: str
    memory: DraftMemory
    path: Path | None = None  # the local copy (serve plans); None for a proposal not yet downloaded

    @property
    def label(self) -> str:
        """'Qwen3 0.6B Q8_0', 'Qwen3 0.6B 8bit'."""
        return f"{self.model.name} {self.quant}"


def _catalog(catalog: Catalog | None) -> Catalog | None:
    if catalog is not None:
        return catalog
    from launcher.catalog.catalog import default_catalog

    try:
        return default_catalog()
    except CatalogError:
        return None


def draft_model(model_id: str, catalog: Catalog | None = None) -> CatalogModel | None:
    """The catalog entry that drafts for catalog model `model_id` (None: it names none, or no such id)."""
    found = _catalog(catalog)
    return found.draft_for(model_id) if found is not None else None


def _ranked_quants(draft: CatalogModel, fmt: FormatName) -> list[str]:
    """The draft's catalog quants in `fmt`, best first."""
    best = DRAFT_QUANTS[fmt]
    return sorted(draft.quants(fmt), key=lambda q: best.index(q) if q in best else len(best))


def _catalog_variant(draft: CatalogModel, fmt: FormatName, quant: str) -> tuple[str, int | None]:
    """Where the catalog's `quant` of the draft is ('repo:first file' for a GGUF, the repo for MLX) and
    its recorded size, if any."""
    if fmt == "gguf":
        assert draft.gguf is not None
        quants = draft.gguf.quants
        return f"{draft.gguf.repo}:{quants[quant].first_file}", quants[quant].size_bytes
    return draft.mlx[quant].repo, draft.mlx[quant].size_bytes


def _catalog_sizes(draft: CatalogModel, fmt: FormatName) -> list[tuple[str, int, Path | None]]:
    """(quant, weights, no path) for each of the draft's catalog quants in `fmt`, best first."""
    return [
        (q, _catalog_variant(draft, fmt, q)[1] or weights_bytes(draft.architecture, bits_per_weight(fmt, q)), None)
        for q in _ranked_quants(draft, fmt)
    ]


def _pick(
    draft: CatalogModel,
    fit: FitResult,
    engine: str,
    fmt: FormatName,
    sizes: Iterable[tuple[str, int, Path | None]],
) -> tuple[DraftPick | None, DraftMemory | None]:
    """The first (quant, weights, path) whose draft fits beside the model, and the last one tried."""
    tried: DraftMemory | None = None
    for quant, weights, path in sizes:
        memory = fit_draft(
            fit, draft.architecture, weights, name=f"{draft.name} {quant}", sliding=sliding_cache(engine)
        )
        if memory is None:
            return None, None
        tried = memory
        if memory.fits:
            source = str(path) if path else _catalog_variant(draft, fmt, quant)[0]
            return DraftPick(draft, quant, source, memory, path), memory
    return None, tried


def _rolls_back(engine: str, *models: CatalogModel | None) -> bool:
    """Whether `engine` can drop rejected draft tokens from the caches of `models` (the served model and
    its draft): not where it keeps sliding-window layers in rotating caches (MLX), which overwrite what
    it would go back to."""
    if sliding_cache(engine) != "window":
        return True
    return not any(m is not None and sliding_layer_count(m.architecture) for m in models)


def propose_draft(
    model: CatalogModel, engine: str, fmt: str, fit: FitResult, *, catalog: Catalog | None = None
) -> tuple[DraftPick | None, str | None]:
    """The draft the advisor proposes for `model` served by `engine` in `fmt` as `fit` places it: the
    catalog's draft at the widest quant that fits beside it, and one sentence saying so or why not
    (None when there is nothing to say: no draft in the catalog, another engine, a model that does
    not fit)."""
    draft = draft_model(model.id, catalog)
    draft_fmt = DRAFT_FORMATS.get(engine)
    if draft is None or draft_fmt is None or fmt != draft_fmt or not fit.fits or not draft.quants(draft_fmt):
        return None, None
    if not _rolls_back(engine, model, draft):
        return None, (
            f"No draft model: {engine_label(engine)} keeps sliding-window layers in rotating caches, which "
            f"cannot take back the tokens a draft ({draft.name}) guesses wrong; llama.cpp with the GGUF runs one."
        )
    pick, tried = _pick(draft, fit, engine, draft_fmt, _catalog_sizes(draft, draft_fmt))
    context = f"{fit.context // 1024}k context" + (f" x {fit.parallel}" if fit.parallel > 1 else "")
    if pick is not None:
        # The catalog id can name copies in several formats: an MLX one is named by its repo.
        pull, use = draft.id, draft.id
        if draft_fmt != "gguf":
            pull, use = f"{draft.id} --format {draft_fmt} --quant {pick.quant}", pick.source
        return pick, (
            f"Draft model: {pick.label} has the same vocabulary and guesses a few tokens ahead that "
            f"{engine_label(engine)} checks in one batched step (speculative decoding: the same output, faster "
            f"where the text is predictable); it needs {format_bytes(pick.memory.used)} beside the model at "
            f"{context} (`launcher pull {pull}`, then `--draft {use}`)."
        )
    if tried is None:  # a partial offload
        return None, (
            f"No draft model: {draft.name} would take GPU memory from the model's layers, which already spill "
            "to CPU RAM."
        )
    return None, (
        f"No room for the draft model {tried.name} beside it: it needs {format_bytes(tried.used)} at {context}, "
        f"{format_bytes(tried.room)} is left."
    )


def _local_quant(draft: CatalogModel, fmt: FormatName, entry: LibraryEntry) -> str:
    """A library copy's quant as the catalog names it: the one read from its files ('Q8_0', '8bit'),
    else the MLX variant its repo is, else its file or folder name."""
    if entry.model.quant:
        return entry.model.quant
    if fmt == "mlx":
        found = next((label for label, v in draft.mlx.items() if v.repo == entry.repo_id), None)
        if found:
            return found
    return entry.model.path.name


def local_draft(
    catalog_id: str | None,
    engine: str,
    fmt: str,
    fit: FitResult,
    library: Iterable[LibraryEntry],
    *,
    catalog: Catalog | None = None,
) -> DraftPick | None:
    """The catalog's draft for `catalog_id`, from a copy already in `library` (usable, in the format
    `engine` loads a draft in: a GGUF for llama.cpp, an MLX folder for MLX), that fits beside the model
    `fit` places; None when there is none on disk, it does not fit, or `engine` loads no draft (or
    cannot take back its rejected tokens). Reads nothing but the entries given: never the Hub."""
    draft_fmt = DRAFT_FORMATS.get(engine)
    if catalog_id is None or draft_fmt is None or fmt != draft_fmt or not fit.fits:
        return None
    found = _catalog(catalog)
    draft = found.draft_for(catalog_id) if found is not None else None
    if found is None or draft is None or not _rolls_back(engine, found.get(catalog_id), draft):
        return None
    order = {q: i for i, q in enumerate(_ranked_quants(draft, draft_fmt))}
    copies = sorted(
        (
            (_local_quant(draft, draft_fmt, e), e)
            for e in library
            if e.model.catalog_id == draft.id and e.model.format == draft_fmt and e.usable
        ),
        key=lambda copy: order.get(copy[0], len(order)),
    )
    pick, _ = _pick(draft, fit, engine, draft_fmt, [(q, e.size_bytes, e.model.path) for q, e in copies])
    return pick
