"""What each inference engine is, said once: the registry every layer asks about engines.

An `EngineSpec` names an engine, the formats it runs, how to install it, how the advisor must
size it (offload, sliding-window cache, KV quantization, tensor parallel) and whether it can run
on a machine. The advisor, the catalog, the server, the app and `launcher detect` all read it
here, so adding an engine is one spec, not a dozen edits.

Specs are data plus two cheap checks; nothing here imports a runtime. The engine's code itself
(`launcher.engines.<name>`) is named by `factory` and imported only by `launcher.engines.registry`
when a model is loaded. Built-in engines are listed in `BUILTIN_SPECS`; another package adds one
through the `launcher.engines` entry-point group, pointing at an `EngineSpec`:

    [project.entry-points."launcher.engines"]
    myengine = "my_package.spec:SPEC"

An engine that brings its own OpenAI-compatible server runs as a child process (`runs_as="child"`):
its spec's `child` (engine_specs/child.py) says how to launch it, and it is usable where its program
is found here.
"""

from __future__ import annotations

import importlib.metadata
import importlib.util
import logging
import threading
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from importlib import import_module
from typing import Literal

from launcher.core.errors import EngineUnavailableError
from launcher.core.paths import is_frozen
from launcher.engine_specs.child import ChildLaunch
from launcher.engine_specs.preference import Prefer, never
from launcher.hardware.machine import Machine

log = logging.getLogger(__name__)

ENTRY_POINT_GROUP = "launcher.engines"

BUILTIN_SPECS: tuple[str, ...] = (
    "launcher.engines.llamacpp.spec:SPEC",
    "launcher.engines.mlx.spec:SPEC",
    "launcher.engines.exllamav3.spec:SPEC",
    "launcher.engines.exllamav2.spec:SPEC",
    "launcher.engines.vllm.spec:SPEC",
    "launcher.engines.sglang.spec:SPEC",
)
"""The engines that ship with the launcher, in the order they are listed and preferred for a format:
the in-process ones, then those that run as a child server."""

SlidingCache = Literal["window", "llamacpp", "full"]
"""How an engine sizes the KV cache of sliding-window layers (the advisor's fit counts it):

- "window": every sequence keeps only its window (mlx-lm's rotating caches, vLLM);
- "llamacpp": one cache shared by all sequences (kv_unified); sliding layers hold
  `window * parallel` cells plus one micro-batch, padded to 256 cells, and copies of a
  sequence's window (checkpoints) are kept in host RAM so prefixes stay reusable;
- "full": sliding layers are as large as the full-attention ones.
"""

RunsAs = Literal["in_process", "child"]
"""Where an engine runs: in the launcher's process (its `Engine.load` returns a model it drives), or as a
child process serving an OpenAI-compatible API that the launcher starts, supervises and calls over HTTP."""

EngineStatus = Mapping[str, str | None]
"""Engine name -> None when usable, else the reason it is not."""


@dataclass(frozen=True)
class Availability:
    """Whether an engine can run on this machine, and in plain words why not."""

    usable: bool
    reason: str  # "llama-cpp-python 0.3.16 (CPU, AVX2)" or "not installed: pip install 'launcher[mlx]'"
    version: str | None = None
    backend: str | None = None  # "cpu" | "cuda" | "metal" | ...


MachineCheck = Callable[[Machine], str | None]
"""A machine -> None when the engine can run on it, else why not ("needs an NVIDIA GPU")."""


def any_machine(machine: Machine) -> str | None:
    """The check for engines that run everywhere the launcher does."""
    del machine
    return None


@dataclass(frozen=True)
class EngineSpec:
    """One inference engine, as the rest of the launcher needs to know it."""

    name: str  # "llamacpp": what `--engine` takes and what logs, metrics and configs say
    label: str  # "llama.cpp": what people read
    formats: tuple[str, ...]  # model formats it loads ("gguf", "mlx", "exl3", ...)
    factory: str  # "package.module:Class" building its `launcher.engines.base.Engine`
    runtime_module: str  # the import name of its runtime, found without importing it
    distribution: str  # the PyPI distribution of the runtime, for its version
    pip_extra: str  # `pip install 'launcher[<extra>]'` installs the runtime
    can_offload: bool = False  # can split layers between GPU and CPU RAM
    tensor_parallel: bool = False  # can split one model over several GPUs
    sliding_cache: SlidingCache = "full"
    quantized_kv: bool = False  # the advisor may give it a q8_0 KV cache when f16 does not fit
    runs_on: MachineCheck = field(default=any_machine)  # can it run on this hardware at all?
    suits: Callable[[Machine], bool] = field(default=lambda machine: True)  # is it worth proposing here?
    runs_as: RunsAs = "in_process"
    prefer: Prefer = never  # how it ranks itself for a machine and a model (engine_specs/preference.py)
    child: ChildLaunch | None = None  # how to launch it, for an engine that runs as a child

    def __post_init__(self) -> None:
        if (self.runs_as == "child") != (self.child is not None):
            raise ValueError(f"engine {self.name}: runs_as={self.runs_as!r} needs `child` exactly when it is 'child'")

    @property
    def install_hint(self) -> str:
        """How to get the runtime, as this copy of the launcher was installed: the double-click app
        has no pip, and its engines are the ones it was built with. A child engine is installed on
        its own, beside any launcher."""
        if self.child is not None:
            return self.child.install
        if is_frozen():
            return (
                f"this app does not carry {self.label}; run the launcher from its Python package for it "
                f"(pip install 'launcher[{self.pip_extra}]')"
            )
        return f"pip install 'launcher[{self.pip_extra}]'"

    def installed_version(self) -> str | None:
        """The runtime's version when it is installed (found without importing it), else None. A child
        engine is installed when its program is found here."""
        if self.child is not None:
            if self.child.program() is None:
                return None
            try:
                return importlib.metadata.version(self.distribution)
            except (importlib.metadata.PackageNotFoundError, ValueError):
                return "unknown"  # its own command on PATH, from a venv of its own
        try:
            if importlib.util.find_spec(self.runtime_module) is None:
                return None
        except (ImportError, ValueError):
            return None
        try:
            return importlib.metadata.version(self.distribution)
        except importlib.metadata.PackageNotFoundError:
            return "unknown"

    def availability(self, machine: Machine, *, this_process: bool = True) -> Availability:
        """Can it run on `machine`? `this_process=False` asks about another machine (a recorded one),
        where whether the runtime is installed here says nothing."""
        problem = self.runs_on(machine)
        if problem is not None:
            return Availability(usable=False, reason=problem)
        if not this_process:
            if self.child is not None:  # launched here only where installed: for another machine, a hand-off
                return Availability(
                    usable=False, reason=f"runs as a server of its own there: `launcher handoff {self.name} MODEL`"
                )
            return Availability(usable=True, reason="runs on this hardware")
        version = self.installed_version()
        if version is None:
            return Availability(usable=False, reason=f"not installed: {self.install_hint}")
        if self.child is not None:  # which program runs it says which copy (PATH or this Python)
            program = " ".join(self.child.program() or ())
            return Availability(usable=True, reason=f"{self.distribution} {version}: {program}", version=version)
        return Availability(usable=True, reason=f"{self.distribution} {version}", version=version)


_registered: dict[str, EngineSpec] = {}
_discovered = False
_discovery_lock = threading.Lock()


def register(spec: EngineSpec) -> None:
    """Add (or replace) an engine."""
    _discover()
    with _discovery_lock:
        _registered[spec.name] = spec


def unregister(name: str) -> None:
    """Remove an engine (tests that add a stand-in always remove it)."""
    _discover()
    with _discovery_lock:
        _registered.pop(name, None)


def _load(target: str) -> EngineSpec:
    module_name, _, attribute = target.partition(":")
    spec = getattr(import_module(module_name), attribute)
    if not isinstance(spec, EngineSpec):
        raise TypeError(f"{target} is not an EngineSpec")
    return spec


def _discover() -> None:
    """Load the built-in specs, then those other packages declare, once per process. Built into a
    new table that replaces the registry whole, so a thread asking meanwhile never sees half of it."""
    global _registered, _discovered
    if _discovered:
        return
    with _discovery_lock:
        if _discovered:
            return
        found: dict[str, EngineSpec] = {}
        for target in BUILTIN_SPECS:
            spec = _load(target)
            found[spec.name] = spec
        for entry in importlib.metadata.entry_points(group=ENTRY_POINT_GROUP):
            try:
                spec = _load(entry.value)
            except Exception as err:  # a broken plug-in is reported, never fatal
                log.warning("engine plug-in %s (%s) did not load: %s", entry.name, entry.value, err)
                continue
            if spec.name in found:
                log.warning(
                    "engine plug-in %s ignored: an engine named %r is already registered", entry.value, spec.name
                )
                continue
            found[spec.name] = spec
        _registered = found
        _discovered = True


def refresh() -> None:
    """Forget every engine and discover them again (after a plug-in was installed into this process)."""
    global _registered, _discovered
    with _discovery_lock:
        importlib.invalidate_caches()
        _registered = {}
        _discovered = False


def specs() -> tuple[EngineSpec, ...]:
    """Every registered engine, built-ins first."""
    _discover()
    return tuple(_registered.values())


def names() -> tuple[str, ...]:
    """Every registered engine's name."""
    return tuple(spec.name for spec in specs())


def get_spec(name: str) -> EngineSpec:
    """The engine called `name`; raises EngineUnavailableError naming the known ones."""
    _discover()
    try:
        return _registered[name]
    except KeyError:
        known = ", ".join(_registered) or "none"
        raise EngineUnavailableError(f"Unknown engine {name!r}. Known engines: {known}.") from None


def runs_as_child(name: str) -> bool:
    """True when `name` is a registered engine that runs as a child server (False for "auto" and for an
    unknown name: whoever plans it says it is unknown, with the known ones)."""
    _discover()
    spec = _registered.get(name)
    return spec is not None and spec.runs_as == "child"


def label(name: str) -> str:
    """An engine's readable name ("llama.cpp"), or the name itself for one not registered."""
    _discover()
    spec = _registered.get(name)
    return spec.label if spec is not None else name


def engine_status(machine: Machine, *, this_process: bool = True) -> dict[str, str | None]:
    """Engine name -> None when it can run on `machine`, else why not (see `EngineSpec.availability`)."""
    out: dict[str, str | None] = {}
    for spec in specs():
        availability = spec.availability(machine, this_process=this_process)
        out[spec.name] = None if availability.usable else availability.reason
    return out


@dataclass(frozen=True)
class FormatEngines:
    """The engines that load one format: those that can run here, and why the others cannot."""

    format: str
    usable: tuple[EngineSpec, ...]
    unusable: tuple[tuple[EngineSpec, str], ...]

    @property
    def first(self) -> EngineSpec | None:
        """The preferred engine that can run here, if any."""
        return self.usable[0] if self.usable else None

    @property
    def all(self) -> tuple[EngineSpec, ...]:
        """Every engine for the format, whether or not it can run here."""
        return self.usable + tuple(spec for spec, _ in self.unusable)

    def why_none(self) -> str:
        """Why no engine runs the format here, for a message."""
        if not self.unusable:
            return f"no launcher engine runs {self.format} models (use a GGUF, MLX or EXL quant)"
        return "; ".join(f"{spec.name}: {reason}" for spec, reason in self.unusable)


def engines_for_format(
    fmt: str,
    machine: Machine | None = None,
    *,
    status: EngineStatus | None = None,
    only: Iterable[str] | None = None,
    in_process: bool = False,
) -> FormatEngines:
    """Which engines run `fmt` here, and why not the others: the one answer to that question.

    With `machine`, each engine is checked on it; with `status`, that answer is used (the advisor
    is handed one); with neither, every engine for the format counts (advice for a machine this
    process knows nothing about). `only` narrows the engines considered (`--engine`); `in_process`
    leaves out the engines that run as a child server: a load the advisor picks the engine for runs
    in this process, and a child engine, which serves one model with a plan of its own, runs only
    when it is named (`--engine NAME`).
    """
    wanted = set(only) if only is not None else None
    usable: list[EngineSpec] = []
    unusable: list[tuple[EngineSpec, str]] = []
    for spec in specs():
        if fmt not in spec.formats or (wanted is not None and spec.name not in wanted):
            continue
        if in_process and spec.runs_as != "in_process":
            continue
        if status is not None:
            reason = status.get(spec.name, "not registered")
        elif machine is not None:
            availability = spec.availability(machine)
            reason = None if availability.usable else availability.reason
        else:
            reason = None
        if reason is None:
            usable.append(spec)
        else:
            unusable.append((spec, reason))
    return FormatEngines(format=fmt, usable=tuple(usable), unusable=tuple(unusable))
