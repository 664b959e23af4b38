"""What one running server knows: its config, the model (once loaded), the template and metrics.

The model may load on a background thread (the app shows /health 503 "loading" meanwhile);
routes ask `require_model()`, which answers 503 until the load is done.
"""

from __future__ import annotations

import asyncio
import fnmatch
import logging
import threading
import weakref
from collections.abc import Callable
from dataclasses import dataclass, field

from launcher.core.config import ServeConfig
from launcher.core.errors import ConfigError, LauncherError
from launcher.engines.base import EngineStats, LoadedModel
from launcher.server.control_text import ControlText
from launcher.server.errors import ApiError
from launcher.server.generation import Generation
from launcher.server.metrics import ServerMetrics
from launcher.server.request_log import current_request
from launcher.server.sse import KEEPALIVE_INTERVAL_S
from launcher.server.templates import ChatTemplate, load_template

log = logging.getLogger(__name__)

ModelLoader = Callable[[], LoadedModel]

DRAIN_TIMEOUT_S = 1.0  # how long a stopping server waits for streams to write their end


def alias_target(aliases: dict[str, str], name: str) -> str | None:
    """The MODEL an alias maps `name` to (exact names before * patterns), or None."""
    if name in aliases:
        return aliases[name]
    return next((target for pattern, target in aliases.items() if fnmatch.fnmatchcase(name, pattern)), None)


@dataclass
class ServerState:
    """Shared by every route of one app."""

    config: ServeConfig
    engine_name: str = ""
    engine_reason: str = ""
    model: LoadedModel | None = None
    template: ChatTemplate | None = None
    load_error: LauncherError | None = None
    loaded: threading.Event = field(default_factory=threading.Event)
    keepalive_s: float = KEEPALIVE_INTERVAL_S  # silence before a stream sends a keep-alive
    metrics: ServerMetrics = field(init=False)
    live: weakref.WeakSet[Generation] = field(default_factory=weakref.WeakSet)  # generations running now
    draining: bool = False  # the server is stopping: no new generations
    _control_text: ControlText | None = None

    def __post_init__(self) -> None:
        self.metrics = ServerMetrics(self._engine_stats)

    def _engine_stats(self) -> EngineStats | None:
        return self.model.stats() if self.model is not None else None

    def attach(self, model: LoadedModel) -> None:
        """Make a loaded model servable (compiles its chat template; a bad one fails the load).

        An alias to a model this server does not serve fails the start, not every request.
        """
        self.template = load_template(model.info)
        served_id = self.config.served_name or model.info.id
        for name, target in self.config.alias_map.items():
            if target not in (served_id, model.info.id):
                raise ConfigError(
                    f"--alias {name}={target}: this server serves one model, {served_id!r}; an alias can only "
                    "point at it."
                )
        self.model = model
        if not self.engine_name:
            self.engine_name = model.info.engine
        self.loaded.set()

    def load_with(self, loader: ModelLoader) -> None:
        """Run `loader` (on the calling thread) and record the model or the error."""
        try:
            model = loader()
            try:
                self.attach(model)
            except LauncherError:
                model.close()
                raise
        except LauncherError as err:
            self.load_error = err
        except Exception as err:  # an engine bug must still end in a clear LAUNCHER_ERROR
            log.exception("model load failed")
            self.load_error = LauncherError(f"Loading the model failed: {type(err).__name__}: {err}")
        finally:
            self.loaded.set()

    @property
    def model_id(self) -> str:
        """The id clients use (the NAME alias when one is set)."""
        if self.config.served_name:
            return self.config.served_name
        return self.model.info.id if self.model is not None else ""

    def serving(self) -> dict[str, object]:
        """What runs here, as the app and `launcher bench --calibrate` need it to predict for exactly
        these settings: the model file, its format, and the numbers it was loaded with."""
        if self.model is None:
            return {}
        info, config = self.model.info, self.config
        return {
            "model_path": info.path,
            "format": info.format,
            "context": info.context_length,
            "parallel": info.parallel,
            "kv_cache_type": "f16" if config.kv_cache_type == "auto" else config.kv_cache_type,
            "gpu_layers": config.gpu_layers,
            "threads": config.threads,
        }

    def resolve_model(self, requested: str) -> str:
        """The served model's id for a request's `model`.

        Agents ask for the names they know (claude-sonnet-*, gpt-*): a single-model server answers
        every name with its model, as llama-server does, unless `--alias NAME=MODEL` sends that
        name elsewhere. An alias to a model this server does not serve is a 404 that says so.
        """
        model, _ = self.require_model()
        target = alias_target(self.config.alias_map, requested)
        if target is not None and target not in (self.model_id, model.info.id):
            raise ApiError(
                404,
                f"The model {requested!r} is mapped to {target!r} (--alias), which this server does not serve; "
                f"it serves {self.model_id!r}.",
                code="model_not_found",
            )
        record = current_request()
        if record is not None:
            record.model, record.asked = self.model_id, requested
        return self.model_id

    async def drain(self, timeout_s: float = DRAIN_TIMEOUT_S) -> None:
        """Stop: refuse new generations and end the running ones with a proper finish, so each
        client gets its `finish_reason` and `[DONE]` (or `message_stop`) instead of a cut stream."""
        self.draining = True
        running = list(self.live)
        if running:
            log.info("stopping: ending %d running generation(s)", len(running))
        for generation in running:
            await generation.interrupt("the server is shutting down")
        deadline = asyncio.get_running_loop().time() + timeout_s
        while any(not g.finished for g in list(self.live)) and asyncio.get_running_loop().time() < deadline:
            await asyncio.sleep(0.02)

    def control_text(self) -> ControlText:
        """The served model's control-token shield (see control_text)."""
        model, _ = self.require_model()
        if self._control_text is None:
            self._control_text = ControlText(model)
        return self._control_text

    def require_model(self) -> tuple[LoadedModel, ChatTemplate]:
        """The model and template, or a 503 while loading / after a failed load."""
        if self.draining:
            raise ApiError(503, "The server is shutting down.", headers={"Retry-After": "2"})
        if self.model is not None and self.template is not None:
            return self.model, self.template
        if self.load_error is not None:
            raise ApiError(503, f"The model failed to load: {self.load_error}")
        raise ApiError(503, "The model is still loading; retry in a few seconds.", headers={"Retry-After": "2"})

    def close(self) -> None:
        """Free the model (server shutdown)."""
        model, self.model = self.model, None
        if model is not None:
            model.close()
