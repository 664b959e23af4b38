"""Load the curated catalog from launcher/resources/catalog/models.toml."""

from __future__ import annotations

import tomllib
from functools import lru_cache
from pathlib import Path
from typing import Any

from pydantic import ValidationError

from launcher.catalog.schema import Catalog, CatalogModel
from launcher.core import paths
from launcher.core.errors import CatalogError


def catalog_file() -> Path:
    """Where the catalog data lives."""
    return paths.resources_dir() / "catalog" / "models.toml"


def load_catalog(path: Path | None = None) -> Catalog:
    """Parse and validate a catalog file; any problem is a CatalogError naming the entry and field."""
    path = path or catalog_file()
    try:
        data = tomllib.loads(path.read_text(encoding="utf-8"))
    except OSError as err:
        raise CatalogError(f"Cannot read catalog {path}: {err.strerror or err}") from err
    except tomllib.TOMLDecodeError as err:
        raise CatalogError(f"Catalog {path} is not valid TOML: {err}") from err
    entries = data.get("model", [])
    try:
        return Catalog.model_validate({"models": entries})
    except ValidationError as err:
        problems = "\n".join(f"  - {_describe(error, entries)}" for error in err.errors())
        raise CatalogError(f"Catalog {path} is invalid:\n{problems}") from err


def _describe(error: Any, entries: list[Any]) -> str:
    """One validation error as 'model <id>: <field path>: <message>'."""
    location = list(error["loc"])
    message = str(error["msg"]).removeprefix("Value error, ")
    prefix = ""
    if len(location) >= 2 and location[0] == "models" and isinstance(location[1], int):
        index = location[1]
        entry = entries[index] if index < len(entries) else None
        model_id = entry.get("id") if isinstance(entry, dict) else None
        prefix = f"model {model_id!r}" if model_id else f"model #{index + 1}"
        location = location[2:]
    field = ".".join(str(part) for part in location)
    return ": ".join(part for part in (prefix, field, message) if part)


@lru_cache(maxsize=1)
def default_catalog() -> Catalog:
    """The shipped catalog (cached)."""
    return load_catalog()


def find(model_id: str) -> CatalogModel:
    """The catalog entry `model_id`, or a CatalogError listing close ids."""
    catalog = default_catalog()
    entry = catalog.get(model_id)
    if entry is None:
        close = [m.id for m in catalog.models if model_id.lower() in m.id][:5]
        hint = f" Did you mean: {', '.join(close)}?" if close else " Run `launcher models --catalog` to list ids."
        raise CatalogError(f"No catalog model {model_id!r}.{hint}")
    return entry
