"""What a remote answers, read within this server's bounds (`upstream`): its errors as this server's,
its SSE stream as payloads, a non-streamed answer as the one chunk that says the same, and the pieces
of a chunk (tool-call deltas, logprobs, usage) as `remote_chat` relays them.
"""

from __future__ import annotations

import asyncio
import json
import re
from collections.abc import AsyncIterator
from typing import Any

import httpx

from launcher.engines.base import TokenLogprob
from launcher.server.core.chat import ToolCallDelta
from launcher.server.core.generation import Usage
from launcher.server.core.toolcalls import ParsedToolCall
from launcher.server.errors import ApiError
from launcher.server.upstreams import upstream as limits
from launcher.server.upstreams.upstream import (
    AnswerTooLarge,
    AnswerUnreadable,
    Upstream,
    decoded_pieces,
    lines,
    read_capped,
    unreachable,
)

_CONTROL = re.compile(r"[\x00-\x08\x0b-\x1f\x7f]")


# -- errors -------------------------------------------------------------------------------------------
def error_fields(content: bytes) -> tuple[str | None, str | None, str | None]:
    """(message, param, code) of an error body: OpenAI's {"error": {...}}, vLLM's and SGLang's older
    {"object": "error", "message": ...}, FastAPI's {"detail": ...}."""
    try:
        data = json.loads(content)
    except (ValueError, RecursionError):
        text = content.decode("utf-8", "replace").strip()
        return (_cut(text) or None), None, None
    if not isinstance(data, dict):
        return None, None, None
    error = data.get("error")
    detail: dict[str, Any] = error if isinstance(error, dict) else data
    message = detail.get("message") or data.get("detail")
    param, code = detail.get("param"), detail.get("code")
    return (
        _cut(str(message)) if message else None,
        str(param) if isinstance(param, str) else None,
        str(code) if isinstance(code, str) else None,
    )


def _cut(text: str) -> str:
    """A remote's words, cut to what a client's error message can carry."""
    limit = limits.ERROR_MESSAGE_CHARS
    text = _CONTROL.sub("?", text)  # escaped in JSON, each would take six characters of the client's message
    return text if len(text) <= limit else text[:limit] + f"... ({len(text) - limit} more characters)"


def upstream_error(upstream: Upstream, status: int, content: bytes, headers: httpx.Headers) -> ApiError:
    """The error this server answers for an upstream that refused a request before any output."""
    message, param, code = error_fields(content)
    said = message or f"HTTP {status}"
    if status in (401, 403):
        return ApiError(
            502,
            f"The remote {upstream.name} refused this server's key for it ({status}: {said}). Register it again "
            f"with its key: launcher remote add {upstream.name} URL --api-key-stdin.",
            code="remote_key_refused",
        )
    if status in (429, 503):
        return ApiError(
            status,
            f"The remote {upstream.name} is busy: {said}",
            headers={"Retry-After": headers.get("retry-after", "5")},
        )
    if 400 <= status < 500:
        return ApiError(status, said, param=param, code=code)  # the remote's own words about the request
    return ApiError(502, f"The remote {upstream.name} failed (HTTP {status}): {said}", code="remote_error")


def sentence(text: str) -> str:
    return text[:1].upper() + text[1:]


def bad_answer(upstream: Upstream, what: str) -> ApiError:
    """The 502 for an upstream whose answer this server cannot use."""
    return ApiError(502, f"The remote {upstream.name} sent {what}.", code="remote_bad_answer")


def timed_out(upstream: Upstream, seconds: float) -> ApiError:
    """The 504 for an upstream that did not start answering in time."""
    return ApiError(
        504, f"The remote {upstream.name} did not start answering within {seconds:g} s.", code="remote_timeout"
    )


# -- the reply ----------------------------------------------------------------------------------------
async def sse_payloads(response: httpx.Response) -> AsyncIterator[str]:
    """The `data:` payloads of an SSE stream, one per event (comments and event names skipped), each line
    within READ_TIMEOUT_S of the one before (TimeoutError) and the sizes' bounds (AnswerTooLarge)."""
    data: list[str] = []
    size = 0
    stream = lines(decoded_pieces(response, limits.MAX_REPLY_BYTES), limits.MAX_LINE_BYTES)
    try:
        while True:
            try:
                async with asyncio.timeout(limits.READ_TIMEOUT_S):
                    raw = await anext(stream)
            except StopAsyncIteration:
                break
            line = raw.decode("utf-8", "replace")
            if not line:
                if data:
                    yield "\n".join(data)
                    data, size = [], 0
            elif line.startswith("data:"):
                data.append(line[5:].removeprefix(" "))
                size += len(line)
                if size > limits.MAX_LINE_BYTES:
                    raise AnswerTooLarge("an event larger than the line limit")
        if data:
            yield "\n".join(data)
    finally:
        await stream.aclose()


async def payloads_of(answer: dict[str, Any]) -> AsyncIterator[str]:
    """A whole chat completion as the one streamed chunk that says the same, then the stream's end."""
    choice = answer["choices"][0]
    message = choice["message"]
    delta = {key: message.get(key) for key in ("content", "reasoning_content", "reasoning") if message.get(key)}
    calls = message.get("tool_calls")
    if isinstance(calls, list):
        delta["tool_calls"] = [dict(call, index=i) for i, call in enumerate(calls) if isinstance(call, dict)]
    streamed: dict[str, Any] = {"index": 0, "delta": delta, "finish_reason": choice.get("finish_reason") or "stop"}
    if choice.get("logprobs"):
        streamed["logprobs"] = choice["logprobs"]
    chunk = {"choices": [streamed], "usage": answer.get("usage")}
    yield json.dumps(chunk)
    yield "[DONE]"


def completion(upstream: Upstream, content: bytes) -> dict[str, Any]:
    """A non-streamed answer, checked to be a chat completion (a 502 saying what it is otherwise)."""
    try:
        answer = json.loads(content)
    except (ValueError, RecursionError):
        shown = content[:80].decode("utf-8", "replace")
        raise bad_answer(upstream, f"an answer that is not JSON ({shown!r})") from None
    if isinstance(answer, dict) and ("error" in answer or answer.get("object") == "error"):
        said = error_fields(content)[0] or "no message"
        raise ApiError(502, f"The remote {upstream.name} failed: {said}", code="remote_error")
    choices = answer.get("choices") if isinstance(answer, dict) else None
    first = choices[0] if isinstance(choices, list) and choices else None
    if not isinstance(first, dict) or not isinstance(first.get("message"), dict):
        raise bad_answer(upstream, "JSON that is not a chat completion (no choices[0].message)")
    return dict(answer)


class ToolCalls:
    """Tool-call deltas gathered by index; a call is complete once a later one starts or the reply ends."""

    def __init__(self) -> None:
        self._open: dict[int, dict[str, str]] = {}
        self._next = 0  # the index a call without one gets when it starts
        self.emitted = 0

    def add(self, delta: dict[str, Any]) -> list[ToolCallDelta]:
        """One delta; returns the calls it shows to be complete."""
        index = delta.get("index")
        if not isinstance(index, int):  # a server that leaves the index out: a new id starts a new call
            current = max(self._open) if self._open else None
            fresh = current is None or bool(delta.get("id") and delta.get("id") != self._open[current]["id"])
            index = self._next if fresh or current is None else current
        self._next = max(self._next, index + 1)
        call = self._open.setdefault(index, {"id": "", "name": "", "arguments": ""})
        function = delta.get("function") or {}
        call["id"] = call["id"] or str(delta.get("id") or "")
        call["name"] += str(function.get("name") or "")
        call["arguments"] += str(function.get("arguments") or "")
        return self._complete(before=index)

    def _complete(self, before: int | None = None) -> list[ToolCallDelta]:
        out = []
        for index in sorted(i for i in self._open if before is None or i < before):
            call = self._open.pop(index)
            arguments = call["arguments"] or "{}"
            parsed = (
                ParsedToolCall(call["name"], arguments, call["id"])
                if call["id"]
                else ParsedToolCall(call["name"], arguments)
            )
            out.append(ToolCallDelta(self.emitted, parsed))
            self.emitted += 1
        return out

    def finish(self) -> list[ToolCallDelta]:
        return self._complete()


def choice_logprobs(choice: dict[str, Any]) -> tuple[TokenLogprob, ...]:
    content = (choice.get("logprobs") or {}).get("content") or []
    out = []
    for item in content:
        if not isinstance(item, dict):
            continue
        top = tuple(
            (str(alt.get("token", "")), float(alt.get("logprob", 0.0)))
            for alt in item.get("top_logprobs") or []
            if isinstance(alt, dict)
        )
        # -1: the upstream's token ids are not this server's to know; only text and numbers are passed on
        out.append(TokenLogprob(-1, str(item.get("token", "")), float(item.get("logprob", 0.0)), top))
    return tuple(out)


def usage_of(data: Any) -> Usage | None:
    if not isinstance(data, dict):
        return None
    details = data.get("prompt_tokens_details") or {}
    cached = details.get("cached_tokens") if isinstance(details, dict) else 0
    try:
        return Usage(int(data.get("prompt_tokens") or 0), int(data.get("completion_tokens") or 0), int(cached or 0))
    except (TypeError, ValueError, OverflowError):
        return None  # counts that are not numbers: this server's own count stands


async def whole_answer(upstream: Upstream, response: httpx.Response) -> dict[str, Any]:
    """A non-streamed answer, read whole within the bounds of a reply (a 502 or 504 when it is not)."""
    try:
        async with asyncio.timeout(limits.READ_TIMEOUT_S):
            content = await read_capped(response, limits.MAX_REPLY_BYTES)
    except TimeoutError as err:
        await response.aclose()
        raise ApiError(
            504,
            f"The remote {upstream.name} did not finish its answer within {limits.READ_TIMEOUT_S:g} s.",
            code="remote_timeout",
        ) from err
    except (AnswerTooLarge, AnswerUnreadable) as err:
        await response.aclose()
        raise bad_answer(upstream, str(err)) from err
    except httpx.HTTPError as err:
        await response.aclose()
        raise ApiError(502, f"{sentence(unreachable(upstream, err))} (mid-answer).", code="remote_unreachable") from err
    try:
        return completion(upstream, content)
    except ApiError:
        await response.aclose()
        raise
