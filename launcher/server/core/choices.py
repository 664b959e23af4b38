"""Several choices for one request (OpenAI's `n`): each its own sample of the same prompt.

How they run: choice 0 starts as any request does, and the others start once it has read the
prompt (its first token is out), then generate beside it. Not all at once: requests the engine
admits in the same step find no sequence holding the prompt yet, so each would read all of it.
Not one after another either, although a finished sequence leaves its prompt to the next one:
the engines decode several sequences in one step (`--parallel`, 4 by default) for much less than
as many steps cost, so n choices one at a time would take up to n times as long. Started after the
first token, llama.cpp's later sequences copy the prompt's cells from the running one and read
only its last token (/metrics' prefix-cache hits count them); MLX keeps only finished requests'
prompts, so there the later choices read the prompt again, batched together. Choices beyond the
engine's parallel sequences wait in its queue as requests do (a full queue fails the request).

Seeds: with the request's seed, choice 0 uses it as it is (so it is the reply n=1 gives) and
choice i a seed derived from it and i, so the whole answer is reproducible; without one each
choice draws its own.

A request is answered whole or not at all: when one choice fails (an engine error, a stopping
server), the events end with that choice's failing `Finish` and the routes answer the error.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
from collections.abc import AsyncIterator, Awaitable, Callable, Iterable
from typing import Any, Generic, Protocol, TypeVar

from launcher.server.core.chat import ChatEvent, ChatRun
from launcher.server.core.generation import Finish, Generation, Usage, cut_short
from launcher.server.errors import ApiError


class Run(Protocol):
    """One choice under way: a chat run (`chat.ChatStream`) or a raw completion's `Generation`."""

    def events(self) -> AsyncIterator[ChatEvent]:
        """Its events, ending with a `Finish`."""
        ...

    async def aclose(self) -> None:
        """Stop generating."""
        ...


RunT = TypeVar("RunT", bound=Run)


def choice_seed(seed: int | None, index: int) -> int | None:
    """The sampling seed of choice `index` for the request's `seed`.

    Choice 0 keeps the seed; the others get a hash of it and their index rather than seed + i, so
    that no choice of one request is a choice of the request with the next seed. 32 bits: what
    llama.cpp's sampler takes whole.
    """
    if seed is None or index == 0:
        return seed
    digest = hashlib.blake2b(f"{seed}/{index}".encode(), digest_size=4).digest()
    return int.from_bytes(digest, "big")


def total_usage(finishes: Iterable[Finish]) -> Usage:
    """The usage of a request with several choices, as OpenAI counts it: the prompt once (with what
    choice 0 found cached: the cache the client's prompt met), the completion tokens of all."""
    ends = list(finishes)
    first = ends[0].usage
    completion = sum(end.usage.completion_tokens for end in ends)
    return Usage(first.prompt_tokens, completion, first.cached_tokens)


def _prompt_read(run: object) -> Awaitable[None] | None:
    """What to await before the later choices start, where the engine's progress can be seen; None:
    choice 0's first event stands for it (a model still loading, a remote)."""
    if isinstance(run, ChatRun):
        return run.generation.prompt_read()
    if isinstance(run, Generation):
        return run.prompt_read()
    return None


class Choices(Generic[RunT]):
    """The runs of one request's `count` choices; `events()` gives theirs, tagged with the choice's index.

    `start(i)` starts choice i (i >= 1); an `ApiError` it raises (a full queue, a stopping server)
    is that choice's failure. Always `aclose()`.
    """

    def __init__(self, first: RunT, count: int, start: Callable[[int], Awaitable[RunT]]) -> None:
        self._runs: list[RunT] = [first]
        self._count = count
        self._start = start
        self._closed = False

    async def events(self) -> AsyncIterator[tuple[int, ChatEvent]]:
        """Each choice's events in its own order, the choices interleaved as they come; the last is a
        failing choice's `Finish` when one fails."""
        streams: dict[int, AsyncIterator[ChatEvent]] = {0: aiter(self._runs[0].events())}
        waiting: dict[asyncio.Future[ChatEvent], int] = {}

        def arm(index: int) -> None:
            waiting[asyncio.ensure_future(anext(streams[index]))] = index

        arm(0)
        read = _prompt_read(self._runs[0]) if self._count > 1 else None
        prompt_read = asyncio.ensure_future(read) if read is not None else None
        started = self._count == 1
        try:
            while waiting:
                watched: set[asyncio.Future[Any]] = set(waiting)
                if not started and prompt_read is not None:
                    watched.add(prompt_read)
                done, _ = await asyncio.wait(watched, return_when=asyncio.FIRST_COMPLETED)
                for future in sorted((f for f in done if f in waiting), key=waiting.__getitem__):
                    index = waiting.pop(future)
                    try:
                        event = future.result()
                    except StopAsyncIteration:
                        continue
                    yield index, event
                    if isinstance(event, Finish) and cut_short(event) is not None:
                        return  # the request failed: the other choices stop (finally)
                    arm(index)
                if not started:
                    started = True
                    for index in range(1, self._count):
                        try:
                            run = await self._start(index)
                        except ApiError as err:  # as the same request alone would have been refused
                            yield index, Finish("error", Usage(0, 0), error=err.message, refused=err)
                            return
                        self._runs.append(run)
                        if self._closed:  # closed while it started
                            await run.aclose()
                            return
                        streams[index] = aiter(run.events())
                        arm(index)
        finally:
            pending: list[asyncio.Future[Any]] = [*waiting]
            if prompt_read is not None:
                pending.append(prompt_read)
            for future in pending:
                future.cancel()
                with contextlib.suppress(asyncio.CancelledError, StopAsyncIteration):
                    await future

    async def aclose(self) -> None:
        """Stop every choice (client gone or done)."""
        self._closed = True
        for run in self._runs:
            await run.aclose()
