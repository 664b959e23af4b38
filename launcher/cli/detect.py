"""`launcher detect`: show what this machine has (or a recorded one), as text or JSON."""

from __future__ import annotations

import argparse
import json
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from launcher.hardware.machine import Machine


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """Flags of `launcher detect`."""
    parser.add_argument("--json", action="store_true", help="print the machine as JSON (with engines)")
    parser.add_argument(
        "--recorded", metavar="NAME", help="show a recorded machine instead of this one (see --list-recorded)"
    )
    parser.add_argument("--list-recorded", action="store_true", help="list the recorded machines and exit")
    parser.add_argument("--no-engines", action="store_true", help="skip checking which engines can run")


def run(args: argparse.Namespace) -> int:
    """Probe (or load) the machine and print it."""
    from launcher.hardware.probe import probe_machine
    from launcher.hardware.recorded import load_recorded, recorded_names
    from launcher.hardware.summary import format_machine, machine_json

    if args.list_recorded:
        print("\n".join(recorded_names()))
        return 0
    machine = load_recorded(args.recorded) if args.recorded else probe_machine()
    engines = None if args.no_engines else engine_availability(machine)
    if args.json:
        print(json.dumps(machine_json(machine, engines), indent=2))
    else:
        print(format_machine(machine, engines))
    return 0


def engine_availability(machine: Machine) -> dict[str, dict[str, Any]]:
    """For each registered engine: label, formats, usable / reason / version / backend (never raises)."""
    from launcher.engine_specs import specs
    from launcher.engines.registry import probe

    answers: dict[str, dict[str, Any]] = {}
    for spec in specs():
        availability = probe(spec.name, machine)
        answers[spec.name] = {
            "label": spec.label,
            "formats": list(spec.formats),
            "usable": availability.usable,
            "reason": availability.reason,
            "version": availability.version,
            "backend": availability.backend,
        }
    return answers
