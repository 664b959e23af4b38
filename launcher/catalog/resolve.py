"""Turn what a user typed (`launcher serve SPEC`) into a model on disk.

SPEC may be:
- "" or "starter": the embedded starter model (assembled on first use);
- a path to a .gguf file (any shard of a split one) or to a model directory;
- a catalog id ("qwen3-4b"): the local copy pulled earlier;
- a local-library name ("unsloth/Qwen3-4B-GGUF:Q4_K_M", an imported model's name) or a cached repo id.
"""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

from launcher.catalog import library, starter
from launcher.catalog.local_formats import detect_directory, group_gguf_files
from launcher.core.errors import CatalogError, ModelFormatError, ModelNotFoundError, in_context
from launcher.core.model_types import LocalModel


def resolve_model(spec: str, entries: list[library.LibraryEntry] | None = None) -> LocalModel:
    """The LocalModel for SPEC; raises ModelNotFoundError saying what exists instead. `entries`: the
    library as a scan the caller already made (`library.scan_library()`), looked in instead of a new one."""
    spec = spec.strip()
    if spec in ("", "starter"):
        return starter.starter_model()
    path = Path(spec).expanduser()
    if _looks_like_path(spec) or path.exists():
        return resolve_path(path)
    entries = library.scan_library() if entries is None else entries
    entry = library.find_entry(spec, entries)
    if entry is not None:
        if entry.source == "starter":
            return starter.starter_model()
        if entry.problem:
            raise ModelNotFoundError(in_context(f"{entry.name} is in the library but cannot be used", entry.problem))
        return entry.model
    raise ModelNotFoundError(_not_found_message(spec, entries))


def _looks_like_path(spec: str) -> bool:
    return spec.endswith(".gguf") or spec.startswith((".", "/", "~")) or "\\" in spec


def resolve_path(path: Path) -> LocalModel:
    """A LocalModel for a GGUF file or a model directory given by path."""
    path = path.resolve()
    if not path.exists():
        raise ModelNotFoundError(f"{path} does not exist.")
    if path.is_file():
        if path.suffix != ".gguf":
            raise ModelFormatError(f"{path} is not a .gguf file. Give a GGUF file or a model folder.")
        entry = library.gguf_entry(path, source="imported")
        if entry.problem:
            raise ModelFormatError(in_context(str(path), entry.problem, subject=path))
        return entry.model
    ggufs = group_gguf_files(p.name for p in path.glob("*.gguf"))
    detected = detect_directory(path, 0)
    if detected is not None:
        return LocalModel(path=path, format=detected.format, name=path.name, quant=detected.quant)
    if len(ggufs) == 1:
        return resolve_path(path / next(iter(ggufs)))
    if ggufs:
        choices = ", ".join(sorted(ggufs))
        raise ModelNotFoundError(f"{path} holds several GGUF models; give one file: {choices}")
    raise ModelNotFoundError(f"{path} has no .gguf file and no safetensors model (config.json + *.safetensors).")


def _not_found_message(spec: str, entries: list[library.LibraryEntry]) -> str:
    from launcher.catalog.catalog import default_catalog

    try:
        catalog_entry = default_catalog().get(spec)
    except CatalogError:
        catalog_entry = None
    if catalog_entry is not None:
        return f"{spec} is in the catalog but not downloaded yet. Run: launcher pull {spec}"
    names = [e.name for e in entries if e.usable]
    close = [n for n in names if spec.lower() in n.lower()][:5]
    if close:
        return f"No local model {spec!r}. Did you mean: {', '.join(close)}?"
    if "/" in spec:
        return f"No local copy of {spec!r}. Run: launcher pull {spec}"
    hint = f" Local models: {', '.join(names[:8])}." if names else ""
    return f"No model {spec!r} (not a file, catalog id or library name).{hint} See `launcher models`."


def with_name(model: LocalModel, name: str) -> LocalModel:
    """The same model served under another id."""
    return replace(model, name=name)
