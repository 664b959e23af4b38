"""The advisor's word on what to download: the variant of a catalog model to pull, and fit verdicts
for Hub search results. The catalog finds and fetches models; it asks these through the callbacks
`plan_pull(advise=...)` and `search_hub(judge=...)`, since it sits below the advisor."""

from __future__ import annotations

from dataclasses import replace

from launcher.advisor.plan import plan_local
from launcher.advisor.recommend import recommend
from launcher.advisor.tables import bits_per_weight
from launcher.catalog.hub_search import HubResult, HubVariant, catalog_match, estimate_architecture
from launcher.catalog.schema import CatalogModel, FormatName
from launcher.core.errors import LauncherError
from launcher.engine_specs import engine_status, engines_for_format
from launcher.hardware.machine import Machine
from launcher.hardware.probe import probe_machine


def advised_variant(entry: CatalogModel, machine: Machine | None = None) -> tuple[FormatName, str] | None:
    """The (format, quant) the advisor would run on `machine` (this one when None), among the
    formats the entry has; None when it cannot say."""
    try:
        machine = machine or probe_machine()
        choice = recommend(machine, entry, status=engine_status(machine)).choice
    except LauncherError:
        return None
    for fmt in entry.formats():
        if fmt == choice.format and choice.quant in entry.quants(fmt):
            return fmt, choice.quant
    return None


def judge_hub_result(result: HubResult, machine: Machine | None = None) -> HubResult:
    """`result` with a fit verdict on each variant, and a note when no engine here runs its format."""
    if not result.variants:
        return result
    entry = catalog_match(result.repo_id)
    try:
        machine = machine or probe_machine()
    except LauncherError:
        return result
    engines = engines_for_format(result.format, machine, in_process=True)
    note = None if engines.first else engines.why_none()
    variants = tuple(
        replace(_fit_variant(machine, result.format, variant, entry), engine_note=note) for variant in result.variants
    )
    return replace(result, variants=variants, catalog_id=entry.id if entry else None, estimated=entry is None)


def _fit_variant(machine: Machine, fmt: str, variant: HubVariant, entry: CatalogModel | None) -> HubVariant:
    """The advisor's verdict for one variant (unchanged when the advisor cannot say)."""
    if not variant.size_bytes:
        return variant
    try:
        if entry is not None:
            arch = entry.architecture
        else:
            arch = estimate_architecture(variant.size_bytes, bits_per_weight(fmt, variant.quant))
        plan = plan_local(machine, fmt, arch, variant.size_bytes)
    except (LauncherError, ValueError):
        return variant
    return replace(variant, verdict=plan.fit.verdict, context=plan.context)
