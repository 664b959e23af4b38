"""Build the portable llama.cpp engine: a llama-cpp-python wheel that runs on any CPU of this OS.

Usage: scripts/build-engine [--version X] [--sdist FILE] [--jobs N] [--out DIR] [--work DIR]
                            [--cmake-arg=-DNAME=VALUE ...]

`pip install llama-cpp-python` compiles llama.cpp with GGML_NATIVE=ON, for the build machine's
CPU: a wheel built on an AVX-512 machine dies with an illegal instruction on most consumer CPUs.
This builds it the way llama.cpp's own releases are built instead: no -march=native, the CPU
backend compiled once per x86-64 level (x64, sse42, sandybridge, haswell, skylakex, icelake,
alderlake, sapphirerapids, ...) as separate libraries, and at start the engine loads the best one
this CPU can run (`launcher.engines.llamacpp._native.load_backends`). One wheel, every CPU, and
AVX-512/AMX still used where they exist.

The wheel lands in dist/engine/ (gitignored). It is built from the PyPI sdist of the version the
project pins, with `pip wheel --no-cache-dir` into a folder this script owns: pip's wheel cache
keys a built wheel by name and version only (not by CMAKE_ARGS), so a cached native build of the
same version would otherwise come back instead of this one, or this one would later be reused for
a plain `pip install llama-cpp-python`.

Per OS:
- Linux: the flags below; gcc. The wheel's libraries need the glibc of the build machine or newer,
  so build on the oldest glibc you support (the release builds in a manylinux container). The CPU
  backends link the system's libgomp (OpenMP), which a frozen app must bundle.
- Windows: the same flags with MSVC (Visual Studio 2022, "x64 Native Tools" prompt); ggml skips the
  variants MSVC cannot compile (ivybridge, piledriver, cooperlake, zen4, sapphirerapids/AMX) and
  installs each DLL into llama_cpp/lib through the same CMAKE_INSTALL_BINDIR.
- macOS: llama-cpp-python's CMakeLists turns Metal on (embedded shader library) for both arches;
  on arm64 every Apple CPU runs the same NEON code, so there is no backend to choose at run time:
  one library with Metal built in, GGML_NATIVE off so an M3 build still runs on an M1.

Extra CMake arguments (`--cmake-arg=-DGGML_CUDA=ON`) go after the defaults and win over them.
"""

from __future__ import annotations

import argparse
import hashlib
import os
import platform
import re
import shutil
import subprocess
import sys
import tarfile
import time
import tomllib
import zipfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
DISTRIBUTION = "llama-cpp-python"
# The exact version the release ships when pyproject.toml gives only a range: every GPU pack is
# built against one llama-cpp-python version, so the engine wheel must be that one too.
VERSION_FILE = ROOT / "packaging" / "engine" / "llama-cpp-python.version"


def cmake_args() -> list[str]:
    """The CMake flags of a portable build on this OS, each with why."""
    args = [
        # No -march=native: the compiler may not assume any instruction the build machine has.
        "-DGGML_NATIVE=OFF",
        # mtmd (images/audio) is not used by the launcher; skipping it saves build time and 2 MB.
        "-DLLAVA_BUILD=OFF",
    ]
    if sys.platform == "darwin":
        # Metal is built in (llama-cpp-python's CMakeLists forces GGML_METAL on macOS); the CPU
        # code targets the architecture's baseline because GGML_NATIVE is off.
        return args
    return [
        *args,
        # Backends become separate libraries that libggml loads at run time (ggml_backend_load*),
        # which is what lets the CPU backend exist in several builds and GPU packs arrive later.
        "-DGGML_BACKEND_DL=ON",
        # One CPU backend per x86-64 level (or ARM feature set on Linux arm64); each scores itself
        # against the running CPU and the loader keeps the best.
        "-DGGML_CPU_ALL_VARIANTS=ON",
        # ggml installs backend libraries into CMAKE_INSTALL_BINDIR (relative to the wheel's
        # platlib), which llama-cpp-python leaves at "bin": that would put them in site-packages/bin,
        # outside the package. llama_cpp/lib is where libggml is, where the engine tells ggml to look,
        # and on Windows where the other DLLs go too. (GGML_BACKEND_DIR would do the same but also
        # compile the path, relative to the working directory, into libggml as a search path.)
        "-DCMAKE_INSTALL_BINDIR=llama_cpp/lib",
        # Backend libraries otherwise install without a run path; with $ORIGIN one finds what it
        # links next to itself (a GPU pack's libggml-cuda.so its libcudart), as llama-cpp-python's
        # own libraries do. (Windows has no run path; the engine puts a pack's folder on PATH.)
        *(["-DCMAKE_INSTALL_RPATH=$ORIGIN"] if sys.platform.startswith("linux") else []),
    ]


def pinned_version() -> str:
    """pyproject's exact pin for the llamacpp extra, or the release's version when it gives a range."""
    extras = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["optional-dependencies"]
    requirement = next(r for r in extras["llamacpp"] if re.match(r"llama[-_]cpp[-_]python\b", r, re.I))
    exact = re.search(r"===?\s*([0-9][^,;\s]*)", requirement)
    if exact:
        return exact.group(1)
    version = VERSION_FILE.read_text().strip()
    minimum = re.search(r">=\s*([0-9][^,;\s]*)", requirement)
    if minimum and _version_key(version) < _version_key(minimum.group(1)):
        raise SystemExit(f"{VERSION_FILE.name} says {version}, below pyproject.toml's {requirement!r}")
    return version


def _version_key(version: str) -> tuple[int, ...]:
    return tuple(int(part) for part in re.findall(r"\d+", version))


def fetch_sdist(version: str, work: Path, sdist: Path | None) -> Path:
    """The sdist: the one given, or PyPI's (a source release, never a prebuilt wheel)."""
    if sdist is not None:
        return sdist.resolve()
    downloads = work / "sdist"
    found = sorted(downloads.glob(f"llama_cpp_python-{version}.tar.gz"))
    if found:
        return found[0]
    downloads.mkdir(parents=True, exist_ok=True)
    source_only = ["--no-binary", ":all:", "--no-deps"]
    run([sys.executable, "-m", "pip", "download", *source_only, "-d", str(downloads), f"{DISTRIBUTION}=={version}"])
    found = sorted(downloads.glob(f"llama_cpp_python-{version}.tar.gz"))
    if not found:
        raise SystemExit(f"could not download the {DISTRIBUTION} {version} sdist into {downloads}")
    return found[0]


def extract(sdist: Path, work: Path) -> Path:
    """The sdist unpacked at a fixed path, so that a kept CMake build folder matches its sources."""
    source_root = work / "src"
    with tarfile.open(sdist) as archive:
        top = archive.getnames()[0].split("/")[0]
        source = source_root / top
        if not source.is_dir():
            source_root.mkdir(parents=True, exist_ok=True)
            archive.extractall(source_root, filter="data")
    return source


def build_wheel(source: Path, work: Path, jobs: int, extra: list[str]) -> Path:
    wheels = work / "wheel"
    shutil.rmtree(wheels, ignore_errors=True)
    wheels.mkdir(parents=True)
    env = dict(os.environ)
    env["CMAKE_ARGS"] = " ".join([*cmake_args(), *extra])  # llama-cpp-python's documented way in
    # One kept build folder per flag set: CMake's cache remembers a -D it is no longer given, so a
    # CPU-only build in the folder of an earlier -DGGML_CUDA=ON build would still build CUDA.
    flags = hashlib.sha256(f"{source.name} {env['CMAKE_ARGS']}".encode()).hexdigest()[:12]
    env["CMAKE_BUILD_PARALLEL_LEVEL"] = str(jobs)
    env.pop("FORCE_CMAKE", None)
    print(f"CMAKE_ARGS={env['CMAKE_ARGS']}", flush=True)
    # A kept build folder makes a second run with the same flags an incremental build.
    keep_build = ["--config-settings", f"build-dir={work / f'cmake-build-{flags}'}"]
    pip = [sys.executable, "-m", "pip", "wheel", "--no-cache-dir", "--no-deps", "-v"]
    run([*pip, *keep_build, "-w", str(wheels), str(source)], env=env)
    built = sorted(wheels.glob("llama_cpp_python-*.whl"))
    if len(built) != 1:
        raise SystemExit(f"expected one wheel in {wheels}, found {[p.name for p in built]}")
    return built[0]


def cpu_backends(wheel: Path) -> list[str]:
    """The CPU backend libraries the wheel carries (llama_cpp/lib/libggml-cpu-haswell.so, ...)."""
    with zipfile.ZipFile(wheel) as archive:
        return sorted(
            name for name in archive.namelist() if re.search(r"llama_cpp/lib/(lib)?ggml-cpu-[^/]+\.(so|dll)$", name)
        )


def run(command: list[str], env: dict[str, str] | None = None) -> None:
    print("+", " ".join(command), flush=True)
    subprocess.run(command, env=env, check=True)


def main() -> int:
    parser = argparse.ArgumentParser(
        prog="scripts/build-engine",
        description=__doc__.split("\n\n")[0] if __doc__ else None,
        formatter_class=argparse.RawDescriptionHelpFormatter,
        epilog="\n\n".join(__doc__.split("\n\n")[1:]) if __doc__ else None,
    )
    parser.add_argument("--version", help="llama-cpp-python version (default: the project's pin)")
    parser.add_argument("--sdist", type=Path, help="build this sdist instead of downloading one")
    parser.add_argument("--jobs", type=int, default=os.cpu_count() or 2, help="parallel compile jobs")
    parser.add_argument("--out", type=Path, default=ROOT / "dist" / "engine", help="where the wheel goes")
    parser.add_argument("--work", type=Path, default=ROOT / "build" / "engine", help="sources and build tree")
    parser.add_argument("--cmake-arg", action="append", default=[], help="extra CMake argument (repeatable)")
    options = parser.parse_args()

    started = time.monotonic()
    version = options.version or pinned_version()
    work = options.work.resolve()
    print(f"building portable {DISTRIBUTION} {version} for {sys.platform} {platform.machine()}", flush=True)
    source = extract(fetch_sdist(version, work, options.sdist), work)
    wheel = build_wheel(source, work, options.jobs, options.cmake_arg)
    variants = cpu_backends(wheel)
    if sys.platform != "darwin" and platform.machine().lower() in ("x86_64", "amd64") and len(variants) < 2:
        raise SystemExit(f"{wheel.name} lacks the CPU variant libraries (found {variants})")
    options.out.mkdir(parents=True, exist_ok=True)
    target = options.out / wheel.name
    shutil.copy2(wheel, target)
    minutes = (time.monotonic() - started) / 60
    print(f"\n{target} ({target.stat().st_size / 2**20:.1f} MiB, built in {minutes:.1f} min)")
    for name in variants:
        print(f"  {name}")
    return 0
