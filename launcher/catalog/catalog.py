"""Load the curated catalog from resources/catalog/models.toml."""

from __future__ import annotations

import tomllib
from functools import lru_cache
from pathlib import Path

from pydantic import ValidationError

from launcher.catalog.schema import Catalog, CatalogModel
from launcher.core import paths
from launcher.core.errors import CatalogError


def catalog_file() -> Path:
    """Where the catalog data lives."""
    return paths.resources_dir() / "catalog" / "models.toml"


def load_catalog(path: Path | None = None) -> Catalog:
    """Parse and validate a catalog file."""
    path = path or catalog_file()
    try:
        data = tomllib.loads(path.read_text(encoding="utf-8"))
        return Catalog.model_validate({"models": data.get("model", [])})
    except (OSError, tomllib.TOMLDecodeError, ValidationError) as err:
        raise CatalogError(f"Catalog {path} is invalid: {err}") from err


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
