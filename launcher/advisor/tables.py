"""Bits per weight of each quant (launcher/resources/advisor/quants.csv, with a source column)."""

from __future__ import annotations

import csv
import re
from functools import cache

from launcher.core import paths
from launcher.core.errors import CatalogError

SAFETENSORS_TABLE = "safetensors"
"""The table's format for safetensors checkpoints (FP8, AWQ, BF16, MXFP4): what the datacenter engines
load, offered beside the catalog's quant formats (`Preference.offers`) and planned by `launcher handoff`."""


@cache
def _bits_table() -> dict[tuple[str, str], float]:
    path = paths.resources_dir() / "advisor" / "quants.csv"
    with path.open(encoding="utf-8") as handle:
        return {(row["format"], row["quant"].upper()): float(row["bits_per_weight"]) for row in csv.DictReader(handle)}


_BPW_NAME = re.compile(r"^(\d+(?:\.\d+)?)\s*bpw$", re.IGNORECASE)
_MLX_NAME = re.compile(r"^(\d+)\s*bit$", re.IGNORECASE)


def bits_per_weight(fmt: str, quant: str) -> float:
    """Effective bits per weight (scales, mixed layers and head included) for `quant` in `fmt`.

    Unlisted EXL bpw values and MLX bit widths are derived from their names, so a repo's
    "4.65bpw" branch still gets a sensible number.
    """
    table = _bits_table()
    key = (fmt, quant.upper())
    if key in table:
        return table[key]
    if fmt in ("exl2", "exl3") and (match := _BPW_NAME.match(quant)):
        return float(match.group(1)) + 0.15
    if fmt == "mlx" and (match := _MLX_NAME.match(quant)):
        return float(match.group(1)) + 0.5
    if fmt == "gguf":
        # Unknown GGUF type names: fall back on the digit after Q/IQ as a floor estimate.
        match = re.search(r"(\d+)", quant)
        if match:
            return float(match.group(1)) + 0.9
    raise CatalogError(f"No bits-per-weight figure for {fmt} quant {quant!r}.")


def known_quants(fmt: str) -> list[str]:
    """Quant names listed for a format, in table order."""
    return [quant for (table_fmt, quant) in _bits_table() if table_fmt == fmt]
