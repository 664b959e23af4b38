"""`launcher bench --calibrate`: measure a running `launcher serve` on this machine, compare it with the
advisor's prediction for exactly what it serves, and store the ratios that calibrate later predictions.

The prediction is the advisor's raw model (no earlier calibration), for the model file, context,
parallel sequences, KV cache type, GPU layers and threads /health reports: a ratio is only
meaningful against the prediction it corrects. The workload is short (a few seconds on a small
model): three greedy answers for decode speed, two fresh ~1,000-token prompts for prefill speed
(fresh random text, so no prefix cache can serve them), the engine's own memory figures, and one
answer copying a code snippet with speculative decoding off and then on (the speed-up it gives an edit).
"""

from __future__ import annotations

import asyncio
import datetime as dt
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any, cast

import httpx

from launcher.advisor.calibration import (
    CalibrationRun,
    MachineCalibration,
    MemoryEstimate,
    calibrated_memory,
    measurable_bytes,
    size_class,
)
from launcher.advisor.calibration_store import CalibrationChoice, calibration_file, record_run, resolve_calibration
from launcher.advisor.fit import KV_BYTES_PER_ELEMENT, FitResult, KvType
from launcher.advisor.options import splits_over_gpus
from launcher.advisor.plan import plan_local
from launcher.advisor.speed import SpeedEstimate, estimate_speed
from launcher.bench.calibrate_measure import CalibrationWorkload, Measurement, measure
from launcher.bench.runner import ServerUnreachable, make_client, metrics_url
from launcher.core.errors import ModelError, ServerError
from launcher.core.model_types import Architecture
from launcher.engine_specs import engines_for_format
from launcher.hardware.machine import Machine, MemoryInfo


def _format_engine(fmt: str) -> str:
    """The engine that runs `fmt` first, for a server whose /health does not name its engine."""
    engines = engines_for_format(fmt).all
    if not engines:
        raise ValueError(f"no engine runs the format {fmt!r}")
    return engines[0].name


@dataclass(frozen=True)
class ServedModel:
    """What /health says the server runs, and with which settings."""

    model_id: str
    engine: str
    path: Path
    format: str
    context: int
    parallel: int
    kv_type: KvType
    gpu_layers: int | None  # -1: all
    threads: int | None

    @classmethod
    def from_health(cls, health: dict[str, Any], url: str) -> ServedModel:
        """Parse /health's JSON; ServerError when it has no usable `serving` object."""
        serving = health.get("serving")
        if not isinstance(serving, dict) or not serving:
            raise ServerError(
                f"{url} says nothing about what it serves (no 'serving' in its /health): calibration needs a "
                "launcher serve recent enough to report it, and --api-key when the server has one"
            )
        try:
            fmt = str(serving["format"])
            kv_type = str(serving.get("kv_cache_type") or "f16")
            if kv_type not in KV_BYTES_PER_ELEMENT:
                raise ValueError(f"unknown kv_cache_type {kv_type!r}")
            engine = str(health.get("engine") or _format_engine(fmt))
            return cls(
                model_id=str(health.get("model") or ""),
                engine=engine,
                path=Path(str(serving["model_path"])),
                format=fmt,
                context=_positive(serving["context"]),
                parallel=_positive(serving.get("parallel", 1)),
                kv_type=cast(KvType, kv_type),
                gpu_layers=_optional_int(serving.get("gpu_layers")),
                threads=_optional_int(serving.get("threads")),
            )
        except (KeyError, TypeError, ValueError) as err:
            raise ServerError(f"{url}'s /health has a 'serving' object this launcher cannot read ({err})") from None

    def describe(self) -> str:
        """'llamacpp serving gemma-3-270m-it-Q4_K_M.gguf (context 4096 x 1, KV f16)'."""
        return f"{self.engine} serving {self.path.name} (context {self.context} x {self.parallel}, KV {self.kv_type})"


def _positive(value: object) -> int:
    if type(value) is not int or value < 1:
        raise ValueError(f"expected a positive integer, got {value!r}")
    return value


def _optional_int(value: object) -> int | None:
    if value is not None and type(value) is not int:
        raise ValueError(f"expected an integer or null, got {value!r}")
    return value


@dataclass(frozen=True)
class Prediction:
    """The advisor's raw prediction for the served settings."""

    machine: Machine  # as predicted for: the served thread count, when it was set
    arch: Architecture
    bits_per_weight: float
    fit: FitResult
    speed: SpeedEstimate
    tensor_parallel: bool

    @property
    def memory_bytes(self) -> int:
        """What the engine's weights + KV + compute figures are compared with."""
        return measurable_bytes(self.fit)


def _model_facts(served: ServedModel) -> tuple[Architecture, int]:
    """Architecture numbers and weight bytes from the model on disk (as `launcher serve` plans it)."""
    from launcher.catalog.gguf_meta import read_gguf_metadata
    from launcher.catalog.local_formats import detect_directory

    if not served.path.exists():
        raise ModelError(
            f"the served model {served.path} is not on this machine: run --calibrate on the machine that serves it"
        )
    if served.format == "gguf":
        meta = read_gguf_metadata(served.path)
        return meta.to_architecture(), meta.file_bytes
    weights = sum(f.stat().st_size for f in served.path.glob("*.safetensors"))
    detected = detect_directory(served.path, weights)
    if detected is None or detected.architecture is None:
        raise ModelError(f"{served.path} has no architecture numbers the advisor can read: nothing to calibrate")
    return detected.architecture, weights


def _at_served_layers(fit: FitResult, machine: Machine, gpu_layers: int | None) -> FitResult:
    """The fit with the GPU layers the server really uses (a user may have pinned --gpu-layers)."""
    if gpu_layers is None or not (machine.gpus or machine.apple):
        return fit  # no GPU: every layer runs on the CPU whatever the flag says
    layers = fit.total_layers if gpu_layers < 0 else min(gpu_layers, fit.total_layers)
    return fit if layers == fit.gpu_layers else replace(fit, gpu_layers=layers)


def _as_if_idle(machine: Machine) -> Machine:
    """The machine with all its memory free: the served model already holds its share, and a fit
    against what is free now would count the model against itself (a partial offload, or no fit)."""
    return replace(
        machine,
        memory=MemoryInfo(machine.memory.total, machine.memory.total),
        gpus=tuple(replace(g, memory_free=g.memory_total) for g in machine.gpus),
    )


def predict_served(machine: Machine, served: ServedModel, calibration: CalibrationChoice = None) -> Prediction:
    """The advisor's prediction for exactly what the server runs: uncalibrated by default (what a
    calibration run measures against); the app passes "stored" to show this machine's corrected one."""
    arch, weights = _model_facts(served)
    runs = resolve_calibration(machine, calibration)  # this machine's, before the changes below
    machine = _as_if_idle(machine)
    if served.threads and served.threads < machine.cpu.physical_cores:
        # The speed model assumes every core works; a server pinned to fewer threads gets fewer cores,
        # so the ratio measures the machine's efficiency, not the user's --threads.
        machine = replace(machine, cpu=replace(machine.cpu, physical_cores=served.threads))
    plan = plan_local(
        machine,
        served.format,
        arch,
        weights,
        context=served.context,
        parallel=served.parallel,
        engine=served.engine,
        kv_type=served.kv_type,
    )
    fit = _at_served_layers(plan.fit, machine, served.gpu_layers)
    bits = weights * 8 / (arch.params_total_b * 1e9)
    tensor_parallel = splits_over_gpus(served.engine, machine)
    applicable = runs.for_model(served.engine, arch.params_active_b) if runs is not None else None
    speed = estimate_speed(machine, arch, bits, fit, tensor_parallel=tensor_parallel, calibration=applicable)
    return Prediction(machine, arch, bits, fit, speed, tensor_parallel)


def ratio(measured: float | None, predicted: float) -> float | None:
    """measured / predicted, None when not measured (or nothing was predicted)."""
    return measured / predicted if measured and predicted > 0 else None


@dataclass(frozen=True)
class CalibrationOutcome:
    """Everything one calibration run found, stored and now predicts."""

    machine: Machine
    served: ServedModel
    prediction: Prediction
    measured: Measurement
    run: CalibrationRun | None  # None: nothing was measured, nothing stored
    stored: MachineCalibration | None
    store_path: Path
    calibrated_speed: SpeedEstimate | None
    calibrated_memory: MemoryEstimate | None


async def fetch_served(client: httpx.AsyncClient, base_url: str) -> ServedModel:
    """What the server at `base_url` serves, from its /health (ServerError when it cannot say)."""
    url = metrics_url(base_url).removesuffix("/metrics") + "/health"
    try:
        response = await client.get(url)
    except httpx.ConnectError as err:
        raise ServerUnreachable(str(err)) from err
    except httpx.HTTPError as err:
        raise ServerError(f"{url} did not answer ({type(err).__name__}: {err})") from None
    try:
        health = response.json()
    except ValueError:
        health = None
    if not isinstance(health, dict):
        raise ServerError(f"{url} answered HTTP {response.status_code} without JSON: is this a launcher serve?")
    if response.status_code != 200 or health.get("status") != "ok":
        detail = f": {health['error']}" if health.get("error") else ""
        raise ServerError(
            f"{url} is not ready (status {health.get('status', response.status_code)!r}{detail}); "
            "calibrate once its model has loaded"
        )
    return ServedModel.from_health(health, base_url)


async def calibrate(
    base_url: str,
    machine: Machine,
    *,
    api_key: str | None = None,
    model: str | None = None,
    timeout: float = 600.0,
    store_path: Path | None = None,
    workload: CalibrationWorkload | None = None,
) -> CalibrationOutcome:
    """Predict, measure, store the run for `machine`, and predict again with the stored runs."""
    store_path = store_path or calibration_file()
    async with make_client(base_url, api_key, timeout) as client:
        served = await fetch_served(client, base_url)
        prediction = predict_served(machine, served)
        measured = await measure(client, base_url, model or served.model_id or None, workload or CalibrationWorkload())
    run = CalibrationRun(
        when=dt.datetime.now(dt.UTC).isoformat(timespec="seconds"),
        engine=served.engine,
        size_class=size_class(prediction.arch.params_active_b),
        model=served.path.name,
        context=served.context,
        parallel=served.parallel,
        kv_type=served.kv_type,
        decode_ratio=ratio(measured.decode_tps, prediction.speed.decode_mid),
        prefill_ratio=ratio(measured.prefill_tps, prediction.speed.prefill_mid),
        memory_ratio=ratio(measured.memory_bytes, prediction.memory_bytes),
        decode_tps=measured.decode_tps,
        prefill_tps=measured.prefill_tps,
        memory_bytes=measured.memory_bytes,
        speculative_speedup=measured.speculative_speedup,
    )
    if run.decode_ratio is None and run.prefill_ratio is None and run.memory_ratio is None:
        return CalibrationOutcome(machine, served, prediction, measured, None, None, store_path, None, None)
    stored = record_run(machine, run, store_path)
    applicable = stored.for_model(served.engine, prediction.arch.params_active_b)
    speed = estimate_speed(
        prediction.machine,
        prediction.arch,
        prediction.bits_per_weight,
        prediction.fit,
        tensor_parallel=prediction.tensor_parallel,
        calibration=applicable,
    )
    memory = calibrated_memory(prediction.fit, applicable)
    return CalibrationOutcome(machine, served, prediction, measured, run, stored, store_path, speed, memory)


def calibrate_blocking(base_url: str, machine: Machine, *, api_key: str | None = None) -> CalibrationOutcome:
    """`calibrate` for a caller without an event loop (the app runs it on a worker thread)."""
    return asyncio.run(calibrate(base_url, machine, api_key=api_key))
