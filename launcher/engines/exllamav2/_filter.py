"""Constrained output for ExLlamaV2: an ExLlamaV2Filter backed by llguidance.

ExLlamaV2 asks each filter `begin(prefix)`, `feed(token)` and `next() -> (pass_tokens, end_tokens)`
(exllamav2/generator/filters/base.py); sampling keeps only `pass_tokens` and ends the job with
eos_reason "end_filter" when it samples one of `end_tokens`. The class is built over the runtime's
own base class, so this module imports no runtime itself.
"""

from __future__ import annotations

from typing import Any

from launcher.engines.exllama_common._grammar_matcher import GrammarMatcher


def llguidance_filter_class(base: type[Any]) -> type[Any]:
    """An ExLlamaV2Filter subclass (of `base`, the runtime's ExLlamaV2Filter) enforcing a GrammarMatcher."""

    class LLGuidanceV2Filter(base):  # type: ignore[misc, valid-type]
        """Allows only tokens that keep the output inside the grammar."""

        def __init__(self, model: Any, tokenizer: Any, matcher: GrammarMatcher) -> None:
            super().__init__(model, tokenizer)
            self.matcher = matcher

        def clone(self, c: Any = None) -> Any:
            raise NotImplementedError("grammar filters are per job and never cloned")

        def begin(self, prefix_str: str = "") -> None:
            self.matcher.reset()

        def feed(self, token: Any) -> None:
            self.matcher.consume(int(token.item() if hasattr(token, "item") else token))

        def next(self) -> tuple[set[int], set[int]]:
            allowed, ending = self.matcher.allowed()
            return set(allowed), set(ending)

        def use_background_worker(self) -> bool:
            # A grammar mask is CPU work: let the generator overlap it with the next forward pass.
            return True

    return LLGuidanceV2Filter
