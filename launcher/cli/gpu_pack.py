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


def _list() -> int:
    from launcher.core.units import format_bytes
    from launcher.engines.llamacpp.gpu_packs import pack_offer
    from launcher.hardware.probe import probe_machine

    offer = pack_offer(probe_machine())
    if offer.suitable:
        print("For this machine, best first:")
        for entry in offer.suitable:
            print(f"  {entry.name:<28} {entry.label or entry.backend}  {format_bytes(entry.size_bytes)}")
    else:
        print(offer.note)
    print("Installed:" if offer.installed else "Installed: none (llama.cpp runs on the CPU)")
    for pack in offer.installed:
        print(f"  {pack.name:<28} {pack.problem or 'intact'}  ({pack.path})")
    return 0


def _install(name: str | None) -> int:
    from launcher.catalog.progress import TerminalBar
    from launcher.core.errors import ConfigError
    from launcher.engines.llamacpp.gpu_pack_install import install_pack
    from launcher.engines.llamacpp.gpu_packs import pack_offer
    from launcher.hardware.probe import probe_machine

    offer = pack_offer(probe_machine())
    entries = list(offer.suitable)
    if name is not None:
        entries = [entry for entry in entries if entry.name == name]
    if not entries:
        wanted = f"pack named {name!r} that fits" if name else "pack that fits"
        raise ConfigError(f"There is no {wanted} this machine. {offer.note}".rstrip())
    entry = entries[0]
    print(f"Installing {entry.name} ({entry.label or entry.backend}) from {entry.url}", file=sys.stderr)
    pack = install_pack(entry, progress=TerminalBar())
    print(f"Installed {pack.name} in {pack.path}. `launcher serve` loads it from now on.")
    return 0
