"""The shared generation driver: tokens in, text pieces out, with stop strings, usage and metrics.

Every endpoint goes through `start_generation`: it hands the prompt to the engine (a full queue is
a 429 before any stream starts), whose one prompt check (`engines._jobs.check_prompt`: empty, over
the context) refuses what cannot run and bounds max_tokens by the room left; such a refusal is a
400 before any stream starts, an over-long prompt in the hosted APIs' words. The first token
is not awaited: reading a long prompt takes seconds to minutes, and a streaming client must get
its headers and first event at once, then keep-alives, not silence. Iterating the `Generation`
yields `Chunk`s and one final `Finish`.
Stop strings are matched here: text that could be the start of a stop string is held back
until it is known not to be one.
"""

from __future__ import annotations

import asyncio
import contextlib
import math
import time
import weakref
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from typing import Literal

import anyio

from launcher.core.config import SpeculativeMode
from launcher.core.errors import in_context
from launcher.engines.base import (
    Constraint,
    GenerationEvent,
    GenerationRequest,
    LoadedModel,
    QueueFullError,
    SamplingParams,
    TokenLogprob,
)
from launcher.server.errors import ApiError, bad_request
from launcher.server.metrics import ModelMetrics
from launcher.server.request_log import current_request

# "tool_calls" is the chat layer's: a reply that made tool calls ends so (chat.ChatRun).
FinishReason = Literal["stop", "length", "tool_calls", "cancelled", "error"]

# How long start_generation waits for the engine's first event: enough for a refusal the engine
# queues up front (bad prompt, bad constraint) to become an HTTP error, short against any prefill.
REFUSAL_WAIT_S = 0.05

# The longest token text of any vocabulary we know is far below this (runs of spaces or `=`).
MAX_BYTES_PER_TOKEN = 256


@dataclass
class GenerationSettings:
    """What one request asks of the generation, whatever API it arrived on: the engine's options (as
    `GenerationRequest` names them), the client's length limit (None: none) and the stop strings,
    which are matched here, not by engines."""

    max_tokens: int | None = None
    sampling: SamplingParams = field(default_factory=SamplingParams)
    constraint: Constraint | None = None
    stops: list[str] = field(default_factory=list)
    logprobs: int | None = None  # top alternatives per token; None: no logprobs
    ignore_eos: bool = False
    speculative: SpeculativeMode | None = None  # None: the server's --speculative
    request_id: str = ""


@dataclass(frozen=True)
class Usage:
    """Token counts of one request."""

    prompt_tokens: int
    completion_tokens: int
    cached_tokens: int = 0

    @property
    def total_tokens(self) -> int:
        """Prompt plus completion."""
        return self.prompt_tokens + self.completion_tokens


@dataclass(frozen=True)
class Chunk:
    """A piece of generated text (never part of a stop string)."""

    text: str
    logprobs: tuple[TokenLogprob, ...] = ()


@dataclass(frozen=True)
class Finish:
    """The end of a generation."""

    reason: FinishReason
    usage: Usage
    stop_sequence: str | None = None
    error: str | None = None
    request_error: bool = False  # the engine refused the request as asked (a 400, not a 500)
    upstream_error: bool = False  # another server answering for this one failed (a 502, not a 500)
    refused: ApiError | None = None  # the error the request met before any output (a stream's cold start)


def failure(error: str | None, *, request_error: bool) -> ApiError:
    """The HTTP error for a generation that failed before any output (see `refused` for a refusal event)."""
    if request_error:
        return bad_request(in_context("The request cannot run", error or "refused by the engine"))
    return ApiError(500, f"Generation failed: {error or 'engine error'}")


def refused(event: GenerationEvent) -> ApiError:
    """The HTTP error for the engine's refusal of a request (its single, final event): an empty or
    over-long prompt as the hosted APIs answer it, anything else as `failure`."""
    fault = event.prompt_fault
    if fault is not None and fault.kind == "empty":
        return bad_request("The prompt is empty.", param="messages")
    if fault is not None:
        return _too_long(
            f"{event.prompt_tokens} tokens, and the model's maximum context length is {fault.context} tokens "
            "for prompt and reply together"
        )
    return failure(event.error, request_error=event.request_error)


# What a client should wait before retrying a reply cut by a stopping server: about as long as a
# restart takes to listen again (the model load is waited for by the request itself).
CUT_RETRY_AFTER_S = 2


def cut_short(finish: Finish) -> ApiError | None:
    """The error of a reply that did not end on its own (None: it did: stop, length, tool calls).

    A "cancelled" reply was cut from outside (the server stopping, the model unloaded under it, an
    upstream dropping it): a 503 with Retry-After, since the same request will work again. An
    "error" is the engine's failure (a 500), its refusal of the request as asked (a 400), or the
    failure of a remote answering for this server (a 502, as when it fails before any output).
    Routes send this instead of a finish: a half answer marked "stop" is one an agent acts on as
    if it were whole, while an error is one every client and SDK retries or reports.
    """
    if finish.refused is not None:
        return finish.refused
    if finish.reason == "cancelled":
        why = finish.error or "the model's server dropped the request"
        return ApiError(
            503,
            f"The reply was cut short: {why}. Retry the request.",
            code="reply_cut_short",
            headers={"Retry-After": str(CUT_RETRY_AFTER_S)},
        )
    if finish.reason == "error" and finish.upstream_error:
        return ApiError(502, f"The reply was cut short: {finish.error or 'the remote failed'}.", code="remote_error")
    if finish.reason == "error":
        return failure(finish.error, request_error=finish.request_error)
    return None


def _held_back(text: str, stops: list[str]) -> int:
    """How many trailing characters of `text` could begin a stop string."""
    best = 0
    for stop in stops:
        for size in range(min(len(stop) - 1, len(text)), best, -1):
            if text.endswith(stop[:size]):
                best = size
                break
    return best


class Generation:
    """One running generation; iterate it for `Chunk`s then a `Finish`. Always `aclose()` it."""

    def __init__(
        self,
        stream: AsyncIterator[GenerationEvent],
        first: asyncio.Future[GenerationEvent],
        *,
        prompt_tokens: int,
        stops: list[str],
        metrics: ModelMetrics,
        started: float,
        output_cap: int | None = None,
        context: int = 0,
    ) -> None:
        self.prompt_tokens = prompt_tokens
        self._output_cap = output_cap  # the server's --max-output-tokens, where it is below the client's limit
        self._context = context  # the model's context per request
        self._stream = stream
        self._first: asyncio.Future[GenerationEvent] | None = first  # the engine's first event, maybe pending
        self._first_event = first  # kept after it is read: `prompt_read` waits on it
        self._stops = [s for s in stops if s]
        self._metrics = metrics
        self._started = started
        self._last_token_at: float | None = None
        self._first_token_at = 0.0
        self._first_tokens = 0  # tokens in the first event (not decode steps of this stream)
        self._completion_tokens = 0
        self._closed = False
        self._interrupted: str | None = None
        self._record = current_request()  # the request log line this generation fills in
        if self._record is not None:
            self._record.prompt_tokens = prompt_tokens

    def _observe(self, event: GenerationEvent) -> None:
        count = len(event.token_ids)
        if not count:
            return
        now = time.monotonic()
        if self._record is not None:
            self._record.generated_tokens += count
        if self._last_token_at is None:
            ttft = now - self._started
            self._metrics.ttft.observe(ttft)
            if self._record is not None:
                self._record.ttft_s = ttft
            uncached = max(self.prompt_tokens - event.cached_prompt_tokens, 0)
            self._metrics.prefill_rate.add(uncached, now)
            if uncached:
                self._metrics.prefill_uncached_tokens.inc(uncached)
                self._metrics.prefill_seconds.inc(ttft)
            self._first_token_at, self._first_tokens = now, count
            self._metrics.busy.started(now)
        else:
            self._metrics.inter_token.observe((now - self._last_token_at) / count)
        self._last_token_at = now
        self._completion_tokens += count
        self._metrics.generation_tokens.inc(count)
        self._metrics.decode_rate.add(count, now)

    async def _events(self) -> AsyncIterator[GenerationEvent]:
        if self._first is not None:
            try:
                first = await self._first
            finally:
                self._first = None
            yield first
        async for event in self._stream:
            yield event

    async def __aiter__(self) -> AsyncIterator[Chunk | Finish]:
        pending = ""
        pending_logprobs: list[TokenLogprob] = []
        cached = disk = 0
        async for event in self._events():
            if self._interrupted is not None and event.finish_reason is None:
                event = GenerationEvent(finish_reason="cancelled", error=self._interrupted)
            self._observe(event)
            cached = max(cached, event.cached_prompt_tokens)
            disk = max(disk, event.disk_prompt_tokens)
            if self._record is not None:
                self._record.cached_tokens = cached
                self._record.disk_tokens = disk
                if event.draft_tokens:  # the final event's, for the whole request
                    self._record.draft_tokens = event.draft_tokens
                    self._record.accepted_draft_tokens = event.accepted_draft_tokens
            pending += event.text
            pending_logprobs.extend(event.logprobs)
            if self._record is not None:
                self._record.add_reply_text(event.text)
            if self._stops:
                hits = [(pending.find(stop), stop) for stop in self._stops if stop in pending]
                if hits:
                    index, stop = min(hits)
                    if index:
                        yield Chunk(pending[:index], tuple(pending_logprobs))
                    await self.aclose()
                    yield Finish("stop", self._usage(event, cached), stop_sequence=stop)
                    return
            if event.finish_reason is not None:
                if pending:
                    yield Chunk(pending, tuple(pending_logprobs))
                usage = self._usage(event, cached)
                reason = (
                    "stop" if event.finish_reason == "length" and self._ended_by_cap(usage) else event.finish_reason
                )
                refusal = refused(event) if event.prompt_fault is not None else None
                yield Finish(reason, usage, error=event.error, request_error=event.request_error, refused=refusal)
                await self.aclose()
                return
            hold = _held_back(pending, self._stops) if self._stops else 0
            ready = pending[: len(pending) - hold]
            if ready or pending_logprobs:
                yield Chunk(ready, tuple(pending_logprobs))
                pending, pending_logprobs = pending[len(ready) :], []
        # The engine ended without a finish event (it should not); still close cleanly.
        if pending:
            yield Chunk(pending)
        yield Finish("stop", Usage(self.prompt_tokens, self._completion_tokens, cached))

    def _ended_by_cap(self, usage: Usage) -> bool:
        """Whether the server's --max-output-tokens ended a reply that ran to its length: it reached the
        cap with room still left in the context (a reply that filled the context ends as "length")."""
        cap = self._output_cap
        return cap is not None and usage.completion_tokens >= cap and usage.total_tokens < self._context

    def _usage(self, event: GenerationEvent, cached: int) -> Usage:
        completion = max(event.completion_tokens, self._completion_tokens)
        prompt = event.prompt_tokens or self.prompt_tokens
        return Usage(prompt, completion, cached)

    def events(self) -> AsyncIterator[Chunk | Finish]:
        """The `Chunk`s and the final `Finish` (the same as iterating the generation)."""
        return self.__aiter__()

    async def prompt_read(self) -> None:
        """Return once the engine has read the prompt: its first event (the first token, or the end
        of a request it refused or cut) has come. A later request of the same prompt started from
        then on finds it in the engine's prefix cache (choices.py)."""
        await asyncio.wait({self._first_event})

    @property
    def finished(self) -> bool:
        """True once the generation has ended (its Finish was produced or it was closed)."""
        return self._closed

    @property
    def interrupted(self) -> bool:
        """True once `interrupt` was called."""
        return self._interrupted is not None

    async def interrupt(self, reason: str) -> None:
        """End this generation with a "cancelled" finish that the route still writes to its client
        (server shutdown), as an error in its API's terms (`cut_short`): at once for the engines'
        streams, else at the next event."""
        self._interrupted = reason  # checked at each event, for streams without `interrupt`
        interrupt = getattr(self._stream, "interrupt", None)
        if interrupt is not None and not self._closed:
            interrupt(reason)  # ends the wait for the next event at once (a first one too: same queue)

    async def aclose(self) -> None:
        """Stop the engine's sequence (stop string found, client gone, request done)."""
        if self._closed:
            return
        self._closed = True
        now = time.monotonic()
        self._metrics.duration.observe(now - self._started)
        if self._last_token_at is not None:
            self._metrics.busy.ended(self._last_token_at)
            decoded = self._completion_tokens - self._first_tokens
            if decoded > 0:
                self._metrics.stream_decode_tokens.inc(decoded)
                self._metrics.stream_decode_seconds.inc(self._last_token_at - self._first_token_at)
        if self._first is not None and not self._first.done():
            self._first.cancel()  # the engine's stream turns this into a cancelled job
            with contextlib.suppress(asyncio.CancelledError):
                await self._first
        closer = getattr(self._stream, "aclose", None)
        if closer is not None:
            await closer()


def check_prompt_chars(chars: int, context: int) -> None:
    """Refuse a prompt that cannot fit before spending time tokenizing it.

    No vocabulary has tokens longer than MAX_BYTES_PER_TOKEN, and a character is at least a byte,
    so a prompt over `context * MAX_BYTES_PER_TOKEN` characters is over `context` tokens for sure.
    """
    if chars > context * MAX_BYTES_PER_TOKEN:
        raise _too_long(
            f"{chars:,} characters, far more than the model's maximum context length of {context} tokens holds"
        )


def _too_long(why: str) -> ApiError:
    """The 400 for a prompt that does not fit, as OpenAI answers it (`context_length_exceeded`).

    The message holds the words of both hosted APIs, "prompt is too long" (Anthropic's) and "maximum
    context length" (OpenAI's): clients that shorten a conversation and retry on an overflow
    recognise it by the message where they do not read the code (Anthropic's errors have none).
    """
    return bad_request(
        f"The prompt is too long: {why}. Shorten the conversation or restart the server with a larger --context.",
        param="messages",
        code="context_length_exceeded",
    )


def needs_bos(model: LoadedModel, prompt: str, template_bos: str = "") -> bool:
    """Whether tokenizing `prompt` should add BOS: not when a rendered chat prompt already starts with it."""
    return model.info.add_bos_token and not (template_bos and prompt.startswith(template_bos))


async def tokenize_prompt(model: LoadedModel, prompt: str | list[int]) -> list[int]:
    """Tokens of a raw prompt (token ids pass through), tokenized on a worker thread: a long prompt
    takes seconds, and every other request and /health would wait for it on the event loop."""
    if isinstance(prompt, list):
        return list(prompt)
    check_prompt_chars(len(prompt), model.info.context_length)
    add_bos = needs_bos(model, prompt)
    return await anyio.to_thread.run_sync(lambda: model.tokenize(prompt, add_special=add_bos, parse_special=True))


async def start_generation(
    model: LoadedModel,
    metrics: ModelMetrics,
    prompt_tokens: list[int],
    settings: GenerationSettings,
    *,
    output_cap: int | None = None,
    live: weakref.WeakSet[Generation] | None = None,
    checkpoint_hints: tuple[int, ...] = (),
) -> Generation:
    """Start generating; raises ApiError 400 (the engine refused the prompt: empty, too long) or 429
    (queue full) before any output.

    `output_cap` is the server's own limit (--max-output-tokens). A reply it ends finishes as
    "stop", not "length": the client asked for more, and an agent told its reply was cut short
    asks again to continue (Claude Code retries, then fails the turn), which a small model that
    rambles would never satisfy.
    """
    context = model.info.context_length
    count = len(prompt_tokens)
    limit = settings.max_tokens
    if output_cap is not None and (limit is None or output_cap < limit):
        limit = output_cap
    else:
        output_cap = None  # the client's own limit is the lower one: a reply it ends is "length"
    request = GenerationRequest(
        prompt_tokens=prompt_tokens,
        max_tokens=context if limit is None else limit,  # the engine bounds it by the room the prompt leaves
        sampling=settings.sampling,
        constraint=settings.constraint,
        logprobs=settings.logprobs,
        ignore_eos=settings.ignore_eos,
        request_id=settings.request_id,
        speculative=settings.speculative,
        checkpoint_hints=checkpoint_hints,
    )
    prepare = getattr(model, "prepare_constraint", None)  # engines whose schema compile is worth a thread
    if prepare is not None and request.constraint is not None:
        # Off the event loop: even within its bounds, a big schema's grammar takes milliseconds that
        # every other stream and /health would wait for.
        await anyio.to_thread.run_sync(prepare, request.constraint)
    started = time.monotonic()
    try:
        stream = model.generate(request)
        first = asyncio.ensure_future(_next_event(stream, count))
        await asyncio.wait({first}, timeout=REFUSAL_WAIT_S)
        if first.done():
            first.result()  # an engine that refuses on its first step raises here
    except QueueFullError as err:
        raise ApiError(
            429,
            "The server is busy: too many requests are waiting. Retry shortly.",
            code="queue_full",
            headers={"Retry-After": str(max(1, math.ceil(err.retry_after_s)))},
        ) from err
    refusal = first.result() if first.done() else None
    if refusal is not None and refusal.finish_reason in ("error", "cancelled") and not refusal.token_ids:
        closer = getattr(stream, "aclose", None)
        if closer is not None:
            await closer()
        if refusal.finish_reason == "cancelled":  # the model was unloaded under the request
            raise ApiError(503, "The model is not loaded any more; retry shortly.", headers={"Retry-After": "2"})
        raise refused(refusal)
    metrics.prompt_tokens.inc(count)
    generation = Generation(
        stream,
        first,
        prompt_tokens=count,
        stops=settings.stops,
        metrics=metrics,
        started=started,
        output_cap=output_cap,
        context=context,
    )
    if live is not None:  # the server's running generations, ended properly when it stops
        live.add(generation)
    return generation


async def _next_event(stream: AsyncIterator[GenerationEvent], prompt_tokens: int) -> GenerationEvent:
    """The stream's next event, as a coroutine that can run as a task (an empty stream ends as "stop")."""
    try:
        return await stream.__anext__()
    except StopAsyncIteration:
        return GenerationEvent(finish_reason="stop", prompt_tokens=prompt_tokens)
