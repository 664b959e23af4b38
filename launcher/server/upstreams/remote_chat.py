"""Chat requests another server answers, as the same events a local model's `ChatRun` yields.

A chat request of any API becomes `ChatOptions` in its route; for a remote model (`ModelEntry.remote`)
those go upstream as one streamed OpenAI Chat Completions request, and the upstream's deltas come
back as `TextDelta`, `ReasoningDelta`, `ToolCallDelta` and a `Finish`. The OpenAI, Anthropic and
Responses routes write them out as they write a local model's, so a backend that speaks only Chat
Completions (vLLM, SGLang, most providers) serves Claude Code's Messages and Codex's Responses too.

- **Keys.** The request carries the upstream's own key (`Upstream.headers`), built from nothing the
  client sent: the client's Authorization and x-api-key never leave this server.
- **Errors before any output** keep the caller's error shape: the upstream's 4xx passes through
  with its message; its 401/403 means this server's key for it is wrong (a 502: the client's own
  key was fine); 429 and 503 keep their status and Retry-After; a 5xx or no answer at all is a 502.
- **Mid-reply**, an upstream that drops the connection, or sends an error event, ends the reply
  with an error `Finish`, which each route writes as its own error event.
- **A client that goes away** closes the upstream request (`aclose`), so the upstream stops generating.
- **Bounds.** The answer must start within `upstream.HEADERS_TIMEOUT_S` (a 504 otherwise); a line of
  the stream must come within `READ_TIMEOUT_S` of the one before and be no longer than
  `MAX_LINE_BYTES`, the reply no longer than `MAX_REPLY_BYTES` (inflated); an error body is read to
  `MAX_ERROR_BYTES`. The request's max_tokens (or --max-output-tokens) is counted here too: an
  upstream that goes on past it is closed, and the reply ends with "length". The reader stops
  reading upstream while `BUFFERED_BYTES` wait for a client that does not read.
- **An answer that is not a stream** (a server that ignores `stream: true`) is read as a whole
  chat completion; one that is not a chat completion is a 502 saying so.
"""

from __future__ import annotations

import asyncio
import json
import logging
import time
from collections.abc import AsyncIterator
from typing import Any

import httpx

from launcher.server.core.chat import ChatEvent, ChatOptions, ReasoningDelta, TextDelta, ToolCallDelta
from launcher.server.core.generation import Finish, FinishReason, Usage
from launcher.server.errors import ApiError
from launcher.server.metrics import ServerMetrics
from launcher.server.request_log import current_request
from launcher.server.upstreams import upstream as limits
from launcher.server.upstreams.remote_answers import (
    ToolCalls,
    choice_logprobs,
    error_fields,
    payloads_of,
    sentence,
    sse_payloads,
    timed_out,
    upstream_error,
    usage_of,
    whole_answer,
)
from launcher.server.upstreams.remote_request import request_body
from launcher.server.upstreams.upstream import (
    AnswerTooLarge,
    AnswerUnreadable,
    RemoteModel,
    call_timeout,
    read_head,
    unreachable,
)

log = logging.getLogger(__name__)

CLOSE_TIMEOUT_S = 5.0
"""How long closing waits for the upstream connection to close."""
AFTER_LIMIT_EVENTS = 8
"""Events still read (not relayed) once the reply reached its max tokens here, for the upstream's own
finish and usage, before the upstream is closed."""
BUFFERED_BYTES = 256 * 1024
"""Reply text read from upstream that its client has not taken yet; past it, the upstream is not read."""

_FINISH_REASONS: dict[str, FinishReason] = {
    "stop": "stop",
    "length": "length",
    "tool_calls": "tool_calls",
    "function_call": "tool_calls",
    "content_filter": "stop",
    "abort": "cancelled",  # SGLang's, for a request it dropped
    "error": "error",
}


def _size_of(event: ChatEvent | Finish) -> int:
    """About what an event holds in memory while it waits for its client."""
    if isinstance(event, TextDelta | ReasoningDelta):
        return len(event.text) + 64
    if isinstance(event, ToolCallDelta):
        return len(event.call.arguments) + len(event.call.name) + 64
    return 64


class RemoteChat:
    """A chat reply an upstream is writing (the `ChatStream` the routes write out).

    The upstream is read by a task of its own, which hands the events over through a queue: the
    route's task is cancelled when its client goes away, and a cancellation that lands inside the
    HTTP client's read can leave the upstream connection open (the client's own cleanup is then
    cancelled too), so the upstream would go on generating for nobody. The reader task is only
    ever cancelled once, by `aclose`, and closes the connection on its way out.
    """

    def __init__(
        self,
        name: str,
        remote: RemoteModel,
        response: httpx.Response,
        metrics: ServerMetrics,
        *,
        started: float,
        capped: bool,
        stops: list[str],
        limit: int | None = None,
        payloads: AsyncIterator[str] | None = None,
    ) -> None:
        self.name = name  # this server's name for the model
        self.remote = remote
        self._response = response
        self._payloads = payloads if payloads is not None else sse_payloads(response)
        self._limit = limit  # the reply's max tokens, counted here too: the upstream may not keep to it
        self._metrics = metrics
        self._started = started
        self._capped = capped
        self._stops = stops
        self._prompt_tokens = 0
        self._generated = 0
        self._interrupted: str | None = None
        self.finished = False
        self._record = current_request()
        # What the client has not read yet waits here, up to BUFFERED_BYTES: past that the reader waits
        # (`_room`), the upstream's bytes stay in the socket and TCP slows the upstream down.
        self._queue: asyncio.Queue[ChatEvent] = asyncio.Queue()
        self._buffered = 0
        self._room = asyncio.Event()
        self._room.set()
        self._reader = asyncio.ensure_future(self._read())

    @property
    def prompt_tokens(self) -> int:
        """The prompt's size once the upstream has said it (0 before)."""
        return self._prompt_tokens

    async def events(self) -> AsyncIterator[ChatEvent]:
        """The reply's events, then its `Finish` (an error one when the upstream failed mid-reply)."""
        while True:
            event = await self._queue.get()
            self._buffered -= _size_of(event)
            if self._buffered <= BUFFERED_BYTES:
                self._room.set()
            yield event
            if isinstance(event, Finish):
                return

    async def _read(self) -> None:
        """Relay the upstream's reply into the queue, and close the connection when it ends or is cancelled."""
        try:
            async for event in self._relay():
                await self._room.wait()
                self._queue.put_nowait(event)
                self._buffered += _size_of(event)
                if self._buffered > BUFFERED_BYTES:
                    self._room.clear()
        except asyncio.CancelledError:
            if self._interrupted is not None:  # the server is stopping: the client still gets a proper end
                usage = Usage(self._prompt_tokens, self._generated)
                self._queue.put_nowait(self._finish(None, usage, None, None, tool_calls=0))
        except Exception as err:  # a reply of a shape this server did not expect: an error end, not a hang
            log.debug("reading the remote's reply failed", exc_info=err)
            usage = Usage(self._prompt_tokens, self._generated)
            error = f"the remote {self.remote.upstream.name} sent a reply this server cannot read ({err})"
            self._queue.put_nowait(self._finish(None, usage, None, error, tool_calls=0))
        finally:
            close = getattr(self._payloads, "aclose", None)
            if close is not None:
                await close()
            await self._response.aclose()

    async def _relay(self) -> AsyncIterator[ChatEvent]:
        calls = ToolCalls()
        reason: str | None = None
        usage: Usage | None = None
        stop_sequence: str | None = None
        error: str | None = None
        ended = False  # [DONE] came
        cut = False  # this server's count of tokens reached the limit
        after_cut = 0
        first_at: float | None = None
        upstream = self.remote.upstream
        try:
            async for payload in self._payloads:
                if payload.strip() == "[DONE]":
                    ended = True
                    break
                if cut:
                    after_cut += 1
                    if after_cut > AFTER_LIMIT_EVENTS:
                        break
                try:
                    chunk = json.loads(payload)
                except (ValueError, RecursionError):
                    log.debug("skipping a piece of the remote's stream that is not JSON: %.80s", payload)
                    continue
                if not isinstance(chunk, dict):
                    continue
                if "error" in chunk or chunk.get("object") == "error":
                    error = error_fields(payload.encode())[0] or "the remote reported an error"
                    break
                usage = usage_of(chunk.get("usage")) or usage
                for choice in chunk.get("choices") or []:
                    if not isinstance(choice, dict) or choice.get("index", 0) != 0:
                        continue  # one choice per request: n > 1 is not asked for
                    pieces = [] if cut else self._pieces(choice, calls)
                    if pieces and first_at is None:
                        first_at = time.monotonic()
                        self._first_token(first_at)
                    for piece in pieces:
                        self._generated += 1  # about one token per piece: the count when no usage comes
                        yield piece
                        if self._limit is not None and self._generated >= self._limit:
                            cut, reason = True, "length"  # unless the upstream says it ended there
                            break
                    if choice.get("finish_reason"):
                        reason = str(choice["finish_reason"])
                        matched = choice.get("stop_reason")  # vLLM: the stop string that ended it
                        stop_sequence = matched if isinstance(matched, str) and matched in self._stops else None
        except (httpx.HTTPError, httpx.StreamError) as err:
            error = f"{unreachable(upstream, err)} (it stopped answering mid-reply)"
        except TimeoutError:
            error = f"the remote {upstream.name} sent nothing for {limits.READ_TIMEOUT_S:g} s mid-reply"
        except (AnswerTooLarge, AnswerUnreadable) as err:
            error = f"the remote {upstream.name} sent {err}"
        if cut and error is not None:  # what went wrong after the limit does not matter to the reply
            log.debug("after the reply's limit: %s", error)
            error = None
        if error is None and reason is None and not ended:
            error = f"the remote {upstream.name} closed the stream before the end of the reply"
        if error is None and not cut:  # a call cut short by the limit is not a call
            for call in calls.finish():
                yield call
        final = usage or Usage(0, self._generated)
        self._prompt_tokens = final.prompt_tokens
        yield self._finish(reason, final, stop_sequence, error, tool_calls=calls.emitted)

    def _pieces(self, choice: dict[str, Any], calls: ToolCalls) -> list[ChatEvent]:
        """The events in one choice delta: reasoning, text, and the tool calls it completes."""
        delta = choice.get("delta") or {}
        pieces: list[ChatEvent] = []
        reasoning = delta.get("reasoning_content") or delta.get("reasoning")
        if isinstance(reasoning, str) and reasoning:
            pieces.append(ReasoningDelta(reasoning))
        content = delta.get("content")
        logprobs = choice_logprobs(choice)
        if (isinstance(content, str) and content) or logprobs:
            text = content if isinstance(content, str) else ""
            pieces.append(TextDelta(text, logprobs))
            if self._record is not None:
                self._record.add_reply_text(text)
        for call in delta.get("tool_calls") or []:
            if isinstance(call, dict):
                pieces.extend(calls.add(call))
        return pieces

    def _first_token(self, now: float) -> None:
        ttft = now - self._started
        self._metrics.ttft.labels(self.name).observe(ttft)
        if self._record is not None:
            self._record.ttft_s = ttft

    def _finish(
        self, reason: str | None, usage: Usage, stop_sequence: str | None, error: str | None, *, tool_calls: int
    ) -> Finish:
        self._metrics.prompt_tokens.labels(self.name).inc(usage.prompt_tokens)
        self._metrics.generation_tokens.labels(self.name).inc(usage.completion_tokens)
        if self._record is not None:
            self._record.prompt_tokens = usage.prompt_tokens
            self._record.generated_tokens = usage.completion_tokens
            self._record.cached_tokens = usage.cached_tokens
        if self._interrupted is not None:
            return Finish("cancelled", usage, error=self._interrupted)
        if error is not None:
            log.warning("%s: %s", self.name, error)
            return Finish("error", usage, error=error, upstream_error=True)
        finish: FinishReason = _FINISH_REASONS.get(reason or "stop", "stop")
        if finish == "length" and self._capped:
            finish = "stop"  # this server's --max-output-tokens ended it (see generation.start_generation)
        if tool_calls and finish in ("stop", "length"):
            finish = "tool_calls"
        return Finish(finish, usage, stop_sequence=stop_sequence)

    def interrupt(self, reason: str) -> None:
        """End the reply now with a "cancelled" finish the route still writes (the server is stopping)."""
        if self._reader.done():
            return
        self._interrupted = reason
        self._reader.cancel()

    async def aclose(self) -> None:
        """Stop relaying (client gone, or done): the upstream sees its connection close and stops generating."""
        if self.finished:
            return
        self.finished = True
        if not self._reader.done():
            self._reader.cancel()
        await asyncio.wait({self._reader}, timeout=CLOSE_TIMEOUT_S)
        self._metrics.duration.labels(self.name).observe(time.monotonic() - self._started)


async def start_remote_chat(
    client: httpx.AsyncClient,
    name: str,
    remote: RemoteModel,
    options: ChatOptions,
    metrics: ServerMetrics,
    output_cap: int | None,
) -> RemoteChat:
    """Send the request upstream and wait for its answer to start; errors are raised before any output."""
    upstream = remote.upstream
    body, capped = request_body(remote.model, options, output_cap)
    headers = upstream.headers() | {"Accept-Encoding": limits.ACCEPT_ENCODING}
    request = client.build_request(
        "POST", upstream.base_url + "/chat/completions", json=body, headers=headers, timeout=call_timeout()
    )
    started = time.monotonic()
    try:
        async with asyncio.timeout(limits.HEADERS_TIMEOUT_S):
            response = await client.send(request, stream=True)
    except TimeoutError as err:
        raise timed_out(upstream, limits.HEADERS_TIMEOUT_S) from err
    except httpx.HTTPError as err:
        raise ApiError(
            502,
            f"{sentence(unreachable(upstream, err))}. `launcher remote list` checks it.",
            code="remote_unreachable",
        ) from err
    stops = options.settings.stops
    limit = body.get("max_tokens")
    if response.status_code != 200:
        try:
            async with asyncio.timeout(limits.SMALL_CALL_DEADLINE_S):
                content = await read_head(response, limits.MAX_ERROR_BYTES)
        except TimeoutError:
            content = b""
        finally:
            await response.aclose()
        raise upstream_error(upstream, response.status_code, content, response.headers)
    if "text/event-stream" not in response.headers.get("content-type", "text/event-stream"):
        answer = await whole_answer(upstream, response)  # a server that does not stream: the reply at once
        payloads = payloads_of(answer)
        return RemoteChat(
            name, remote, response, metrics, started=started, capped=capped, stops=stops, limit=limit, payloads=payloads
        )
    return RemoteChat(name, remote, response, metrics, started=started, capped=capped, stops=stops, limit=limit)
