"""What one running server knows: its config, the model (once loaded), the template and metrics.

The model may load on a background thread (the app shows /health 503 "loading" meanwhile);
routes ask `require_model()`, which answers 503 until the load is done.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from dataclasses import dataclass, field

from launcher.core.config import ServeConfig
from launcher.core.errors import LauncherError
from launcher.engines.base import EngineStats, LoadedModel
from launcher.server.errors import ApiError
from launcher.server.metrics import ServerMetrics
from launcher.server.sse import KEEPALIVE_INTERVAL_S
from launcher.server.templates import ChatTemplate, load_template

log = logging.getLogger(__name__)

ModelLoader = Callable[[], LoadedModel]


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

    def __post_init__(self) -> None:
        self.metrics = ServerMetrics(self._engine_stats)

    def _engine_stats(self) -> EngineStats | None:
        return self.model.stats() if self.model is not None else None

    def attach(self, model: LoadedModel) -> None:
        """Make a loaded model servable (compiles its chat template; a bad one fails the load)."""
        self.template = load_template(model.info)
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
        """The id clients use (the alias when one is set)."""
        if self.config.alias:
            return self.config.alias
        return self.model.info.id if self.model is not None else ""

    def require_model(self) -> tuple[LoadedModel, ChatTemplate]:
        """The model and template, or a 503 while loading / after a failed load."""
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
