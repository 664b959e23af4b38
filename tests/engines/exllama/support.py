"""Helpers for driving a loaded model's `generate` in tests."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from dataclasses import dataclass

from launcher.engines.base import GenerationEvent, GenerationRequest, LoadedModel, SamplingParams


@dataclass
class Outcome:
    """Every event of one request."""

    events: list[GenerationEvent]

    @property
    def last(self) -> GenerationEvent:
        """The final event (finish_reason set)."""
        return self.events[-1]

    @property
    def tokens(self) -> list[int]:
        """Generated token ids."""
        return [t for e in self.events for t in e.token_ids]

    @property
    def text(self) -> str:
        """Generated text."""
        return "".join(e.text for e in self.events)


def greedy(prompt: list[int], max_tokens: int, **kwargs: object) -> GenerationRequest:
    """A temperature-0 request."""
    return GenerationRequest(
        prompt_tokens=prompt, max_tokens=max_tokens, sampling=SamplingParams(temperature=0.0), **kwargs
    )  # type: ignore[arg-type]


async def run(model: LoadedModel, request: GenerationRequest) -> Outcome:
    """Stream a request to its end."""
    events = [event async for event in model.generate(request)]
    return Outcome(events)


async def until(condition: Callable[[], bool], what: str) -> None:
    """Wait for the scheduler thread to reach a state (polling the loop, never a fixed sleep)."""
    for _ in range(4000):
        if condition():
            return
        await asyncio.sleep(0.005)
    raise AssertionError(f"timed out waiting for {what}")
