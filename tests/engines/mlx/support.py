"""Helpers for the MLX engine tests: load with the real engine, drive requests to the end."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from launcher.core.config import ServeConfig
from launcher.engines.base import GenerationEvent, GenerationRequest, LocalModel, SamplingParams
from launcher.engines.mlx.engine import MlxEngine
from launcher.engines.mlx.model import MlxModel

GREEDY = SamplingParams(temperature=0.0)
CHAT_PROMPT = "<|im_start|>user\nHello there, how are you today?<|im_end|>\n<|im_start|>assistant\n"


def load(path: Path, **config: object) -> MlxModel:
    """Load `path` with the real engine (small context unless overridden)."""
    settings = {"context": 1024, "parallel": 4, **config}
    return MlxEngine().load(LocalModel(path=path, format="mlx", name=path.name), ServeConfig(**settings))


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


async def run(model: MlxModel, request: GenerationRequest) -> Outcome:
    """Drive one request to its final event."""
    outcome = Outcome()
    async for event in model.generate(request):
        outcome.events.append(event)
    return outcome


def greedy(prompt: list[int], max_tokens: int = 12, **extra: object) -> GenerationRequest:
    """A temperature-0 request that ignores end-of-generation tokens unless told otherwise."""
    options: dict[str, object] = {"sampling": GREEDY, "ignore_eos": True, **extra}
    return GenerationRequest(prompt_tokens=prompt, max_tokens=max_tokens, **options)  # type: ignore[arg-type]
