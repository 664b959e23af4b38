"""Write the recorded-machine JSON files from the raw sources (and this machine from the live probe).

    PYTHONPATH=. python -m tests.hardware.record_fixtures            # the raw-backed machines
    PYTHONPATH=. python -m tests.hardware.record_fixtures --this-machine NAME

Each file goes to launcher/resources/hardware/machines/ (what `load_recorded` reads) and a copy to
tests/hardware/fixtures/; test_recorded.py keeps both in step with the probe.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import tempfile
from pathlib import Path

from launcher.hardware.machine import Machine
from launcher.hardware.probe import probe_machine_uncached
from launcher.hardware.recorded import recorded_dir
from tests.hardware.raw_machines import RAW_MACHINES

FIXTURES_DIR = Path(__file__).parent / "fixtures"


def probe_raw(name: str, root: Path) -> Machine:
    """The Machine the real probe makes of a recorded machine's raw sources."""
    raw = RAW_MACHINES[name]
    return dataclasses.replace(probe_machine_uncached(raw.build(root)), name=raw.label)


def machine_text(machine: Machine) -> str:
    """The JSON text a recorded machine is stored as."""
    return json.dumps(machine.to_json(), indent=2) + "\n"


def write(name: str, machine: Machine) -> None:
    """Store `machine` under `name` in both places."""
    for folder in (recorded_dir(), FIXTURES_DIR):
        folder.mkdir(parents=True, exist_ok=True)
        (folder / f"{name}.json").write_text(machine_text(machine), encoding="utf-8")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--this-machine", metavar="NAME", help="record the live machine under NAME")
    args = parser.parse_args()
    if args.this_machine:
        machine = probe_machine_uncached()
        write(args.this_machine, dataclasses.replace(machine, name="This Linux VM (recorded live)"))
        return
    for name in RAW_MACHINES:
        with tempfile.TemporaryDirectory() as tmp:
            write(name, probe_raw(name, Path(tmp)))


if __name__ == "__main__":
    main()
