"""Constrained output for ExLlamaV2: an ExLlamaV2Filter backed by llguidance.

ExLlamaV2 asks each filter `begin(prefix)`, `feed(token)` and `next() -> (pass_tokens, end_tokens)`
(exllamav2/generator/filters/base.py); sampling keeps only `pass_tokens` and ends the job with
eos_reason "end_filter" when it samples one of `end_tokens`. A filter that answers (None, None)
constrains nothing that step (the sampler skips it: generator/sampler.py, since 0.2.8), which is how a
lazy constraint waits for its trigger. The class is built over the runtime's own base class, so this
module imports no runtime itself. Never run on a GPU in lazy mode: tested on the CPU only, through this
interface, with real llguidance (tests/engines/exllama/test_lazy_grammar_matcher.py).
"""

from __future__ import annotations

from typing import Any

from launcher.engines.exllama_common._grammar_matcher import GrammarMatcher, LazyGrammarMatcher


def llguidance_filter_class(base: type[Any]) -> type[Any]:
    """An ExLlamaV2Filter subclass (of `base`, the runtime's ExLlamaV2Filter) enforcing a (lazy) grammar."""

    class LLGuidanceV2Filter(base):  # type: ignore[misc, valid-type]
        """Allows only tokens that keep the output inside the grammar (once a lazy one took over)."""

        def __init__(self, model: Any, tokenizer: Any, matcher: GrammarMatcher | LazyGrammarMatcher) -> None:
            super().__init__(model, tokenizer)
            self.matcher = matcher

        def clone(self, c: Any = None) -> Any:
            raise NotImplementedError("grammar filters are per job and never cloned")

        def begin(self, prefix_str: str = "") -> None:
            self.matcher.reset()

        def feed(self, token: Any) -> None:
            self.matcher.consume(int(token.item() if hasattr(token, "item") else token))

        def next(self) -> tuple[set[int] | None, set[int] | None]:
            allowed = self.matcher.allowed()
            if allowed is None:
                return None, None
            return set(allowed[0]), set(allowed[1])

        def use_background_worker(self) -> bool:
            # A grammar mask is CPU work: let the generator overlap it with the next forward pass.
            return True

    return LLGuidanceV2Filter
