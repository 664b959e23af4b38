"""Qt-free Hub search for the Models page: launcher.catalog's `hub_search` results as ModelRows.

Written against a small protocol (a result has `repo_id`, and may have `format`, `size_bytes`,
`verdict`, `downloads`, `likes`, `gated`, `quant`) so the page keeps working as that module grows.
"""

from __future__ import annotations

from importlib import import_module
from typing import Any, Protocol

from launcher.core.errors import CatalogError
from launcher.hardware.machine import Machine
from launcher.ui.model_rows import ModelRow

SEARCH_LIMIT = 30


class HubResult(Protocol):
    """What the page reads from one Hub search result."""

    repo_id: str


def _search_function() -> Any:
    try:
        module = import_module("launcher.catalog.hub_search")
    except ModuleNotFoundError as err:
        raise CatalogError("Hub search is not available in this build of the launcher.") from err
    for name in ("search_hub", "search"):
        if hasattr(module, name):
            return getattr(module, name)
    raise CatalogError("Hub search is not available in this build of the launcher.")


def _call(search: Any, query: str, machine: Machine) -> list[Any]:
    try:
        return list(search(query, machine=machine, limit=SEARCH_LIMIT))
    except TypeError:  # an older signature without machine/limit
        return list(search(query))


def row_from_result(result: Any) -> ModelRow:
    """One Hub repo as a list row."""
    repo = str(result.repo_id)
    fmt = getattr(result, "format", None)
    quant = getattr(result, "quant", None)
    downloads = getattr(result, "downloads", None)
    details = [str(fmt).upper() if fmt else "Hub repo"]
    if quant:
        details.append(str(quant))
    if downloads:
        details.append(f"{int(downloads):,} downloads")
    if getattr(result, "gated", False):
        details.append("gated: accept the license on the Hub and set a token")
    fit = getattr(result, "fit", None)
    verdict = getattr(result, "verdict", None) or (getattr(fit, "verdict", None) if fit is not None else None)
    speed = getattr(result, "speed", None)
    decode = (speed.decode_low, speed.decode_high) if speed is not None and hasattr(speed, "decode_low") else None
    return ModelRow(
        key=f"hub:{repo}",
        title=repo,
        subtitle=" · ".join(details),
        kind="hub",
        verdict=verdict,
        size_bytes=getattr(result, "size_bytes", None),
        decode_tps=decode,
        hub_repo=repo,
        hub_quant=str(quant) if quant else None,
        note=_note(result),
        search_text=repo.lower(),
    )


def _note(result: Any) -> str | None:
    notes = [str(n) for n in (getattr(result, "note", None),) if n]
    if getattr(result, "estimated", False):
        notes.append("fit estimated from the file size (architecture not known)")
    return "; ".join(notes) or None


def search_rows(query: str, machine: Machine) -> list[ModelRow]:
    """Search the Hub (network; run in a worker)."""
    return [row_from_result(result) for result in _call(_search_function(), query, machine)]
