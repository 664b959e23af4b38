"""GPU packs: the CUDA or Vulkan backend of llama.cpp, downloaded once into the data folder.

The installed app carries a CPU-only llama.cpp (one build for every x86-64 CPU, with its
variants loaded at start). A GPU backend is large (CUDA's libraries alone are hundreds of MB) and
only some machines can use it, so it comes as a pack: a `.tar.gz` with `pack.json` and the
backend's shared libraries, built by the release workflow for the same llama.cpp as the app and
listed with its sha256 in the release's pack index (`gpu-packs.json`).

- `suitable_packs` picks, from what `launcher detect` found, the packs this machine can use, best
  first: CUDA 12 for an NVIDIA card whose driver supports the pack's CUDA and whose compute
  capability the pack was built for; Vulkan for any other GPU (and as the NVIDIA fallback).
- A pack lives outside the frozen bundle (in the data folder), so its libraries are the ones
  loaded, and it is never updated silently: a new one is installed only when the user asks.
- Before use, each installed pack is checked (every file present with the size and sha256
  recorded at install) and probed in a child process (a broken CUDA library may crash the process
  that loads it); the first that passes is used, the others are reported, and with none the CPU
  backend runs as before.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import sys
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from launcher.core.errors import in_context
from launcher.core.paths import data_dir
from launcher.engines.llamacpp.spec import SPEC
from launcher.hardware.machine import Machine

log = logging.getLogger(__name__)

INDEX_ENV = "LAUNCHER_GPU_PACK_INDEX"
"""URL (or path) of the pack index; the release build writes its own into the bundle."""
PACK_MANIFEST = "pack.json"

Backend = Literal["cuda", "vulkan"]


class PackEntry(BaseModel):
    """One pack as the index lists it."""

    model_config = ConfigDict(extra="ignore")  # newer indexes may say more

    name: str = Field(pattern=r"^[a-z0-9][a-z0-9._\-]*$")  # "cuda12-linux-x86_64": also its folder name
    backend: Backend
    os: Literal["linux", "windows"]
    arch: Literal["x86_64", "arm64"]
    engine_version: str  # the llama-cpp-python it was built against; only that one may load it
    url: str
    sha256: str = Field(pattern=r"^[0-9a-f]{64}$")
    size_bytes: int = Field(gt=0)
    label: str = ""  # "CUDA 12 (NVIDIA)"
    cuda_version: str | None = None  # "12.4": the driver must support at least this CUDA
    min_compute: tuple[int, int] | None = None  # oldest compute capability the pack has kernels for


class PackIndex(BaseModel):
    """The release's list of packs."""

    model_config = ConfigDict(extra="ignore")

    packs: list[PackEntry]


class InstalledManifest(BaseModel):
    """`pack.json` inside an installed pack: the entry it came from and what was unpacked."""

    model_config = ConfigDict(extra="ignore")

    entry: PackEntry
    files: dict[str, tuple[int, str]]  # relative path -> (size, sha256)
    library: str  # the backend library, relative to the pack folder


@dataclass(frozen=True)
class InstalledPack:
    """A pack in the data folder, and what is wrong with it (None: nothing found)."""

    path: Path
    manifest: InstalledManifest | None
    problem: str | None

    @property
    def name(self) -> str:
        """The pack's name (its folder's, when the manifest cannot be read)."""
        return self.manifest.entry.name if self.manifest else self.path.name

    @property
    def library(self) -> Path | None:
        """The backend library to load."""
        return self.path / self.manifest.library if self.manifest else None


def packs_dir() -> Path:
    """Where packs are installed (outside any app bundle, so updating the app keeps them)."""
    return data_dir() / "gpu-packs"


def this_platform() -> tuple[str, str]:
    """(os, arch) as pack entries name them."""
    system = "windows" if sys.platform == "win32" else "darwin" if sys.platform == "darwin" else "linux"
    machine = os.uname().machine if hasattr(os, "uname") else os.environ.get("PROCESSOR_ARCHITECTURE", "")
    arch = "arm64" if machine.lower() in ("arm64", "aarch64") else "x86_64"
    return system, arch


def _version(text: str | None) -> tuple[int, ...]:
    parts: list[int] = []
    for part in (text or "").split("."):
        if not part.isdigit():
            break
        parts.append(int(part))
    return tuple(parts)


def why_not(entry: PackEntry, machine: Machine, engine_version: str | None) -> str | None:
    """None when `machine` can use the pack, else why not (in words for the user)."""
    system, arch = this_platform()
    if (entry.os, entry.arch) != (system, arch):
        return f"built for {entry.os} {entry.arch}, this is {system} {arch}"
    if engine_version is not None and entry.engine_version != engine_version:
        return f"built for llama-cpp-python {entry.engine_version}, this app has {engine_version}"
    if entry.backend == "vulkan":
        return None if machine.gpus else "no GPU found"
    nvidia = machine.nvidia_gpus
    if not nvidia:
        return "no NVIDIA GPU found"
    # The driver reports major.minor ("12.4"); a toolkit may be named to the patch ("12.4.1").
    if entry.cuda_version and _version(machine.cuda_driver_version)[:2] < _version(entry.cuda_version)[:2]:
        found = machine.cuda_driver_version or "unknown"
        return f"the NVIDIA driver supports CUDA {found}; this pack needs {entry.cuda_version} (update the driver)"
    if entry.min_compute is not None:
        old = [g for g in nvidia if (g.compute_capability or (0, 0)) < entry.min_compute]
        if len(old) == len(nvidia):
            cc = old[0].compute_capability or (0, 0)
            need = f"{entry.min_compute[0]}.{entry.min_compute[1]}"
            return f"{old[0].name} has compute capability {cc[0]}.{cc[1]}; this pack needs {need} or newer"
    return None


def suitable_packs(machine: Machine, index: PackIndex, engine_version: str | None) -> list[PackEntry]:
    """The packs `machine` can use, best first: CUDA before Vulkan on NVIDIA, Vulkan elsewhere."""
    usable = [entry for entry in index.packs if why_not(entry, machine, engine_version) is None]
    return sorted(usable, key=lambda entry: (entry.backend != "cuda", entry.name))


def read_index(text: str, source: str) -> PackIndex:
    """Parse an index; ValueError naming `source` when it is not one."""
    try:
        return PackIndex.model_validate_json(text)
    except ValidationError as err:
        raise ValueError(f"{source} is not a GPU pack index: {err.errors()[0]['msg']}") from err


def file_digest(path: Path) -> str:
    """sha256 of a file, read in blocks."""
    digest = hashlib.sha256()
    with path.open("rb") as handle:
        for block in iter(lambda: handle.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def check_pack(path: Path, *, deep: bool = True) -> InstalledPack:
    """Read an installed pack and check that every file is there, as it was unpacked: with `deep`,
    by size and sha256; without, by size only (each server start: a damaged library that kept its
    size is then caught by the child-process probe, before the engine loads it)."""
    manifest_file = path / PACK_MANIFEST
    try:
        manifest = InstalledManifest.model_validate_json(manifest_file.read_text(encoding="utf-8"))
    except FileNotFoundError:
        return InstalledPack(path, None, f"{path.name} is not a complete GPU pack ({PACK_MANIFEST} is missing)")
    except (OSError, ValidationError, json.JSONDecodeError) as err:
        return InstalledPack(path, None, f"{path.name}: {PACK_MANIFEST} is unreadable ({err})")
    for relative, (size, sha256) in manifest.files.items():
        file = path / relative
        if not file.is_file():
            return InstalledPack(path, manifest, f"{path.name} is missing {relative}: install the pack again")
        if file.stat().st_size != size or (deep and file_digest(file) != sha256):
            return InstalledPack(path, manifest, f"{path.name}: {relative} is damaged: install the pack again")
    if manifest.library not in manifest.files:
        return InstalledPack(path, manifest, f"{path.name} does not contain its backend library")
    return InstalledPack(path, manifest, None)


def installed_packs(*, deep: bool = True) -> list[InstalledPack]:
    """Every pack in the data folder, checked (see `check_pack`), in name order; unfinished
    installs (hidden folders) are skipped."""
    root = packs_dir()
    if not root.is_dir():
        return []
    folders = [path for path in sorted(root.iterdir()) if path.is_dir() and not path.name.startswith(".")]
    return [check_pack(path, deep=deep) for path in folders]


Probe = Callable[[Path], str | None]
"""Loads a backend library in a child process: None when it registered a device, else why not."""


@dataclass(frozen=True)
class PackChoice:
    """The backend libraries to load, and what was wrong with the packs that were passed over."""

    libraries: tuple[Path, ...]
    problems: tuple[str, ...]


def choose_installed(
    machine: Machine, engine_version: str | None, probe: Probe, packs: list[InstalledPack] | None = None
) -> PackChoice:
    """The first installed pack that fits this machine, is intact and loads in a child; with none,
    no library (the CPU backend runs) and a problem for each pack that was passed over."""
    problems: list[str] = []
    packs = installed_packs() if packs is None else list(packs)
    packs.sort(key=lambda pack: (pack.manifest is None or pack.manifest.entry.backend != "cuda", pack.name))
    for pack in packs:
        if pack.problem is not None or pack.manifest is None or pack.library is None:
            problems.append(pack.problem or f"{pack.name} is unreadable")
            continue
        reason = why_not(pack.manifest.entry, machine, engine_version)
        if reason is not None:
            problems.append(f"{pack.name} does not fit this machine: {reason}")
            continue
        failure = probe(pack.library)
        if failure is not None:
            problems.append(f"{pack.name} did not load: {failure}")
            continue
        return PackChoice((pack.library,), tuple(problems))
    for problem in problems:
        log.warning("GPU pack skipped, the CPU backend runs instead: %s", problem)
    return PackChoice((), tuple(problems))


def index_source() -> str | None:
    """Where the pack index is: `$LAUNCHER_GPU_PACK_INDEX`, else the one the release build wrote into
    the app (`build_info.json`), else None (a copy run from source has no packs: its llama.cpp is
    built for this machine by pip)."""
    override = os.environ.get(INDEX_ENV)
    if override:
        return override
    from launcher.core.paths import build_info

    url = build_info().get("gpu_pack_index")
    return str(url) if url else None


def fetch_index(source: str) -> PackIndex:
    """Read the index from a URL or a file; ValueError saying why it could not be read."""
    if source.startswith(("http://", "https://")):
        import httpx

        try:
            response = httpx.get(source, timeout=30, follow_redirects=True)
            response.raise_for_status()
        except httpx.HTTPError as err:
            raise ValueError(f"the GPU pack index at {source} could not be read ({err})") from err
        return read_index(response.text, source)
    try:
        return read_index(Path(source).read_text(encoding="utf-8"), source)
    except OSError as err:
        raise ValueError(f"the GPU pack index {source} could not be read ({err})") from err


def load_installed_pack(engine_version: str | None, probe: Probe, load: Callable[[list[Path]], object]) -> PackChoice:
    """Before a model loads: hand the folder of the first installed pack that fits this machine and
    loads in a child to `load` (the engine's backend loader). Nothing to do, and no hardware probe,
    when no pack is installed; with none usable the CPU backend runs and the problems are logged."""
    packs = installed_packs(deep=False)
    if not packs:
        return PackChoice((), ())
    from launcher.hardware.probe import probe_machine

    choice = choose_installed(probe_machine(), engine_version, probe, packs)
    if choice.libraries:
        load([library.parent for library in choice.libraries])
        log.info("GPU pack loaded: %s", ", ".join(str(library) for library in choice.libraries))
    return choice


@dataclass(frozen=True)
class PackOffer:
    """The packs installed, those that fit this machine, and a line saying why when none fits."""

    installed: tuple[InstalledPack, ...]
    suitable: tuple[PackEntry, ...]
    note: str


def pack_offer(machine: Machine) -> PackOffer:
    """Read the installed packs and the index (network): what the GPU engine card and
    `launcher gpu-pack` show."""
    installed = tuple(installed_packs())
    if machine.apple is not None:
        return PackOffer(installed, (), "Metal is built in: llama.cpp runs on the Apple GPU without a pack.")
    if not machine.gpus:
        return PackOffer(installed, (), "No GPU was found: llama.cpp runs on the CPU.")
    source = index_source()
    if source is None:
        return PackOffer(
            installed,
            (),
            "This copy runs from source: pip built its llama.cpp for this machine. For the GPU, reinstall "
            "llama-cpp-python with CMAKE_ARGS=-DGGML_CUDA=on (NVIDIA) or -DGGML_VULKAN=on.",
        )
    try:
        index = fetch_index(source)
    except ValueError as err:
        return PackOffer(installed, (), in_context("The list of GPU packs could not be read", str(err)))
    suitable = tuple(suitable_packs(machine, index, SPEC.installed_version()))
    note = "" if suitable else "No GPU pack in this release fits this machine; llama.cpp runs on the CPU."
    return PackOffer(installed, suitable, note)
