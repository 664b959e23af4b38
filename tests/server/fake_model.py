"""A scripted LoadedModel for server tests that need exact model output (tool-call text, stop strings).

It is a test double of the engine seam only: characters are tokens, the reply is whatever the
test scripted, streamed one character per event. Everything above the seam (HTTP, templates,
parsers, SSE) is the real server. Tests that can use the real llama.cpp engine do.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass, field
from typing import Literal

from launcher.engines._jobs import check_prompt, refusal
from launcher.engines.base import (
    EngineStats,
    GenerationEvent,
    GenerationRequest,
    ModelInfo,
    QueueFullError,
)

CHATML = (
    "{% for m in messages %}<|im_start|>{{ m.role }}\n{{ m.content }}<|im_end|>\n{% endfor %}"
    "{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}"
)


def fake_info(**overrides: object) -> ModelInfo:
    """ModelInfo of the fake model (chatml template, 512-token context)."""
    values: dict[str, object] = dict(
        id="fake-model",
        engine="fake",
        engine_version="0",
        path="/nonexistent/fake.gguf",
        format="gguf",
        architecture="qwen2",
        context_length=4096,
        train_context_length=4096,
        vocab_size=0x110000,
        quant="F16",
        chat_template=CHATML,
        bos_token=None,
        eos_token="<|im_end|>",
        eos_token_ids=(0,),
        add_bos_token=False,
        can_embed=False,
        parallel=2,
    )
    values.update(overrides)
    return ModelInfo(**values)  # type: ignore[arg-type]


@dataclass
class FakeModel:
    """Replies with `reply(prompt_text)`, one character per token, `delay` seconds apart.

    `first_delay` is the time before the first token, like a long prompt being read.
    """

    reply: Callable[[str], str] = lambda prompt: "Hello from the fake model."
    delay: float = 0.0
    first_delay: float = 0.0
    info: ModelInfo = field(default_factory=fake_info)
    queue_full: bool = False
    requests: list[GenerationRequest] = field(default_factory=list)
    running: int = 0
    closed_early: int = 0
    closed: bool = False

    def tokenize(self, text: str, *, add_special: bool = False, parse_special: bool = True) -> list[int]:
        """One token per character."""
        return [ord(c) for c in text]

    def detokenize(self, tokens: list[int]) -> str:
        """Characters back."""
        return "".join(chr(t) for t in tokens)

    def generate(self, request: GenerationRequest) -> AsyncIterator[GenerationEvent]:
        """Stream the scripted reply, after the prompt check every engine makes (a refused request is
        neither run nor recorded)."""
        checked = check_prompt(request, vocab_size=self.info.vocab_size, context=self.info.context_length)
        if checked.problem is not None:
            return _single(refusal(request, checked.problem, checked.fault))
        if self.queue_full:
            raise QueueFullError(retry_after_s=2.0)
        self.requests.append(checked.request)
        return self._run(checked.request)

    async def _run(self, request: GenerationRequest) -> AsyncIterator[GenerationEvent]:
        text = self.reply(self.detokenize(request.prompt_tokens))
        self.running += 1
        finished = False
        try:
            produced = 0
            if self.first_delay:
                await asyncio.sleep(self.first_delay)
            for index, char in enumerate(text):
                if produced >= request.max_tokens:
                    break
                if self.delay:
                    await asyncio.sleep(self.delay)
                produced += 1
                yield GenerationEvent(token_ids=(ord(char),), text=char)
                del index
            reason: Literal["stop", "length"] = "length" if produced < len(text) else "stop"
            finished = True
            yield GenerationEvent(
                finish_reason=reason, prompt_tokens=len(request.prompt_tokens), completion_tokens=produced
            )
        finally:
            self.running -= 1
            if not finished:
                self.closed_early += 1

    async def embed(self, texts: list[str]) -> list[list[float]]:
        """Not an embedding model."""
        raise NotImplementedError

    def stats(self) -> EngineStats:
        """Live numbers."""
        return EngineStats(requests_running=self.running, kv_cache_total_tokens=1024)

    def close(self) -> None:
        """Nothing to free."""
        self.closed = True


async def _single(event: GenerationEvent) -> AsyncIterator[GenerationEvent]:
    yield event
