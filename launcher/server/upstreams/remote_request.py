"""The Chat Completions request a remote model gets for a chat request of any API (`remote_chat`).

Only what the client asked for travels: the sampler settings a hosted API would refuse unknown are
left out unless the client set them, and this server's --max-output-tokens lowers the limit.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

from launcher.engines.base import Constraint, SamplingParams
from launcher.server.core.chat import ChatOptions
from launcher.server.core.messages import ChatMessage
from launcher.server.errors import bad_request


def wire_messages(messages: Sequence[ChatMessage]) -> list[dict[str, Any]]:
    """The typed history as Chat Completions messages, whose tool-call arguments are JSON strings: the one
    place a remote model's messages are made."""
    out: list[dict[str, Any]] = []
    for message in messages:
        item = message.as_dict()
        for call in item.get("tool_calls", ()):
            call["function"]["arguments"] = json.dumps(call["function"]["arguments"] or {}, ensure_ascii=False)
        out.append(item)
    return out


def _response_format(constraint: Constraint | None) -> dict[str, Any] | None:
    if constraint is None:
        return None
    if constraint.kind == "json_object":
        return {"type": "json_object"}
    if constraint.kind == "json_schema":
        return {"type": "json_schema", "json_schema": {"name": "reply", "schema": constraint.schema or {}}}
    raise bad_request(f"A {constraint.kind} constraint cannot be passed on to a remote model.")


def _sampling(sampling: SamplingParams) -> dict[str, Any]:
    """The sampler settings: temperature and top_p always (what a local engine would use), the others only
    when the client set them, since a hosted API refuses parameters it does not know."""
    defaults = SamplingParams()
    body: dict[str, Any] = {"temperature": sampling.temperature, "top_p": sampling.top_p}
    if sampling.top_k != defaults.top_k:
        body["top_k"] = sampling.top_k
    if sampling.min_p != defaults.min_p:
        body["min_p"] = sampling.min_p
    if sampling.seed is not None:
        body["seed"] = sampling.seed
    if sampling.presence_penalty != defaults.presence_penalty:
        body["presence_penalty"] = sampling.presence_penalty
    if sampling.frequency_penalty != defaults.frequency_penalty:
        body["frequency_penalty"] = sampling.frequency_penalty
    if sampling.repeat_penalty != defaults.repeat_penalty:
        body["repetition_penalty"] = sampling.repeat_penalty  # vLLM's and SGLang's name
        body["repeat_penalty"] = sampling.repeat_penalty  # llama.cpp's and the launcher's
    if sampling.logit_bias:
        body["logit_bias"] = {str(token): bias for token, bias in sampling.logit_bias.items()}
    return body


def request_body(model: str, options: ChatOptions, output_cap: int | None) -> tuple[dict[str, Any], bool]:
    """The upstream request for `options`, and whether this server's --max-output-tokens lowered its limit.

    The launcher's own `speculative` setting stays here: vLLM, SGLang and hosted APIs do not know it (they
    speculate, if at all, as they were started)."""
    settings = options.settings
    body: dict[str, Any] = {
        "model": model,
        "messages": wire_messages(options.messages),
        "stream": True,
        "stream_options": {"include_usage": True},
        **_sampling(settings.sampling),
    }
    if options.tools and options.tool_choice != "none":
        body["tools"] = options.tools
        choice = options.tool_choice
        named = {"type": "function", "function": {"name": choice}}
        body["tool_choice"] = choice if choice in ("auto", "required") else named
    limit, capped = settings.max_tokens, False
    if output_cap is not None and (limit is None or limit > output_cap):
        limit, capped = output_cap, True
    if limit is not None:
        body["max_tokens"] = limit
    response_format = _response_format(settings.constraint)
    if response_format is not None:
        body["response_format"] = response_format
    if settings.stops:
        body["stop"] = settings.stops
    if settings.logprobs is not None:
        body["logprobs"] = True
        body["top_logprobs"] = settings.logprobs
    if settings.ignore_eos:
        body["ignore_eos"] = True
    return body, capped
