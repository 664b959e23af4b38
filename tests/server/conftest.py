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
    """`with serve(model, **config) as url:` runs the real app on a free port."""

    def start(model: LoadedModel, **config: object) -> AbstractContextManager[str]:
        app = create_app(model, ServeConfig(port=0, **config))  # type: ignore[arg-type]
        return running_app(app)

    yield start
