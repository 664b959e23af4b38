"""Qt-free rows for the Models page: the catalog and the local library in one list, each with a fit verdict,
a size and a predicted speed from the advisor for this machine.

`build_rows` is pure apart from the library scan (disk I/O), so the page runs it in a worker.
Catalog models that are on disk become one row ("downloaded"); other local files get their own
rows with a plan from `plan_local` when their architecture is known.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any, Literal, Protocol

from launcher.advisor import (
    Recommendation,
    ServePlan,
    SpeedEstimate,
    plan_for_config,
    plan_local,
    predict_speed,
    recommend,
)
from launcher.advisor.calibration import CalibrationRun
from launcher.advisor.calibration_store import measured_runs
from launcher.catalog.catalog import default_catalog
from launcher.catalog.library import LibraryEntry, scan_library
from launcher.catalog.schema import Catalog, CatalogModel
from launcher.core.config import ServeConfig
from launcher.core.errors import LauncherError
from launcher.engine_specs import EngineStatus, engine_status, runs_as_child
from launcher.hardware.machine import Machine
from launcher.ui.metrics import Prediction


class ServerEndpointFacts(Protocol):
    """What a prediction for a running server needs from its ready line (a `ServerEndpoint`)."""

    url: str
    model: str
    engine: str
    serving: dict[str, Any]


RowKind = Literal["catalog", "local", "hub"]


@dataclass(frozen=True)
class ModelRow:
    """One line of the model list."""

    key: str
    title: str
    subtitle: str
    kind: RowKind
    verdict: str | None = None  # fit verdict (launcher.advisor.fit.Verdict) for the option the advisor would use
    size_bytes: int | None = None
    decode_tps: tuple[float, float] | None = None
    downloaded: bool = False
    serve_spec: str | None = None  # what `launcher serve` is given to run it (None: download first)
    catalog: CatalogModel | None = None
    local: LibraryEntry | None = None
    recommendation: Recommendation | None = None
    plan: ServePlan | None = None  # local files: how `launcher serve` would run them here
    speed: SpeedEstimate | None = None
    hub_repo: str | None = None
    hub_quant: str | None = None
    note: str | None = None  # why there is no verdict, or a problem with the files
    search_text: str = ""
    measured: CalibrationRun | None = None  # the last calibration run of this row's file on this machine

    def matches(self, query: str) -> bool:
        """Case-insensitive match on every word of the query."""
        return all(word in self.search_text for word in query.lower().split())


def _catalog_row(machine: Machine, model: CatalogModel, local: list[LibraryEntry], status: EngineStatus) -> ModelRow:
    params = f"{model.architecture.params_total_b:g}B"
    if model.architecture.is_moe:
        params += f" (A{model.architecture.params_active_b:g}B)"
    subtitle = f"{model.family} · {params} · {model.license}"
    try:
        rec = recommend(machine, model, status=status)
    except LauncherError as err:
        rec, note = None, str(err)
    else:
        note = None
    choice = rec.choice if rec else None
    usable = [e for e in local if e.servable]
    # The file the advisor picked is the one served, when it is on disk.
    usable.sort(key=lambda e: choice is None or (e.model.format, e.model.quant) != (choice.format, choice.quant))
    return ModelRow(
        key=f"catalog:{model.id}",
        title=model.name,
        subtitle=subtitle,
        kind="catalog",
        verdict=choice.fit.verdict if choice else None,
        size_bytes=choice.weights_bytes if choice else None,
        decode_tps=(choice.speed.decode_low, choice.speed.decode_high) if choice else None,
        downloaded=bool(usable),
        serve_spec=usable[0].name if usable else ("" if model.starter else None),
        catalog=model,
        local=usable[0] if usable else None,
        recommendation=rec,
        note=note,
        search_text=" ".join([model.id, model.name, model.family, *model.tags, model.description]).lower(),
    )


def _local_row(machine: Machine, entry: LibraryEntry) -> ModelRow:
    model = entry.model
    quant = f" · {model.quant}" if model.quant else ""
    where = {"hf-cache": "Hugging Face cache", "imported": "imported", "starter": "starter"}[entry.source]
    verdict = decode = plan = speed = None
    note = entry.problem
    if entry.architecture is not None and entry.usable:
        try:
            plan = plan_local(machine, model.format, entry.architecture, entry.size_bytes)
            verdict = plan.fit.verdict
            bits = entry.size_bytes * 8 / (entry.architecture.params_total_b * 1e9)
            speed = predict_speed(machine, entry.architecture, bits, plan.fit, engine=plan.engine)
            decode = (speed.decode_low, speed.decode_high)
        except (LauncherError, ValueError, ZeroDivisionError) as err:
            note = f"no prediction: {err}"
    elif entry.usable:
        note = "architecture unknown: no fit prediction"
    return ModelRow(
        key=f"local:{entry.name}",
        title=entry.name,
        subtitle=f"{model.format.upper()}{quant} · {where}",
        kind="local",
        verdict=verdict,
        size_bytes=entry.size_bytes or None,
        decode_tps=decode,
        downloaded=True,
        serve_spec=entry.name if entry.usable else None,
        local=entry,
        plan=plan,
        speed=speed,
        note=note,
        search_text=" ".join([entry.name, str(model.path), entry.repo_id or "", model.quant or ""]).lower(),
    )


def build_rows(
    machine: Machine,
    *,
    this_machine: bool = True,
    catalog: Catalog | None = None,
    library: list[LibraryEntry] | None = None,
) -> list[ModelRow]:
    """Catalog rows (downloaded ones first), then local files that are not in the catalog."""
    catalog = catalog or default_catalog()
    library = scan_library() if library is None else library
    # Another machine's advice checks its hardware only: whether a runtime is installed here says nothing.
    status = engine_status(machine, this_process=this_machine)
    by_catalog: dict[str, list[LibraryEntry]] = {}
    loose: list[LibraryEntry] = []
    for entry in library:
        if entry.model.catalog_id and catalog.get(entry.model.catalog_id):
            by_catalog.setdefault(entry.model.catalog_id, []).append(entry)
        else:
            loose.append(entry)
    rows = [_catalog_row(machine, model, by_catalog.get(model.id, []), status) for model in catalog.models]
    rows.sort(key=lambda r: (not r.downloaded, not (r.catalog and r.catalog.starter)))
    rows += [_local_row(machine, entry) for entry in loose]
    return [_with_measurement(machine, row) for row in rows] if this_machine else rows


def _with_measurement(machine: Machine, row: ModelRow) -> ModelRow:
    """The row with the last calibration run of its file here, if one was made."""
    if row.local is None:
        return row
    runs = measured_runs(machine, row.local.model.path.name)
    return replace(row, measured=runs[-1]) if runs else row


def measured_text(row: ModelRow, speed: SpeedEstimate | None) -> str | None:
    """'Measured here: decode 66 tok/s per stream (+4% of predicted), prefill ...' for the card."""
    run = row.measured
    if run is None or run.decode_tps is None:
        return None

    def beside(value: float | None, low: float | None, high: float | None) -> str:
        if value is None:
            return "not measured"
        shown = f"{value:.1f}" if value < 10 else f"{value:.0f}"
        if low is None or high is None:
            return f"{shown} tok/s"
        centre = (low + high) / 2
        return f"{shown} tok/s ({(value - centre) / centre:+.0%} of predicted)"

    decode = beside(run.decode_tps, *((speed and (speed.decode_low, speed.decode_high)) or (None, None)))
    prefill = beside(run.prefill_tps, *((speed and (speed.prefill_low, speed.prefill_high)) or (None, None)))
    when = run.when.split("T")[0]
    return (
        f"Measured here on {when} ({run.engine}, context {run.context} x {run.parallel}): decode {decode} per stream, "
        f"prefill {prefill}"
    )


def prediction_for_server(machine: Machine, endpoint: ServerEndpointFacts) -> Prediction | None:
    """The advisor's memory and speed prediction for exactly what the server runs (its model file,
    engine, context, parallel, KV type and GPU layers), corrected by this machine's calibration runs."""
    from launcher.bench.calibrate import ServedModel, predict_served

    health = {"model": endpoint.model, "engine": endpoint.engine, "serving": endpoint.serving}
    try:
        served = ServedModel.from_health(health, endpoint.url)
        predicted = predict_served(machine, served, calibration="stored")
    except (LauncherError, ValueError, ZeroDivisionError):
        return None
    speed, fit = predicted.speed, predicted.fit
    return Prediction(
        memory_bytes=predicted.memory_bytes,
        decode_low=speed.decode_low,
        decode_high=speed.decode_high,
        where=fit.label,
        prefill_low=speed.prefill_low,
        prefill_high=speed.prefill_high,
        checkpoint_bound_bytes=fit.checkpoint_bytes,
        calibrated_runs=speed.calibrated_runs,
    )


def decided_config(row: ModelRow, machine: Machine, config: ServeConfig) -> ServeConfig:
    """`config` with the advisor's decision for `row`'s file filled in where the form left it open
    (engine, context, GPU layers, KV cache type), planned as `launcher serve` plans, with the form's
    parallel sequences. The server then runs this decision instead of making its own. Unchanged when
    the file's architecture is unknown or it does not fit: the server explains that with its numbers.

    An engine that runs as a child server (vLLM, SGLang, a plug-in's) plans its own run when the server
    starts it (its command: the hand-off's plan for a catalog id), so for one the app names the engine
    and decides nothing else: a context sized here would override that plan, not carry it."""
    entry = row.local
    if entry is None or entry.architecture is None or not entry.usable or runs_as_child(config.engine):
        return config
    try:
        plan = plan_for_config(
            machine, entry.model.format, entry.architecture, entry.size_bytes, config, engine_status(machine)
        )
    except (LauncherError, ValueError):
        return config
    if not plan.fit.fits:
        return config
    return plan.fill(config)
