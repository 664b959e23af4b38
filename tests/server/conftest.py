"""Fixtures for server tests: the scripted fake model and a real uvicorn server around an app."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager

import pytest

from launcher.core.config import ServeConfig
from launcher.engines.base import LoadedModel
from launcher.server.app import create_app
from tests.server.fake_model import FakeModel
from tests.server.harness import running_app

ServeFn = Callable[..., AbstractContextManager[str]]


@pytest.fixture
def fake_model() -> FakeModel:
    """A fresh scripted model."""
    return FakeModel()


@pytest.fixture
def serve() -> Iterator[ServeFn]:
    """`with serve(model, **config) as url:` runs the real app on a free port.

    `keepalive_s=` sets how long a stream stays silent before a keep-alive (10 s in real use).
    """

    def start(model: LoadedModel, keepalive_s: float | None = None, **config: object) -> AbstractContextManager[str]:
        app = create_app(model, ServeConfig(port=0, **config))  # type: ignore[arg-type]
        if keepalive_s is not None:
            app.state.server.keepalive_s = keepalive_s
        return running_app(app)

    yield start
