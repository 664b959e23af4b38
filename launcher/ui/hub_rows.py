"""Qt-free Hub search for the Models page: launcher.catalog's `hub_search` results, judged by the
advisor for this machine, as ModelRows."""

from __future__ import annotations

from functools import partial
from typing import Any, Protocol

from launcher.advisor.download_advice import judge_hub_result
from launcher.catalog.hub_search import search_hub
from launcher.hardware.machine import Machine
from launcher.ui.model_rows import ModelRow

SEARCH_LIMIT = 30


class HubResult(Protocol):
    """What the page reads from one Hub search result."""

    repo_id: str


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
    results = search_hub(query, limit=SEARCH_LIMIT, judge=partial(judge_hub_result, machine=machine))
    return [row_from_result(result) for result in results]
