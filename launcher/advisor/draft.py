"""Which draft model speeds up a served model (speculative decoding), and whether it fits beside it.

A catalog entry names its draft (`CatalogModel.draft`: a smaller model of the same family and
vocabulary, checked when the catalog loads). The draft is proposed only for an engine that loads
one next to the model (llama.cpp; MLX's is not wired), at the widest quant that fits in the memory
the model leaves free at its context and parallel sequences: `fit.fit_draft` sizes its weights, KV
cache and compute buffer. A serve plan fills `ServeConfig.draft` only with a copy already on disk:
planning never downloads.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from launcher.advisor.fit import DraftMemory, FitResult, fit_draft, weights_bytes
from launcher.advisor.options import engine_label, sliding_cache
from launcher.advisor.tables import bits_per_weight
from launcher.catalog.schema import Catalog, CatalogModel
from launcher.core.errors import CatalogError
from launcher.core.units import format_bytes

if TYPE_CHECKING:
    from launcher.catalog.library import LibraryEntry

DRAFT_ENGINES: frozenset[str] = frozenset({"llamacpp"})
"""Engines that load a draft model beside the served one (llama.cpp, GGUF). MLX's engine has n-gram
speculation but no draft model wired in yet."""
DRAFT_QUANTS: tuple[str, ...] = ("Q8_0", "Q6_K", "Q5_K_M", "Q4_K_M")
"""A draft's quants, best first: its guesses must match the model's, and at 0.5-1B parameters Q8_0
costs little more memory than Q4_K_M."""


@dataclass(frozen=True)
class DraftPick:
    """A draft model for a served one: which catalog entry, which quant, and what it costs beside it."""

    model: CatalogModel  # the draft's catalog entry
    quant: str  # "Q8_0"
    source: str  # "unsloth/Qwen3-0.6B-GGUF:Qwen3-0.6B-Q8_0.gguf"
    memory: DraftMemory
    path: Path | None = None  # the local copy (serve plans); None for a proposal not yet downloaded

    @property
    def label(self) -> str:
        """'Qwen3 0.6B Q8_0'."""
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


def _ranked_quants(draft: CatalogModel) -> list[str]:
    quants = list(draft.gguf.quants) if draft.gguf else []
    return sorted(quants, key=lambda q: DRAFT_QUANTS.index(q) if q in DRAFT_QUANTS else len(DRAFT_QUANTS))


def _pick(
    draft: CatalogModel, fit: FitResult, engine: str, sizes: Iterable[tuple[str, int, Path | None]]
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
            assert draft.gguf is not None
            source = str(path) if path else f"{draft.gguf.repo}:{draft.gguf.quants[quant].first_file}"
            return DraftPick(draft, quant, source, memory, path), memory
    return None, tried


def _catalog_sizes(draft: CatalogModel) -> list[tuple[str, int, Path | None]]:
    assert draft.gguf is not None
    return [
        (q, draft.gguf.quants[q].size_bytes or weights_bytes(draft.architecture, bits_per_weight("gguf", q)), None)
        for q in _ranked_quants(draft)
    ]


def propose_draft(
    model: CatalogModel, engine: str, fmt: str, fit: FitResult, *, catalog: Catalog | None = None
) -> tuple[DraftPick | None, str | None]:
    """The draft the advisor proposes for `model` served by `engine` in `fmt` as `fit` places it: the
    catalog's draft at the widest quant that fits beside it, and one sentence saying so or why not
    (None when there is nothing to say: no draft in the catalog, another engine, a model that does
    not fit)."""
    draft = draft_model(model.id, catalog)
    if draft is None or draft.gguf is None or not fit.fits:
        return None, None
    if engine == "mlx":
        return None, (
            f"{draft.name} could draft tokens for it (speculative decoding), but a draft model is not wired "
            "into the MLX engine yet: llama.cpp with the GGUF runs one."
        )
    if engine not in DRAFT_ENGINES or fmt != "gguf":
        return None, None
    pick, tried = _pick(draft, fit, engine, _catalog_sizes(draft))
    context = f"{fit.context // 1024}k context" + (f" x {fit.parallel}" if fit.parallel > 1 else "")
    if pick is not None:
        return pick, (
            f"Draft model: {pick.label} has the same vocabulary and guesses a few tokens ahead that "
            f"{engine_label(engine)} checks in one batched step (speculative decoding: the same output, faster "
            f"where the text is predictable); it needs {format_bytes(pick.memory.used)} beside the model at "
            f"{context} (`launcher pull {draft.id}`, then `--draft {draft.id}`)."
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


def local_draft(
    catalog_id: str | None,
    engine: str,
    fmt: str,
    fit: FitResult,
    library: Iterable[LibraryEntry],
    *,
    catalog: Catalog | None = None,
) -> DraftPick | None:
    """The catalog's draft for `catalog_id`, from a copy already in `library` (GGUF, usable), that
    fits beside the model `fit` places; None when there is none on disk, it does not fit, or
    `engine` loads no draft. Reads nothing but the entries given: never the Hub."""
    if catalog_id is None or engine not in DRAFT_ENGINES or fmt != "gguf" or not fit.fits:
        return None
    draft = draft_model(catalog_id, catalog)
    if draft is None:
        return None
    order = {q: i for i, q in enumerate(_ranked_quants(draft))}
    copies = sorted(
        (e for e in library if e.model.catalog_id == draft.id and e.model.format == "gguf" and e.usable),
        key=lambda e: order.get(e.model.quant or "", len(order)),
    )
    sizes = [(e.model.quant or e.model.path.name, e.size_bytes, e.model.path) for e in copies]
    pick, _ = _pick(draft, fit, engine, sizes)
    return pick
