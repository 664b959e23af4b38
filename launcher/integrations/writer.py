"""Write an agent's config file: merge into what the user has, back up first, replace atomically.

    plan = plan_edit(edit, home=Path.home())     # read + merge, nothing written; plan.diff
    result = apply_edit(edit, home=Path.home())  # backup next to the file, then atomic replace

Rules, because this touches files the user cares about:
- The user's other settings stay: our fragment is deep-merged over the existing document.
- A file we cannot parse is never overwritten (ConfigError says which file and why).
- Before any change the old file is copied to `<name>.<timestamp>.bak` next to it.
- The new content goes to a temp file in the same folder, is flushed to disk, then `os.replace`d
  over the old one, so a crash leaves either the old or the new file, never half of one.
- TOML and YAML are rewritten by a parser, so comments in those files are not kept (the backup
  has them); the diff shows exactly what changes before `--write`.
"""

from __future__ import annotations

import copy
import difflib
import os
import shutil
import tempfile
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Any

from launcher.core.errors import ConfigError
from launcher.integrations.documents import parse_document, render_document
from launcher.integrations.setup import ConfigEdit


@dataclass(frozen=True)
class EditPlan:
    """What writing one ConfigEdit would do."""

    path: Path
    old_text: str | None
    new_text: str

    @property
    def changed(self) -> bool:
        """False when the file already has exactly this content."""
        return self.old_text != self.new_text

    @property
    def diff(self) -> str:
        """A unified diff from the current file (or nothing) to the new content."""
        old_lines = (self.old_text or "").splitlines(keepends=True)
        new_lines = self.new_text.splitlines(keepends=True)
        label_old = str(self.path) if self.old_text is not None else "/dev/null"
        return "".join(difflib.unified_diff(old_lines, new_lines, label_old, str(self.path)))


@dataclass(frozen=True)
class EditResult:
    """What `apply_edit` did."""

    path: Path
    backup: Path | None
    written: bool
    diff: str

    def __str__(self) -> str:
        if not self.written:
            return f"{self.path}: already up to date"
        if self.backup:
            return f"wrote {self.path} (previous version saved as {self.backup.name})"
        return f"created {self.path}"


def merge_document(existing: dict[str, Any], edit: ConfigEdit) -> dict[str, Any]:
    """`existing` with the edit's defaults filled in and its fragment merged over it (input untouched)."""
    merged = copy.deepcopy(existing)
    for key, value in edit.defaults.items():
        merged.setdefault(key, copy.deepcopy(value))
    return _deep_merge(merged, edit.fragment, edit.keyed_lists)


def _deep_merge(base: dict[str, Any], overlay: dict[str, Any], keyed_lists: dict[str, str]) -> dict[str, Any]:
    for key, value in overlay.items():
        current = base.get(key)
        if isinstance(value, dict) and isinstance(current, dict):
            base[key] = _deep_merge(current, value, keyed_lists)
        elif key in keyed_lists and isinstance(value, list) and isinstance(current, list):
            base[key] = _merge_keyed_list(current, value, keyed_lists[key])
        else:
            base[key] = copy.deepcopy(value)
    return base


def _merge_keyed_list(current: list[Any], ours: list[Any], id_field: str) -> list[Any]:
    """Replace entries whose id matches one of ours, in place; append the rest."""
    result = list(current)
    for item in ours:
        item_id = item.get(id_field) if isinstance(item, dict) else None
        index = next(
            (i for i, old in enumerate(result) if isinstance(old, dict) and old.get(id_field) == item_id),
            None,
        )
        if index is None:
            result.append(copy.deepcopy(item))
        else:
            result[index] = copy.deepcopy(item)
    return result


def plan_edit(edit: ConfigEdit, *, home: Path) -> EditPlan:
    """Read the current file under `home`, merge, and return old/new text and the diff (a dry run)."""
    path = edit.path(home)
    old_text: str | None = None
    existing: dict[str, Any] = {}
    if not path.exists():
        for relative in edit.shadows:
            if (home / relative).exists():
                raise ConfigError(
                    f"{home / relative} exists and would stop being read once {path.name} is created. "
                    f"{edit.migration_hint or 'Move its settings over first.'} Nothing was changed."
                )
    if path.exists():
        if not path.is_file():
            raise ConfigError(f"{path} exists but is not a file; nothing was changed.")
        try:
            old_text = path.read_text(encoding="utf-8")
        except (OSError, UnicodeDecodeError) as err:
            raise ConfigError(f"cannot read {path} ({err}); nothing was changed.") from err
        existing = parse_document(old_text, edit.format, path)
    new_text = render_document(merge_document(existing, edit), edit.format)
    return EditPlan(path=path, old_text=old_text, new_text=new_text)


def backup_path_for(path: Path, now: datetime | None = None) -> Path:
    """`<name>.<YYYYmmdd-HHMMSS>.bak` next to `path`, with a counter if that name is taken."""
    stamp = (now or datetime.now()).strftime("%Y%m%d-%H%M%S")
    candidate = path.with_name(f"{path.name}.{stamp}.bak")
    counter = 1
    while candidate.exists():
        candidate = path.with_name(f"{path.name}.{stamp}-{counter}.bak")
        counter += 1
    return candidate


def atomic_write_text(path: Path, text: str, mode: int | None = None) -> None:
    """Write `text` to `path` through a flushed temp file in the same folder and `os.replace`."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, temp_name = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        with os.fdopen(fd, "w", encoding="utf-8", newline="") as handle:
            handle.write(text)
            handle.flush()
            os.fsync(handle.fileno())
        if mode is not None:
            os.chmod(temp_name, mode)
        os.replace(temp_name, path)
    except BaseException:
        Path(temp_name).unlink(missing_ok=True)
        raise


def apply_edit(edit: ConfigEdit, *, home: Path, dry_run: bool = False, now: datetime | None = None) -> EditResult:
    """Merge the edit into the file under `home`: backup, then atomic replace. `dry_run` writes nothing."""
    plan = plan_edit(edit, home=home)
    if dry_run or not plan.changed:
        return EditResult(path=plan.path, backup=None, written=False, diff=plan.diff)
    backup: Path | None = None
    mode: int | None = None
    try:
        if plan.old_text is not None:
            backup = backup_path_for(plan.path, now)
            shutil.copy2(plan.path, backup)  # keeps the old bytes and timestamps exactly
            mode = plan.path.stat().st_mode & 0o7777
        atomic_write_text(plan.path, plan.new_text, mode)
    except OSError as err:
        raise ConfigError(f"cannot write {plan.path} ({err.strerror or err}); the old file is unchanged.") from err
    return EditResult(path=plan.path, backup=backup, written=True, diff=plan.diff)
