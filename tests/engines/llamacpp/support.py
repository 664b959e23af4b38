"""Helpers for the llama.cpp engine tests: load with the real engine, drive requests to the end."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from launcher.core.config import ServeConfig
from launcher.engines.base import GenerationEvent, GenerationRequest, LocalModel, SamplingParams
from launcher.engines.llamacpp.engine import LlamaCppEngine
from launcher.engines.llamacpp.model import LlamaCppModel

GREEDY = SamplingParams(temperature=0.0)


def load(path: Path, **config: object) -> LlamaCppModel:
    """Load `path` with the real engine (2 threads, small context unless overridden)."""
    settings = {"context": 4096, "parallel": 4, "threads": 2, **config}
    return LlamaCppEngine().load(LocalModel(path=path, format="gguf", name=path.stem), ServeConfig(**settings))


@dataclass
class Outcome:
    """Everything a request produced."""

    events: list[GenerationEvent] = field(default_factory=list)

    @property
    def tokens(self) -> list[int]:
        return [t for event in self.events for t in event.token_ids]

    @property
    def text(self) -> str:
        return "".join(event.text for event in self.events)

    @property
    def last(self) -> GenerationEvent:
        return self.events[-1]


async def run(model: LlamaCppModel, request: GenerationRequest) -> Outcome:
    """Drive one request to its final event."""
    outcome = Outcome()
    async for event in model.generate(request):
        outcome.events.append(event)
    return outcome


def greedy(prompt: list[int], max_tokens: int = 12, **extra: object) -> GenerationRequest:
    """A temperature-0 request that ignores end-of-generation tokens unless told otherwise."""
    options: dict[str, object] = {"sampling": GREEDY, "ignore_eos": True, **extra}
    return GenerationRequest(prompt_tokens=prompt, max_tokens=max_tokens, **options)  # type: ignore[arg-type]
