"""`launcher gpu-pack [list | install [NAME] | remove NAME]`: the GPU backends for llama.cpp.

`list` shows the packs this machine can use (from the release's pack index) and those installed,
with what is wrong with any of them; `install` downloads the best one for this machine (or NAME)
with a progress bar and a sha256 check; `remove` deletes one. Nothing is ever installed or
updated unasked. See `launcher/engines/llamacpp/gpu_packs.py`.
"""

from __future__ import annotations

import argparse
import shutil
import sys
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from launcher.engines.llamacpp.gpu_packs import PackEntry


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """Flags of `launcher gpu-pack`."""
    parser.add_argument("action", nargs="?", default="list", choices=("list", "install", "remove"))
    parser.add_argument("name", nargs="?", help="the pack (default for install: the best for this machine)")


def run(args: argparse.Namespace) -> int:
    """List, install or remove packs."""
    from launcher.core.errors import ConfigError
    from launcher.engines.llamacpp.gpu_packs import installed_packs, packs_dir

    if args.action == "remove":
        if not args.name:
            raise ConfigError("say which pack to remove: launcher gpu-pack remove NAME")
        target = packs_dir() / args.name
        if not any(pack.path == target for pack in installed_packs()):
            raise ConfigError(f"no GPU pack named {args.name!r} is installed")
        shutil.rmtree(target)
        print(f"Removed {args.name}.")
        return 0
    if args.action == "install":
        return _install(args.name)
    return _list()


def _suitable() -> tuple[list[PackEntry], str]:
    """(packs this machine can use, a line saying where they come from or why there are none)."""
    from launcher.engine_specs import get_spec
    from launcher.engines.llamacpp.gpu_packs import fetch_index, index_source, suitable_packs
    from launcher.hardware.probe import probe_machine

    source = index_source()
    if source is None:
        return [], (
            "This copy runs from source: its llama.cpp was built by pip for this machine. For a GPU, reinstall "
            "llama-cpp-python with its GPU flags (CMAKE_ARGS=-DGGML_CUDA=on, or -DGGML_VULKAN=on)."
        )
    try:
        index = fetch_index(source)
    except ValueError as err:
        return [], f"No GPU packs: {err}."
    machine = probe_machine()
    return suitable_packs(machine, index, get_spec("llamacpp").installed_version()), f"Pack index: {source}"


def _list() -> int:
    from launcher.core.units import format_bytes
    from launcher.engines.llamacpp.gpu_packs import installed_packs

    suitable, where = _suitable()
    print(where)
    if suitable:
        print("For this machine, best first:")
        for entry in suitable:
            print(f"  {entry.name:<28} {entry.label or entry.backend}  {format_bytes(entry.size_bytes)}")
    installed = installed_packs()
    print("Installed:" if installed else "Installed: none (llama.cpp runs on the CPU)")
    for pack in installed:
        print(f"  {pack.name:<28} {pack.problem or 'intact'}  ({pack.path})")
    return 0


def _install(name: str | None) -> int:
    from launcher.catalog.progress import TerminalBar
    from launcher.core.errors import ConfigError
    from launcher.engines.llamacpp.gpu_pack_install import install_pack

    entries, where = _suitable()
    if name is not None:
        entries = [entry for entry in entries if entry.name == name]
    if not entries:
        wanted = f"a pack named {name!r} that fits" if name else "a pack that fits"
        raise ConfigError(f"There is no {wanted} this machine. {where}")
    entry = entries[0]
    print(f"Installing {entry.name} ({entry.label or entry.backend}) from {entry.url}", file=sys.stderr)
    pack = install_pack(entry, progress=TerminalBar())
    print(f"Installed {pack.name} in {pack.path}. `launcher serve` loads it from now on.")
    return 0
