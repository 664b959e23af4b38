"""The engine-agnostic HTTP server behind `launcher serve`.

OpenAI Chat Completions / Completions / Embeddings / Responses and Anthropic Messages on one
endpoint, above the engine seam (`launcher.engines.base`). `create_app` builds the ASGI app;
`launcher/cli/serve.py` runs it under uvicorn.
"""

from __future__ import annotations

__all__ = ["create_app"]


def __getattr__(name: str) -> object:
    # Lazy so `launcher --help` does not import Starlette.
    if name == "create_app":
        from launcher.server.app import create_app

        return create_app
    raise AttributeError(name)
