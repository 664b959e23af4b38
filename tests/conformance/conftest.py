"""Conformance fixtures: `base_url` (and friends) for every engine server in `servers.SERVERS`.

The suite only speaks HTTP (official openai/anthropic SDKs and raw httpx), so it holds for any
engine. Servers are started once per session and always stopped.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import anthropic
import openai
import pytest

from tests.conformance.servers import SERVERS, RunningServer, ServerSpec, start_server

API_KEY = "conformance-key"


@pytest.fixture(scope="session", params=SERVERS, ids=[s.id for s in SERVERS])
def spec(request: pytest.FixtureRequest) -> ServerSpec:
    """The engine server under test."""
    server_spec: ServerSpec = request.param
    reason = server_spec.available()
    if reason:
        pytest.skip(f"{server_spec.engine}: {reason}")
    return server_spec


@pytest.fixture(scope="session")
def server(
    spec: ServerSpec, request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[RunningServer]:
    """An open server (no API key) on a free loopback port."""
    model_path: Path = request.getfixturevalue(spec.model_fixture)
    running = start_server(spec, model_path, tmp_path_factory.mktemp("serve-home"))
    yield running
    running.stop()


@pytest.fixture(scope="session")
def base_url(server: RunningServer) -> str:
    """`http://127.0.0.1:PORT/v1` of the open server."""
    return server.base_url


@pytest.fixture(scope="session")
def root_url(server: RunningServer) -> str:
    """`http://127.0.0.1:PORT` of the open server."""
    return server.url


@pytest.fixture(scope="session")
def model_id(server: RunningServer) -> str:
    """The model id the server announced."""
    return str(server.ready["model"])


@pytest.fixture(scope="session")
def strict_server(
    spec: ServerSpec, request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[RunningServer]:
    """A server with an API key, one sequence and no wait queue (for auth and 429 tests)."""
    model_path: Path = request.getfixturevalue(spec.model_fixture)
    running = start_server(
        spec,
        model_path,
        tmp_path_factory.mktemp("serve-home"),
        "--api-key",
        API_KEY,
        "--parallel",
        "1",
        "--max-queue",
        "0",
        "--context",
        "16384",
    )
    yield running
    running.stop()


@pytest.fixture
def openai_client() -> Iterator[Callable[..., openai.OpenAI]]:
    """Make openai clients (no retries) that are closed after the test, so no socket outlives it."""
    made: list[openai.OpenAI] = []

    def make(**kwargs: Any) -> openai.OpenAI:
        client = openai.OpenAI(max_retries=0, **kwargs)
        made.append(client)
        return client

    yield make
    for client in made:
        client.close()


@pytest.fixture
def anthropic_client() -> Iterator[Callable[..., anthropic.Anthropic]]:
    """Make anthropic clients (no retries) that are closed after the test."""
    made: list[anthropic.Anthropic] = []

    def make(**kwargs: Any) -> anthropic.Anthropic:
        client = anthropic.Anthropic(max_retries=0, **kwargs)
        made.append(client)
        return client

    yield make
    for client in made:
        client.close()
