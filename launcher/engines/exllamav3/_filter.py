"""Lazy grammars for ExLlamaV3: a subclass of the runtime's `Filter` over a LazyGrammarMatcher.

How exllamav3 (1.4.1: generator/generator.py, generator/job.py, generator/filter/filter.py) uses a
filter: before each forward pass it asks every filter whose `is_active` is true for
`get_next_logit_mask()` (a packed int32 bitmask of shape (1, ceil(vocab / 32)), bit t % 32 of word
t // 32 set = token t allowed, or a dense additive mask), and it tells every filter, active or not, of
each sampled token with `feed(token)`, whose True ends the job (eos_reason "end_filter"). Upstream's own
lazy filter waits for one token (`trigger_token`); a lazy constraint's triggers are regular expressions
over the text, so this class decides `feed` and `is_active` itself: inactive (no mask is computed)
until the output matches a trigger, then active until the grammar is complete, which ends the job.
Requests without triggers keep the runtime's own LLGuidanceFilter.

NEVER RUN ON A GPU: written from exllamav3 1.4.1's source and tested on the CPU only, with real
llguidance, against the stand-in runtime (tests/engines/exllama/standin_v3.py), which drives filters
as that source does. Older exllamav3 releases call `accept_token` on active filters only and never
`feed`, so the engine offers lazy grammars only where `Filter.feed` exists.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from launcher.engines.exllama_common._grammar_matcher import LazyGrammarMatcher


def runs_lazy_filters(filter_base: type[Any]) -> bool:
    """The runtime tells inactive filters of sampled tokens (exllamav3 >= 1.4.1), which lazy filters need."""
    return callable(getattr(filter_base, "feed", None))


def lazy_filter_class(filter_base: type[Any], torch: Any) -> type[Any]:
    """A subclass of `filter_base` (the runtime's exllamav3.Filter) enforcing a LazyGrammarMatcher."""

    class LazyGrammarFilter(filter_base):  # type: ignore[misc, valid-type]
        """No constraint until the lazy matcher's trigger matched; from then on, the grammar's tokens only."""

        def __init__(self, tokenizer: Any, matcher: LazyGrammarMatcher) -> None:
            self.lazy = matcher
            super().__init__(tokenizer, trigger_token=None, prefix_str=None, eos_after_completed=True)

        @property
        def is_active(self) -> bool:
            """Whether the generator asks this filter for a mask: only while the grammar constrains."""
            return self.lazy.constraining and not self.lazy.completed

        @is_active.setter
        def is_active(self, value: bool) -> None:
            # The runtime sets it from trigger_token (at construction and when the job starts); here the
            # lazy matcher's state decides, so those writes are ignored.
            pass

        def reset(self) -> None:
            self.lazy.reset()

        def feed(self, token: int) -> bool:
            self.lazy.consume(int(token))
            return bool(self.eos_after_completed and self.lazy.completed)

        def accept_token(self, token: int) -> None:
            self.lazy.consume(int(token))

        def rewind(self, num_tokens: int) -> None:
            # The runtime rewinds filters only for banned strings, which this engine never sets; the
            # trigger watch could not take back a match anyway.
            if num_tokens:
                raise NotImplementedError("lazy grammar filters cannot be rewound")

        def get_next_logit_mask(self) -> Any:
            words = self.lazy.bitmask()
            if words is None:  # asked only while active; say so rather than mask everything
                raise RuntimeError("a lazy grammar filter was asked for a mask before its trigger matched")
            return torch.from_numpy(words.view(np.int32)).unsqueeze(0)

        def is_completed(self) -> bool:
            return self.lazy.completed

    return LazyGrammarFilter
