"""Helpers every engine's tests use: drive a request to its end, wait for a scheduler state, and the
cancellation scenarios that each engine must pass the same way."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from dataclasses import dataclass, field

import pytest

from launcher.engines.base import GenerationEvent, GenerationRequest, LoadedModel, SamplingParams

GREEDY = SamplingParams(temperature=0.0)


@dataclass
class Outcome:
    """Everything a request produced."""

    events: list[GenerationEvent] = field(default_factory=list)

    @property
    def tokens(self) -> list[int]:
        """Generated token ids."""
        return [t for event in self.events for t in event.token_ids]

    @property
    def text(self) -> str:
        """Generated text."""
        return "".join(event.text for event in self.events)

    @property
    def last(self) -> GenerationEvent:
        """The final event (finish_reason set)."""
        return self.events[-1]


async def run(model: LoadedModel, request: GenerationRequest) -> Outcome:
    """Drive one request to its final event."""
    return Outcome([event async for event in model.generate(request)])


def greedy(prompt: list[int], max_tokens: int = 12, **extra: object) -> GenerationRequest:
    """A temperature-0 request that ignores end-of-generation tokens unless told otherwise."""
    options: dict[str, object] = {"sampling": GREEDY, "ignore_eos": True, **extra}
    return GenerationRequest(prompt_tokens=prompt, max_tokens=max_tokens, **options)  # type: ignore[arg-type]


def exact(prompt: list[int], max_tokens: int = 12, **extra: object) -> GenerationRequest:
    """A greedy request whose tokens repeat bit for bit from run to run: speculation off. Drafts are
    checked in batches sized from step timings, and a batch's shape changes the arithmetic just enough
    to flip a random-weight model's near-ties. Tests that compare two runs for another reason (a cache
    hit, a restart, batching) use this; speculation's own tests compare against it."""
    return greedy(prompt, max_tokens, **{"speculative": "off", **extra})


async def until(condition: Callable[[], bool], what: str) -> None:
    """Wait for the scheduler thread to reach a state (polling the event loop, never a fixed sleep)."""
    for _ in range(4000):
        if condition():
            return
        await asyncio.sleep(0.005)
    raise AssertionError(f"timed out waiting for {what}")


async def close_a_stream_and_check_its_sequence_is_freed(model: LoadedModel, prompt: list[int], long: int) -> None:
    """Close a `long` request's stream after three tokens: its slot and KV cells free, the next request runs."""
    stream = model.generate(greedy(prompt, long))
    seen = [await anext(stream) for _ in range(3)]
    assert all(event.token_ids for event in seen)
    assert model.stats().requests_running == 1
    assert model.stats().kv_cache_used_tokens > len(prompt)
    await stream.aclose()  # type: ignore[attr-defined]
    await until(lambda: model.stats().requests_running == 0, "the cancelled request to leave its slot")
    assert model.stats().kv_cache_used_tokens == 0
    after = await run(model, greedy(prompt, 4))
    assert after.last.finish_reason == "length"


async def cancel_a_consuming_task(model: LoadedModel, request: GenerationRequest) -> None:
    """Cancel a task that is reading `request`'s events, once the first event has arrived."""
    started = asyncio.Event()

    async def consume() -> None:
        async for _event in model.generate(request):
            started.set()

    task = asyncio.create_task(consume())
    await started.wait()
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
