"""The prompt cache on disk: KV state of prompt prefixes, kept across restarts, model swaps and sessions.

An engine keeps the KV of recent prompts in memory (the prefix cache); this is the tier under it.
When a sequence ends, the engine hands its tokens and its exported state to `PromptDiskCache.save`,
which writes them on a background thread. When a new prompt misses in memory, `best` finds the stored
entry sharing the longest prefix with it, `load` reads and checks it, and the engine puts the state
back and reads only the rest. A restart, an unload (LRU, TTL) or a new agent session then costs a
file read instead of reading a 10-20k-token system prompt again.

Safety, because a wrong state would be a wrong answer, not a slow one:
- the key (`CacheKey`) holds everything that makes a state reusable (the model file's identity, the
  engine and its version, the KV layout); entries live in a folder per key, and a header that names
  another key is a miss;
- a write goes to a temporary file that only `os.replace` makes an entry, so a process killed
  mid-write leaves nothing a later start uses; stale temporary files are removed later;
- every entry has a CRC-32 of its payload, checked before use; a truncated, corrupt or foreign entry
  is removed with one log line;
- write failures (a full disk) only log: a request never fails because of this cache.

The budget covers the whole folder (all models, all servers sharing it); the least recently used
entries (by file modification time, refreshed on each use) go first.

File layout: `<folder>/<key digest>/<tokens digest>.lpc`:
    MAGIC | u32 header length | header JSON | prompt tokens (int32 LE) | each part's bytes
This module is runtime-neutral: it must not import any engine runtime.
"""

from __future__ import annotations

import contextlib
import dataclasses
import hashlib
import json
import logging
import os
import shutil
import threading
import time
import zlib
from collections import deque
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, BinaryIO

import numpy as np
import numpy.typing as npt

from launcher.core import paths
from launcher.core.units import GIB, format_bytes
from launcher.engines.base import EngineStats

log = logging.getLogger("launcher.engines.prompt_cache")

MAGIC = b"LPROMPT1"
SUFFIX = ".lpc"
DEFAULT_MIN_TOKENS = 256
"""Prompts shorter than this are not written: reading them again costs less than a file."""
DEFAULT_BUDGET_CAP = 20 * GIB
DEFAULT_BUDGET_SHARE = 0.10
"""The default budget: a tenth of the free space where the folder is, at most 20 GiB."""
DISK_RESERVE = 2 * GIB
"""A write that would leave less free space than this is skipped: the cache never fills a disk."""
_STALE_TEMP_S = 3600  # a temporary file this old belongs to a write that was killed
_MAX_PENDING = 2  # captured states waiting for the writer; older ones are dropped past this
_HEADER_LIMIT = 1 << 20


def default_folder() -> Path:
    """Where entries go when no --prompt-cache-dir says otherwise: under the app's data folder."""
    return paths.data_dir() / "prompt-cache"


def default_budget_bytes(folder: Path) -> int:
    """A tenth of the free space on the folder's disk, at most 20 GiB."""
    existing = folder
    while not existing.exists() and existing.parent != existing:
        existing = existing.parent
    try:
        free = shutil.disk_usage(existing).free
    except OSError:
        return 0
    return int(min(DEFAULT_BUDGET_CAP, free * DEFAULT_BUDGET_SHARE))


def budget_bytes(gigabytes: float | None, folder: Path) -> int:
    """--prompt-cache-gb in bytes (None: the default from free space; 0: off)."""
    return default_budget_bytes(folder) if gigabytes is None else int(gigabytes * GIB)


def file_identity(path: Path) -> str:
    """What identifies a model's weights without reading them all: size, modification time and a hash
    of the first MiB of each file (the GGUF header; config.json of a model folder), path-independent."""
    files = [path] if path.is_file() else sorted(p for p in path.iterdir() if p.is_file())
    digest = hashlib.sha256()
    for file in files:
        stat = file.stat()
        digest.update(f"{file.name if path.is_dir() else ''}:{stat.st_size}:{stat.st_mtime_ns}:".encode())
        with file.open("rb") as handle:
            digest.update(handle.read(1 << 20))
    return digest.hexdigest()


@dataclass(frozen=True)
class CacheKey:
    """Everything a stored state depends on. `model` is shown by `launcher cache list`, not compared."""

    model: str
    engine: str
    facts: dict[str, str]  # the model file's identity, engine version, KV type, layout, ...

    @property
    def digest(self) -> str:
        """The folder name of this key's entries."""
        text = json.dumps({"engine": self.engine, **self.facts}, sort_keys=True)
        return hashlib.sha256(text.encode()).hexdigest()[:20]


@dataclass(eq=False)
class Entry:
    """One stored prefix: its tokens and where its parts lie in the file."""

    path: Path
    tokens: npt.NDArray[np.int32]
    parts: list[tuple[str, int]]  # (name, size) in file order
    size: int

    def common_prefix(self, prompt: npt.NDArray[np.int32]) -> int:
        """How many leading tokens this entry shares with `prompt`."""
        length = min(len(self.tokens), len(prompt))
        if length == 0:
            return 0
        same = self.tokens[:length] == prompt[:length]
        return length if bool(same.all()) else int(np.argmin(same))


@dataclass(frozen=True)
class EntryInfo:
    """An entry as `launcher cache list` shows it."""

    path: Path
    model: str
    engine: str
    tokens: int
    size: int
    last_used: float  # unix time


@dataclass
class CacheTally:
    """Counters for /metrics; plain ints and floats read without a lock."""

    hits: int = 0
    misses: int = 0
    restored_tokens: int = 0
    restore_seconds: float = 0.0
    writes: int = 0
    write_failures: int = 0
    corrupt: int = 0


@dataclass
class _Pending:
    tokens: npt.NDArray[np.int32]
    parts: list[tuple[str, Any]]  # name -> bytes-like (numpy uint8 array or bytes)
    replaces_prefixes: bool


@dataclass
class PromptDiskCache:
    """One loaded model's view of the shared folder: its entries, lookups, reads and background writes."""

    folder: Path
    budget: int
    key: CacheKey
    min_tokens: int = DEFAULT_MIN_TOKENS
    tally: CacheTally = field(default_factory=CacheTally)

    def __post_init__(self) -> None:
        self._dir = self.folder / self.key.digest
        self._lock = threading.Lock()
        self._entries: dict[Path, Entry] = {}
        self._pending: deque[_Pending] = deque()
        self._wake = threading.Condition(self._lock)
        self._writing = False
        self._closed = False
        self._writer: threading.Thread | None = None
        self._warned_write = False
        if self.enabled:
            self._scan()

    @property
    def enabled(self) -> bool:
        """False when the budget is 0 (--prompt-cache-gb 0)."""
        return self.budget > 0

    # ----- lookups and reads (the engine's thread) -------------------------------------------------

    def best(self, prompt: npt.NDArray[np.int32], better_than: int, *, whole: bool = False) -> tuple[Entry, int] | None:
        """The entry sharing the most leading tokens with `prompt`, if that is more than `better_than`;
        `whole`: only entries that `prompt` starts with and goes past (for states that cannot be cut back)."""
        with self._lock:
            entries = list(self._entries.values())
        found: tuple[Entry, int] | None = None
        for entry in entries:
            shared = entry.common_prefix(prompt)
            if whole and not (shared == len(entry.tokens) and shared < len(prompt)):
                continue
            if shared > better_than and (found is None or shared > found[1]):
                found = (entry, shared)
        return found

    def candidate(
        self, prompt: npt.NDArray[np.int32], in_memory: int, *, longest: int | None = None, whole: bool = False
    ) -> Entry | None:
        """The entry worth restoring for `prompt` when memory offers `in_memory` tokens of it: one that saves
        reading at least half the minimum more (a file read is not free either). Entries of more than
        `longest` tokens (stored with a longer context) do not count; `whole` as in `best`. A lookup that
        finds nothing counts as a miss; a prompt whose rest is short is not looked up at all."""
        if len(prompt) - in_memory < self.min_tokens:
            return None  # what is left to read is short: not worth a lookup
        found = self.best(prompt, better_than=in_memory + self.min_tokens // 2, whole=whole)
        if found is None or (longest is not None and len(found[0].tokens) > longest):
            self.record_miss()
            return None
        return found[0]

    def covers(self, tokens: npt.NDArray[np.int32], *, truncatable: bool) -> bool:
        """Whether an entry already holds these tokens (or, where a state can be cut, more after them):
        a sequence that only re-read a stored prefix need not be written again."""
        with self._lock:
            entries = list(self._entries.values())
        wanted = len(tokens)
        return any(
            (len(entry.tokens) == wanted or (truncatable and len(entry.tokens) > wanted))
            and entry.common_prefix(tokens) == wanted
            for entry in entries
        )

    def load(self, entry: Entry) -> dict[str, memoryview] | None:
        """The entry's parts after checking the whole file; None (the entry removed, one log line) when it
        is gone, truncated, corrupt or written for another key."""
        try:
            data = entry.path.read_bytes()
        except FileNotFoundError:  # another server sharing the folder evicted it
            self._forget(entry)
            return None
        except OSError as err:
            log.warning("prompt cache: cannot read %s (%s); skipped", entry.path.name, err)
            self._forget(entry)
            return None
        parsed = _parse(data, verify=True)
        problem = parsed if isinstance(parsed, str) else None
        if problem is None and isinstance(parsed, tuple) and parsed[0].get("key") != self.key.digest:
            problem = "it was written for another model or engine setup"
        if problem is not None or not isinstance(parsed, tuple):
            self._discard(entry, problem or "unreadable")
            return None
        header, view = parsed
        offset = 4 * int(header["n_tokens"])
        parts: dict[str, memoryview] = {}
        for name, size in entry.parts:
            parts[name] = view[offset : offset + size]
            offset += size
        _touch(entry.path)
        return parts

    def record_restore(self, tokens: int, seconds: float) -> None:
        """Count a lookup that put `tokens` prompt tokens back from disk in `seconds`."""
        self.tally.hits += 1
        self.tally.restored_tokens += tokens
        self.tally.restore_seconds += seconds

    def record_miss(self) -> None:
        """Count a lookup that found nothing on disk worth restoring."""
        self.tally.misses += 1

    def disk_bytes(self) -> int:
        """Bytes this model's entries take."""
        with self._lock:
            return sum(entry.size for entry in self._entries.values())

    def entry_count(self) -> int:
        """This model's entries."""
        with self._lock:
            return len(self._entries)

    # ----- writes (queued by the engine's thread, done on the writer's) ------------------------------

    def save(self, tokens: npt.NDArray[np.int32], parts: list[tuple[str, Any]], *, replaces_prefixes: bool) -> None:
        """Write an entry in the background. `parts` are (name, bytes-like) in the order an engine reads them
        back; `replaces_prefixes`: entries whose tokens start this one's are superseded by it (a state that
        can be cut back to any shorter prefix) and go once it is written."""
        if not self.enabled or len(tokens) < self.min_tokens:
            return
        with self._lock:
            if self._closed:
                return
            self._pending.append(_Pending(np.array(tokens, dtype=np.int32), parts, replaces_prefixes))
            while len(self._pending) > _MAX_PENDING:
                dropped = self._pending.popleft()
                log.debug("prompt cache: the writer is behind; a %d-token prefix is not written", len(dropped.tokens))
            if self._writer is None:
                self._writer = threading.Thread(target=self._write_loop, name="prompt-cache-writer", daemon=True)
                self._writer.start()
            self._wake.notify()

    def flush(self, timeout: float | None = None) -> bool:
        """Wait until every queued write is done; False when `timeout` ran out first."""
        deadline = None if timeout is None else time.monotonic() + timeout
        with self._lock:
            while self._pending or self._writing:
                left = None if deadline is None else deadline - time.monotonic()
                if left is not None and left <= 0:
                    return False
                self._wake.wait(left)
        return True

    def close(self, timeout: float = 60.0) -> None:
        """Finish the queued writes (an unloading model's last prefixes), then stop the writer."""
        if not self.flush(timeout):
            log.warning("prompt cache: writes still running after %.0f s; the rest is not kept", timeout)
        with self._lock:
            self._closed = True
            self._pending.clear()
            self._wake.notify_all()

    def _write_loop(self) -> None:
        while True:
            with self._lock:
                while not self._pending and not self._closed:
                    self._wake.wait()
                if self._closed:
                    return
                job = self._pending.popleft()
                self._writing = True
            try:
                self._write(job)
            except Exception:  # never lose the writer: the next write may succeed
                log.exception("prompt cache: writing an entry failed")
                self.tally.write_failures += 1
            finally:
                with self._lock:
                    self._writing = False
                    self._wake.notify_all()

    def _write(self, job: _Pending) -> None:
        tokens = job.tokens
        name = hashlib.sha256(tokens.tobytes()).hexdigest()[:32] + SUFFIX
        path = self._dir / name
        token_bytes = tokens.astype("<i4").tobytes()
        blobs = [_bytes_view(data) for _, data in job.parts]
        crc = zlib.crc32(token_bytes)
        for blob in blobs:
            crc = zlib.crc32(blob, crc)
        header = {
            "key": self.key.digest,
            "model": self.key.model,
            "engine": self.key.engine,
            "n_tokens": len(tokens),
            "parts": [[part_name, blob.nbytes] for (part_name, _), blob in zip(job.parts, blobs, strict=True)],
            "crc32": crc,
            "created": time.time(),
        }
        head = json.dumps(header, separators=(",", ":")).encode()
        size = len(MAGIC) + 4 + len(head) + len(token_bytes) + sum(blob.nbytes for blob in blobs)
        if size > self.budget:
            log.info(
                "prompt cache: a %d-token prefix (%d MiB) is over the budget; not written", len(tokens), size >> 20
            )
            return
        if not self._room_for(size):
            return
        temp = self._dir / f".{name}.{os.getpid()}.{threading.get_ident()}.tmp"
        try:
            self._dir.mkdir(parents=True, exist_ok=True)
            with temp.open("wb") as handle:
                handle.write(MAGIC + len(head).to_bytes(4, "little") + head + token_bytes)
                for blob in blobs:
                    handle.write(blob)
                handle.flush()
                os.fsync(handle.fileno())
            os.replace(temp, path)
        except OSError as err:
            with contextlib.suppress(OSError):
                temp.unlink(missing_ok=True)
            self.tally.write_failures += 1
            if not self._warned_write:  # one line, not one per request, for a disk that stays full
                log.warning("prompt cache: cannot write to %s (%s); requests go on without it", self._dir, err)
                self._warned_write = True
            return
        self._warned_write = False
        self.tally.writes += 1
        parts = [(part_name, blob.nbytes) for (part_name, _), blob in zip(job.parts, blobs, strict=True)]
        entry = Entry(path=path, tokens=tokens, parts=parts, size=size)
        with self._lock:
            self._entries[path] = entry
            superseded = [
                old
                for old in self._entries.values()
                if job.replaces_prefixes
                and old is not entry
                and len(old.tokens) < len(tokens)
                and entry.common_prefix(old.tokens) == len(old.tokens)
            ]
        for old in superseded:
            self._remove(old)
        self._enforce_budget(keep=path)

    def _room_for(self, size: int) -> bool:
        try:
            free = shutil.disk_usage(self.folder if self.folder.exists() else self.folder.parent).free
        except OSError:
            return True  # the write itself will say what is wrong
        if free - size >= DISK_RESERVE:
            return True
        if not self._warned_write:
            log.warning("prompt cache: only %d MiB free on the disk of %s; not writing more", free >> 20, self.folder)
            self._warned_write = True
        return False

    def _enforce_budget(self, keep: Path) -> None:
        """Remove the least recently used entries of the whole folder until it fits the budget."""
        files = sorted(_entry_files(self.folder), key=lambda item: item[1].st_mtime)
        total = sum(stat.st_size for _, stat in files)
        for path, stat in files:
            if total <= self.budget:
                break
            if path == keep:
                continue
            path.unlink(missing_ok=True)
            total -= stat.st_size
            with self._lock:
                self._entries.pop(path, None)

    # ----- the index -------------------------------------------------------------------------------

    def _scan(self) -> None:
        """Read the headers and tokens of this key's entries; remove what no start may use."""
        if not self._dir.is_dir():
            return
        now = time.time()
        for path in self._dir.iterdir():
            if path.name.endswith(".tmp"):
                _remove_stale_temp(path, now)
                continue
            if path.suffix != SUFFIX:
                continue
            entry = _read_index(path)
            if isinstance(entry, str):
                self.tally.corrupt += 1
                log.warning("prompt cache: removed %s: %s", path.name, entry)
                path.unlink(missing_ok=True)
                continue
            self._entries[path] = entry

    def _forget(self, entry: Entry) -> None:
        with self._lock:
            self._entries.pop(entry.path, None)

    def discard(self, entry: Entry, why: str) -> None:
        """Remove an entry that passed its checksum but that the engine cannot take back (one log line)."""
        self._discard(entry, why)

    def _discard(self, entry: Entry, why: str) -> None:
        self.tally.corrupt += 1
        log.warning("prompt cache: removed %s: %s", entry.path.name, why)
        self._remove(entry)

    def _remove(self, entry: Entry) -> None:
        self._forget(entry)
        entry.path.unlink(missing_ok=True)


def _bytes_view(data: Any) -> memoryview:
    """A flat byte view of bytes, a memoryview or a numpy array, without a copy where it is contiguous."""
    if isinstance(data, np.ndarray):
        return memoryview(np.ascontiguousarray(data).reshape(-1).view(np.uint8))  # type: ignore[arg-type]
    return memoryview(data).cast("B")


def _touch(path: Path) -> None:
    with contextlib.suppress(OSError):
        os.utime(path)


def _remove_stale_temp(path: Path, now: float) -> None:
    try:
        if now - path.stat().st_mtime > _STALE_TEMP_S:
            path.unlink(missing_ok=True)
    except OSError:
        pass


def _entry_files(folder: Path) -> Iterator[tuple[Path, os.stat_result]]:
    if not folder.is_dir():
        return
    for key_dir in folder.iterdir():
        if not key_dir.is_dir():
            continue
        for path in key_dir.iterdir():
            if path.suffix == SUFFIX:
                try:
                    yield path, path.stat()
                except OSError:
                    continue


def _split_header(data: bytes) -> tuple[dict[str, Any], int] | str:
    """The header and where the payload starts, or what is wrong with the file's start."""
    if len(data) < len(MAGIC) + 4 or not data.startswith(MAGIC):
        return "not a prompt-cache entry (or from another version)"
    length = int.from_bytes(data[len(MAGIC) : len(MAGIC) + 4], "little")
    start = len(MAGIC) + 4
    if length > _HEADER_LIMIT or len(data) < start + length:
        return "its header is cut short"
    try:
        header = json.loads(data[start : start + length])
        int(header["n_tokens"])
        [(str(name), int(size)) for name, size in header["parts"]]
        int(header["crc32"])
    except (ValueError, KeyError, TypeError):
        return "its header is not readable"
    return header, start + length


def _parse(data: bytes, *, verify: bool) -> tuple[dict[str, Any], memoryview] | str:
    """A whole entry file: (header, payload), or what is wrong with it. The payload is a view of `data`:
    an entry is tens to hundreds of MB, and a copy would cost as much as reading it."""
    split = _split_header(data)
    if isinstance(split, str):
        return split
    header, start = split
    payload = memoryview(data)[start:]
    expected = 4 * int(header["n_tokens"]) + sum(int(size) for _, size in header["parts"])
    if len(payload) != expected:
        return f"it is {len(payload)} bytes where its header says {expected} (a write was cut short)"
    if verify and zlib.crc32(payload) != int(header["crc32"]):
        return "its checksum does not match (the file is damaged)"
    return header, payload


def _read_header(handle: BinaryIO) -> tuple[dict[str, Any], int] | str:
    """The header of an open entry file and where its payload starts (the file is left there)."""
    start = handle.read(len(MAGIC) + 4)
    if len(start) < len(MAGIC) + 4:
        return "it is cut short"
    length = int.from_bytes(start[len(MAGIC) :], "little")
    return _split_header(start + handle.read(min(length, _HEADER_LIMIT)))


def _read_index(path: Path) -> Entry | str:
    """An entry's index record from its header and tokens (the parts are checked when they are used)."""
    try:
        size = path.stat().st_size
        with path.open("rb") as handle:
            split = _read_header(handle)
            if isinstance(split, str):
                return split
            header, offset = split
            n_tokens = int(header["n_tokens"])
            token_bytes = handle.read(4 * n_tokens)
    except OSError as err:
        return f"it cannot be read ({err})"
    parts = [(str(name), int(part)) for name, part in header["parts"]]
    if size != offset + 4 * n_tokens + sum(part for _, part in parts) or len(token_bytes) != 4 * n_tokens:
        return "its size does not match its header (a write was cut short)"
    tokens = np.frombuffer(token_bytes, dtype="<i4").astype(np.int32)
    return Entry(path=path, tokens=tokens, parts=parts, size=size)


def list_entries(folder: Path) -> list[EntryInfo]:
    """Every readable entry under `folder`, most recently used first."""
    found: list[EntryInfo] = []
    for path, stat in _entry_files(folder):
        try:
            with path.open("rb") as handle:
                split = _read_header(handle)
        except OSError:
            continue
        if isinstance(split, str):
            continue
        header, _ = split
        found.append(
            EntryInfo(
                path=path,
                model=str(header.get("model", "?")),
                engine=str(header.get("engine", "?")),
                tokens=int(header["n_tokens"]),
                size=stat.st_size,
                last_used=stat.st_mtime,
            )
        )
    return sorted(found, key=lambda info: info.last_used, reverse=True)


def clear(folder: Path, models: Iterable[str] = ()) -> tuple[int, int]:
    """Remove the entries of `models` (all when empty), and stale temporary files; (files, bytes) removed."""
    wanted = set(models)
    removed = freed = 0
    for info in list_entries(folder):
        if wanted and info.model not in wanted:
            continue
        info.path.unlink(missing_ok=True)
        removed += 1
        freed += info.size
    if folder.is_dir():
        now = time.time()
        for key_dir in folder.iterdir():
            if key_dir.is_dir():
                for path in key_dir.glob("*.tmp"):
                    _remove_stale_temp(path, now)
                if not wanted and not any(key_dir.iterdir()):
                    key_dir.rmdir()
    return removed, freed


def with_cache_stats(stats: EngineStats, cache: PromptDiskCache | None) -> EngineStats:
    """`stats` with the prompt cache's numbers filled in (unchanged without a cache)."""
    if cache is None or not cache.enabled:
        return stats
    tally = cache.tally
    return dataclasses.replace(
        stats,
        prompt_cache_disk_hits=tally.hits,
        prompt_cache_disk_misses=tally.misses,
        prompt_cache_disk_restored_tokens=tally.restored_tokens,
        prompt_cache_disk_restore_seconds=tally.restore_seconds,
        prompt_cache_disk_writes=tally.writes,
        prompt_cache_disk_write_failures=tally.write_failures,
        prompt_cache_disk_entries=cache.entry_count(),
        prompt_cache_disk_bytes=cache.disk_bytes(),
        prompt_cache_disk_budget_bytes=cache.budget,
    )


def for_model(key: CacheKey, folder: str | None, gigabytes: float | None) -> PromptDiskCache | None:
    """The prompt cache a loading model uses, from --prompt-cache-dir/-gb (None when it is off)."""
    where = Path(folder).expanduser() if folder else default_folder()
    budget = budget_bytes(gigabytes, where)
    if budget <= 0:
        return None
    try:
        cache = PromptDiskCache(folder=where, budget=budget, key=key)
    except OSError as err:  # an unreadable folder: serve without the cache
        log.warning("prompt cache: %s cannot be used (%s); serving without it", where, err)
        return None
    log.info(
        "prompt cache: %s holds %d prefixes of %s (budget %s; --prompt-cache-gb 0 turns it off)",
        where,
        cache.entry_count(),
        key.model,
        format_bytes(budget),
    )
    return cache
