"""One model loaded in a server: what its requests use, and what the pool needs to unload it safely."""

from __future__ import annotations

import time
import weakref
from dataclasses import dataclass, field

from launcher.core.config import ServeConfig
from launcher.engines.base import EngineStats, LoadedModel
from launcher.server.core.control_text import ControlText
from launcher.server.core.generation import Generation
from launcher.server.core.templates import ChatTemplate
from launcher.server.metrics import ModelMetrics
from launcher.server.upstreams.upstream import RemoteModel


@dataclass(frozen=True)
class ModelEntry:
    """A model this server can load, under the name clients use for it."""

    name: str
    config: ServeConfig  # `config.model` is what to load; the rest are its settings
    ttl_s: float | None = None  # unload after this many idle seconds (None: keep it)
    origin: str = "served"  # "served" (the MODEL argument), "preset", "library" or "remote"
    remote: RemoteModel | None = None  # another server answers it: nothing loads here (server/upstreams/remote_chat.py)


@dataclass
class ModelSlot:
    """A loaded model with its template, metrics and activity.

    A slot is busy while a request holds it (`pending`: between choosing the model and starting
    its generation) or while one of its generations runs (`live`); the pool never unloads a busy
    slot, so no request loses its model mid-way.
    """

    entry: ModelEntry
    model: LoadedModel
    template: ChatTemplate
    engine_name: str
    engine_reason: str
    config: ServeConfig  # the entry's config with the advisor's numbers filled in
    needed_bytes: int  # the advisor's estimate of what it takes (0: not known, not counted)
    metrics: ModelMetrics
    load_seconds: float = 0.0
    ttl_s: float | None = None
    live: weakref.WeakSet[Generation] = field(default_factory=weakref.WeakSet)
    pending: int = 0
    last_used: float = field(default_factory=time.monotonic)
    loaded_at: float = field(default_factory=time.time)
    _control_text: ControlText | None = None

    @property
    def id(self) -> str:
        """The id clients use."""
        return self.entry.name

    @property
    def busy(self) -> bool:
        """True while a request holds the model or one of its generations runs."""
        return self.pending > 0 or any(not generation.finished for generation in list(self.live))

    def touch(self) -> None:
        """Mark the model as used now (idle time and LRU order count from here)."""
        self.last_used = time.monotonic()

    def idle_seconds(self, now: float | None = None) -> float:
        """Seconds since the model was last used (0 while busy)."""
        return 0.0 if self.busy else max(0.0, (now if now is not None else time.monotonic()) - self.last_used)

    def control_text(self) -> ControlText:
        """The model's control-token shield (see control_text)."""
        if self._control_text is None:
            self._control_text = ControlText(self.model)
        return self._control_text

    def stats(self) -> EngineStats:
        """The engine's live numbers."""
        return self.model.stats()

    def serving(self) -> dict[str, object]:
        """What runs here, as the app and `launcher bench --calibrate` need it to predict for exactly
        these settings: the model file, its format, and the numbers it was loaded with."""
        from launcher.advisor.plan import resolve_kv_type  # the advisor only when asked: it costs ~0.1 s to import

        info, config = self.model.info, self.config
        return {
            "model_path": info.path,
            "format": info.format,
            "context": info.context_length,
            "parallel": info.parallel,
            "kv_cache_type": resolve_kv_type(config.kv_cache_type),
            "gpu_layers": config.gpu_layers,
            "threads": config.threads,
        }

    def describe(self) -> dict[str, object]:
        """The slot as `GET /launcher/models` (and `launcher ps`, the app's Server page) show it."""
        stats = self.stats()
        return {
            "id": self.id,
            "engine": self.engine_name,
            "format": self.model.info.format,
            "quant": self.model.info.quant,
            "context_length": self.model.info.context_length,
            "parallel": self.model.info.parallel,
            "memory_bytes": sum(stats.memory.values()) or self.needed_bytes,
            "estimated_bytes": self.needed_bytes,
            "requests_running": stats.requests_running,
            "requests_waiting": stats.requests_waiting,
            "busy": self.busy,
            "idle_seconds": round(self.idle_seconds(), 1),
            "ttl_seconds": self.ttl_s,
            "load_seconds": round(self.load_seconds, 2),
            "loaded_at": self.loaded_at,
        }
