"""Make a GPU pack (the CUDA or Vulkan backend of llama.cpp) and its entry for the pack index.

Usage: scripts/build-gpu-pack --backend cuda|vulkan --wheel FILE [--runtime-lib FILE ...]
                              [--cuda-version 12.4] [--min-compute 5.0] [--out DIR]
       scripts/build-gpu-pack --index DIR --base-url URL      (merge DIR/*.json into DIR/gpu-packs.json)

A pack is built from a llama-cpp-python wheel made by scripts/build-engine with the backend turned
on (`--cmake-arg=-DGGML_CUDA=ON`; with GGML_BACKEND_DL every backend is its own library): this
takes the backend's library out of the wheel (libggml-cuda.so, ggml-vulkan.dll, ...), adds the
runtime libraries it needs that a user's driver does not bring (CUDA's libcudart, libcublas and
libcublasLt; Vulkan needs none: its loader comes with the GPU driver), and writes
`<name>.tar.gz` plus `<name>.json`, the pack's index entry: its sha256 and size, the
llama-cpp-python version it was built against (the app loads only a pack of its own version,
since backends share ggml's internal ABI), and what the machine needs (the newest CUDA the
driver must support, the oldest compute capability the kernels were built for).

The release workflow builds one per OS and backend (.github/workflows/engines.yml), uploads them
to the release, and merges the entries into `gpu-packs.json` (`--index`), whose URL the app
build records (`build_info.json`, key `gpu_pack_index`). The app installs a pack only when the
user asks (`launcher gpu-pack install`, or the GPU engine card on the machine page).
"""

from __future__ import annotations

import argparse
import hashlib
import io
import json
import platform
import re
import tarfile
import zipfile
from pathlib import Path

LIBRARY_SUFFIXES = (".so", ".dll", ".dylib")


def _platform() -> tuple[str, str]:
    system = {"Linux": "linux", "Windows": "windows", "Darwin": "darwin"}[platform.system()]
    arch = "arm64" if platform.machine().lower() in ("arm64", "aarch64") else "x86_64"
    return system, arch


def _backend_library(wheel: zipfile.ZipFile, backend: str) -> tuple[str, bytes]:
    for name in wheel.namelist():
        base = name.rsplit("/", 1)[-1]
        if f"ggml-{backend}" in base and base.endswith(LIBRARY_SUFFIXES):
            return base, wheel.read(name)
    raise SystemExit(f"{wheel.filename} has no ggml-{backend} library: build it with the backend turned on")


def _wheel_version(wheel: Path) -> str:
    match = re.match(r"llama_cpp_python-([^-]+)-", wheel.name)
    if not match:
        raise SystemExit(f"{wheel.name} is not a llama-cpp-python wheel")
    return match.group(1)


def build(args: argparse.Namespace) -> int:
    wheel_path = Path(args.wheel)
    system, arch = _platform()
    major = (args.cuda_version or "").split(".")[0]
    name = f"{args.backend}{major}-{system}-{arch}"
    with zipfile.ZipFile(wheel_path) as wheel:
        library, data = _backend_library(wheel, args.backend)
    files = {f"lib/{library}": data}
    for runtime in args.runtime_lib:
        path = Path(runtime).resolve()  # a versioned symlink (libcudart.so.12) stores its target's bytes
        files[f"lib/{Path(runtime).name}"] = path.read_bytes()
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w:gz") as tar:
        for member, content in files.items():
            info = tarfile.TarInfo(member)
            info.size = len(content)
            info.mode = 0o755
            tar.addfile(info, io.BytesIO(content))
    archive = buffer.getvalue()
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    (out / f"{name}.tar.gz").write_bytes(archive)
    label = {"cuda": f"CUDA {major} (NVIDIA)", "vulkan": "Vulkan (AMD, Intel, NVIDIA)"}[args.backend]
    entry = {
        "name": name,
        "backend": args.backend,
        "os": system,
        "arch": arch,
        "engine_version": _wheel_version(wheel_path),
        "url": f"{name}.tar.gz",  # made absolute by --index --base-url
        "sha256": hashlib.sha256(archive).hexdigest(),
        "size_bytes": len(archive),
        "label": label,
        "cuda_version": args.cuda_version,
        "min_compute": [int(p) for p in args.min_compute.split(".")] if args.min_compute else None,
    }
    (out / f"{name}.json").write_text(json.dumps(entry, indent=2) + "\n", encoding="utf-8")
    print(f"{out / f'{name}.tar.gz'}: {len(archive) / 1e6:.1f} MB, {len(files)} file(s)")
    return 0


def merge_index(folder: Path, base_url: str) -> int:
    entries = []
    for path in sorted(folder.glob("*.json")):
        if path.name == "gpu-packs.json":
            continue
        entry = json.loads(path.read_text(encoding="utf-8"))
        entry["url"] = base_url.rstrip("/") + "/" + entry["url"].rsplit("/", 1)[-1]
        entries.append(entry)
    (folder / "gpu-packs.json").write_text(json.dumps({"packs": entries}, indent=2) + "\n", encoding="utf-8")
    print(f"{folder / 'gpu-packs.json'}: {len(entries)} pack(s)")
    return 0


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--backend", choices=("cuda", "vulkan"))
    parser.add_argument("--wheel", help="a llama-cpp-python wheel built with that backend")
    parser.add_argument("--runtime-lib", action="append", default=[], help="a library to ship with the backend")
    parser.add_argument("--cuda-version", help="the CUDA the pack was built with (the driver must support it)")
    parser.add_argument("--min-compute", help="the oldest compute capability it has kernels for (5.0)")
    parser.add_argument("--out", default="dist/gpu-packs")
    parser.add_argument("--index", metavar="DIR", help="merge DIR/*.json into DIR/gpu-packs.json")
    parser.add_argument("--base-url", help="with --index: where the packs are downloaded from")
    args = parser.parse_args()
    if args.index:
        if not args.base_url:
            parser.error("--index needs --base-url")
        return merge_index(Path(args.index), args.base_url)
    if not (args.backend and args.wheel):
        parser.error("--backend and --wheel are needed to build a pack")
    if args.backend == "cuda" and not args.cuda_version:
        parser.error("a CUDA pack needs --cuda-version")
    return build(args)
